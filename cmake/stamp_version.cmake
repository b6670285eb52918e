# Writes src/version.hpp.in to OUT with the git revision of SOURCE_DIR as it is at build time (run by
# the divsim_version target on every build: a revision read at configure time goes stale with the next
# commit, and every HDF5 file names the binary that wrote it). "-dirty" marks tracked files changed
# since that commit. configure_file leaves OUT untouched when nothing changed, so nothing recompiles.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE DIVSIM_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT DIVSIM_GIT_SHA)
  set(DIVSIM_GIT_SHA "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND DIVSIM_GIT_SHA "-dirty")
  endif()
endif()
configure_file(${IN} ${OUT} @ONLY)
