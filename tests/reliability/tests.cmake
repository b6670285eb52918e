# Reliability tests (issue 9; docs/reliability.md): the journal's unit tests, and the real binary under
# real mpiexec for bad input, failing ranks, whole-job kills with recovery, and a full disk.
# Included by tests/CMakeLists.txt; needs the divsim and divsim-recover targets.
set(DIVSIM_RELIABILITY_DIR ${CMAKE_CURRENT_LIST_DIR})
find_program(DIVSIM_MPIEXEC NAMES mpiexec.mpich mpiexec REQUIRED)

add_executable(divsim_reliability_tests ${DIVSIM_RELIABILITY_DIR}/test_journal.cpp
                                        ${CMAKE_CURRENT_SOURCE_DIR}/unit/main.cpp)
target_link_libraries(divsim_reliability_tests PRIVATE divsim_core GTest::gtest ZLIB::ZLIB)
gtest_discover_tests(divsim_reliability_tests PROPERTIES LABELS "unit;reliability" DISCOVERY_TIMEOUT 60)

# divsim_reliability_test(<name> <labels> <timeout s> <script.py> [script arguments...])
function(divsim_reliability_test name labels timeout script)
  add_test(NAME ${name}
           COMMAND /usr/bin/python3 ${DIVSIM_RELIABILITY_DIR}/${script} --divsim $<TARGET_FILE:divsim>
                   --mpiexec ${DIVSIM_MPIEXEC} --workdir ${CMAKE_BINARY_DIR}/test-output/${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
                       ENVIRONMENT "PYTHONPATH=${DIVSIM_RELIABILITY_DIR}")
endfunction()

divsim_reliability_test(reliability.bad_input "mpi;reliability" 600 bad_input.py)
divsim_reliability_test(reliability.failing_rank.n4 "mpi;reliability" 300 failing_rank.py --ranks 4)
divsim_reliability_test(reliability.io_error "mpi;reliability" 300 io_error.py
                        --recover $<TARGET_FILE:divsim-recover>)
# 12 kills at random moments; the soak (kill_job.py --trials 80, docs/reliability.md) stays out of the
# suite: 3 more minutes for the same property.
divsim_reliability_test(reliability.kill_job "mpi;reliability" 600 kill_job.py
                        --recover $<TARGET_FILE:divsim-recover> --trials 12)
divsim_reliability_test(reliability.small_shm "mpi;reliability" 600 small_shm.py)
set_tests_properties(reliability.small_shm PROPERTIES SKIP_RETURN_CODE 77)
