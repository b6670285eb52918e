"""Command line: `python3 -m divsim diagnose RUN.h5 [--reference BASE.h5] [--json] [--blind]`.

Prints the diagnosis (text, or JSON whose "causes" is the ranked list, [] for a healthy run) and exits
0; exits 2 with one message on stderr when a file is missing or is not a divsim run. Warnings (a run
read from its .partial) are one line each on stderr. A reader that closes the pipe early (`| head`)
ends the command quietly with status 141, as SIGPIPE would. `evaluate` runs the fault-catalog scenario
study (divsim.evaluate). Nothing else lives here. Users run it as `build/divsim diagnose ...` and
`build/divsim evaluate ...`: the binary runs this module with the interpreter set when divsim is
configured (DIVSIM_ANALYSIS_PYTHON, default /usr/bin/python3) and PYTHONPATH=analysis.
"""
import argparse
import os
import sys
import warnings

from .diagnose import diagnose


def main(argv=None):
    parser = argparse.ArgumentParser(prog="divsim", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("diagnose", help="diagnose one run, optionally against a reference run")
    d.add_argument("run", help="the run's HDF5 file")
    d.add_argument("--reference", help="a reference run: the fault-free baseline of the same configuration "
                                       "(against another one, the configuration difference is reported)")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")
    d.add_argument("--blind", action="store_true",
                   help="never read /faults, the config's fault lines or events naming a fault")
    e = sub.add_parser("evaluate", help="score diagnose on generated fault scenarios (see docs/analysis.md)")
    from .evaluate import add_arguments
    add_arguments(e)
    args = parser.parse_args(argv)
    if args.command == "evaluate":
        from .evaluate import main as evaluate_main
        return evaluate_main(args)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            result = diagnose(args.run, reference=args.reference, blind=args.blind)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"divsim diagnose: error: {e}", file=sys.stderr)
        return 2
    print(result.to_json() if args.json else result)
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"divsim diagnose: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()  # inside the try: a closed pipe shows at the flush
    except BrokenPipeError:
        # Python's documented idiom: point stdout at devnull so that the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # 128 + SIGPIPE, what `set -o pipefail` sees of cat or grep
    sys.exit(code)
