# Checks of the bench/ plumbing and its C++ helpers (bench/test_bench.py): seconds, no timing. Included
# from tests/CMakeLists.txt; needs add_subdirectory(bench) at the top level for the helper targets.
find_program(DIVSIM_BENCH_MPIEXEC NAMES mpiexec.mpich mpiexec REQUIRED)
foreach(check IN ITEMS flops products_seconds openblas_core write_section bad_settings gemm_rate_helper h5_rate_helper)
  add_test(NAME bench.${check}
           COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/bench/test_bench.py -k ${check})
  set_tests_properties(bench.${check} PROPERTIES LABELS python TIMEOUT 300
                       ENVIRONMENT "DIVSIM=$<TARGET_FILE:divsim>;MPIEXEC=${DIVSIM_BENCH_MPIEXEC}")
endforeach()
set_tests_properties(bench.h5_rate_helper PROPERTIES LABELS "python;mpi")
