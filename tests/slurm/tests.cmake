# Slurm tests (issue 7): the real jobscripts under a real single-node Slurm that each test starts and
# stops itself (tools/local_slurm.py, also behind tools/local-slurm for users; Debian packages slurm-wlm and munge). They skip (exit 77)
# where Slurm is not installed; timelimit and preempt also skip until divsim lists run.resume.
# Each holds the lock `slurm`: one local cluster at a time. The two resume tests also run SERIAL (no
# other test alongside): they size their job from a calibration run, and a job that runs faster than its
# calibration because the tests beside it finished meanwhile completes before Slurm stops it.
set(DIVSIM_SLURM_DIR ${CMAKE_CURRENT_LIST_DIR})

# divsim_slurm_test(NAME <name> [SERIAL] LABELS <labels> TIMEOUT <s> ARGS <test_slurm.py arguments>)
function(divsim_slurm_test)
  cmake_parse_arguments(T "SERIAL" "NAME;TIMEOUT" "LABELS;ARGS" ${ARGN})
  add_test(NAME ${T_NAME}
           COMMAND /usr/bin/python3 ${DIVSIM_SLURM_DIR}/test_slurm.py ${T_ARGS}
                   --workdir ${CMAKE_BINARY_DIR}/test-output/${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
                       ENVIRONMENT
                       "DIVSIM=$<TARGET_FILE:divsim>;PYTHONPATH=${DIVSIM_SLURM_DIR}:${DIVSIM_SLURM_DIR}/../mpi:${PROJECT_SOURCE_DIR}/tools")
  if("slurm" IN_LIST T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES RESOURCE_LOCK slurm)
  endif()
  if(T_SERIAL)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()

divsim_slurm_test(NAME slurm.worldsize_array LABELS slurm TIMEOUT 600 ARGS worldsize)
divsim_slurm_test(NAME slurm.single_run LABELS slurm TIMEOUT 600 ARGS single)
divsim_slurm_test(NAME slurm.workstation LABELS slurm TIMEOUT 600 ARGS workstation)
divsim_slurm_test(NAME slurm.fault_matrix LABELS slurm TIMEOUT 600 ARGS faults)
divsim_slurm_test(NAME slurm.requeue_jobscript LABELS slurm TIMEOUT 600 ARGS requeue)
divsim_slurm_test(NAME slurm.timelimit_resume SERIAL LABELS slurm TIMEOUT 1500 ARGS timelimit)
divsim_slurm_test(NAME slurm.preempt_resume SERIAL LABELS slurm TIMEOUT 1500 ARGS preempt --signals 3)
divsim_slurm_test(NAME sweep.tool LABELS python TIMEOUT 300 ARGS sweep-tool)
