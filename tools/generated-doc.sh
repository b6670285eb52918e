# Sourced by the tools/gen-*-doc.sh scripts, which write a doc from the binary and check it in CTest:
# their arguments ([TOOL] [--check]) and the write-or-check step. The caller sets `tool` to its default,
# calls parse_doc_args "$@", defines generate() (the doc on stdout) and calls write_or_check DOC.

parse_doc_args() {
  check=""
  for a in "$@"; do
    case $a in
      --check) check=1 ;;
      *) tool=$a ;;
    esac
  done
}

# --check: write nothing; exit 1 with a diff when DOC is not what generate() prints.
write_or_check() {
  local doc=$1
  if [[ -n $check ]]; then
    if ! diff -u "$doc" <(generate); then
      echo "$doc is out of date: run tools/$(basename "$0")" >&2
      exit 1
    fi
  else
    generated_doc_tmp=$(mktemp)
    trap 'rm -f "$generated_doc_tmp"' EXIT
    generate > "$generated_doc_tmp"  # complete before DOC, which generate() may read, is replaced
    cat "$generated_doc_tmp" > "$doc"
  fi
}
