# Python analysis tests (issue 6): pytest on the divsim package in analysis/ with small real runs of the
# binary (made once per test entry, in its own folder under the build tree), diagnose on real runs of
# every catalog fault, the tour notebook executed headless with Debian's python3 kernel, and a tiny
# `divsim evaluate` study. Label python.
find_program(DIVSIM_MPIEXEC NAMES mpiexec.mpich mpiexec REQUIRED)
set(DIVSIM_PY_TESTS ${CMAKE_CURRENT_LIST_DIR})

# divsim_python_test(<name> FILES <test files...>)
function(divsim_python_test name)
  cmake_parse_arguments(T "" "" "FILES" ${ARGN})
  add_test(NAME ${name}
           COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${T_FILES}
           WORKING_DIRECTORY ${DIVSIM_PY_TESTS})
  set_tests_properties(${name} PROPERTIES LABELS python TIMEOUT 300
                       ENVIRONMENT "DIVSIM=$<TARGET_FILE:divsim>;MPIEXEC=${DIVSIM_MPIEXEC};DIVSIM_TEST_DIR=${CMAKE_BINARY_DIR}/test-output/${name};MPLBACKEND=Agg;PYTHONDONTWRITEBYTECODE=1")
endfunction()

divsim_python_test(python.analysis FILES test_run.py test_compare.py test_diagnose.py test_cli.py test_plots_sweep.py)
divsim_python_test(python.faults FILES test_faults.py)
divsim_python_test(python.notebook FILES test_notebook.py)
divsim_python_test(python.evaluate FILES test_evaluate.py)
# validation/text_data.py against the fixtures and the numbers the C++ loader's unit tests hold (no binary).
divsim_python_test(python.text_data FILES test_text_data.py)
# README's worked example, run as written and held to its printed figures.
divsim_python_test(docs.readme_example FILES test_readme.py)
