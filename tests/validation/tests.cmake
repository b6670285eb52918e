# Validation against real peers (issue 5), label `validation` (plus `slow` above about a minute): the
# PyTorch replay of each case of validation/replay_cases.py and its negative controls, the replay CLI on a
# configuration given on the command line and its refusals, the real-DDP signature comparison at W=2 and
# W=4, and the seed claims. Scripts and their thresholds live in validation/; this file only registers them.
find_program(DIVSIM_MPIEXEC NAMES mpiexec.mpich mpiexec REQUIRED)
set(DIVSIM_VALIDATION_DIR ${PROJECT_SOURCE_DIR}/validation)

# divsim_validation_test(NAME <name> LABELS <labels> SCRIPT <script.py> [TIMEOUT s] [PASS_REGEX re] ARGS <args...>)
# PASS_REGEX: the test passes when the output matches (for expected refusals) instead of on exit status 0.
function(divsim_validation_test)
  cmake_parse_arguments(T "" "NAME;SCRIPT;TIMEOUT;PASS_REGEX" "LABELS;ARGS" ${ARGN})
  set(workdir ${CMAKE_BINARY_DIR}/test-output/${T_NAME})
  add_test(NAME ${T_NAME}
           COMMAND /usr/bin/python3 ${DIVSIM_VALIDATION_DIR}/${T_SCRIPT} --divsim $<TARGET_FILE:divsim>
                   --mpiexec ${DIVSIM_MPIEXEC} --workdir ${workdir} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                       ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  if(T_PASS_REGEX)
    set_tests_properties(${T_NAME} PROPERTIES PASS_REGULAR_EXPRESSION "${T_PASS_REGEX}")
  endif()
endfunction()

foreach(case sgd_constant sgd_cosine_warmup sgd_accum4_label_smoothing sgd_bn_accum4_w2 sgd_syncbn_w2 sgd_max_micro_w2
             sgd_nesterov_wd_clip_w4 adamw_cosine_warmup_label_smoothing adamw_wd_narrow resnet_sgd_w2
             resnet_syncbn_accum2_w2 vit_adamw_w2 gpt_adamw_w2)
  divsim_validation_test(NAME validation.replay.${case} LABELS validation SCRIPT replay_cases.py ARGS --case ${case})
endforeach()
divsim_validation_test(NAME validation.replay.controls LABELS "validation;slow" SCRIPT replay_cases.py ARGS --controls
                       TIMEOUT 900)
divsim_validation_test(NAME validation.replay.1000_steps LABELS "validation;slow" SCRIPT replay_cases.py
                       ARGS --case sgd_constant --steps 1000 --reference TIMEOUT 1800)
# A configuration given on the command line, as a user (or a reviewer) would.
divsim_validation_test(NAME validation.replay.cli LABELS validation SCRIPT replay.py
                       ARGS -- --model.hidden=64,32 --optim.lr=0.01 --batch.global=64 --train.steps=100)
# Bad input: a configuration the replay cannot reproduce is refused with a message naming the key.
divsim_validation_test(NAME validation.replay.refuses_dropout LABELS validation SCRIPT replay.py
                       PASS_REGEX "replay: cannot replay: dropout layers"
                       ARGS -- --model.dropout=0.1 --train.steps=2 --batch.global=64)

# Every scenario at W=4. At W=2 only the other models' (BatchNorm2d drift, per-rank dropout seeds; under a
# minute): the MLP's five repeat their W=4 signatures with fewer ranks. validation/report.py runs all at both.
divsim_validation_test(NAME validation.ddp.w4 LABELS "validation;slow" SCRIPT ddp_peer.py ARGS --world 4 TIMEOUT 1800)
divsim_validation_test(NAME validation.ddp.models_w2 LABELS validation SCRIPT ddp_peer.py
                       ARGS --world 2 --scenario resnet_bn_no_buffer_sync --scenario vit_dropout_seed_per_rank
                            --scenario gpt_dropout_seed_per_rank)
divsim_validation_test(NAME validation.seed_claims LABELS "validation;slow" SCRIPT seed_claims.py TIMEOUT 1800)

# The branch-flip rule of the replay's verdict, on per-step profiles (no binary needed).
add_test(NAME validation.branch_flip_rule
         COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/test_branch_flip.py)
set_tests_properties(validation.branch_flip_rule PROPERTIES LABELS "validation;python" TIMEOUT 120
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

# The bf16 / fp16 / TF32 conversions, bit for bit against PyTorch's and the PTX rule (validation/rounding.py).
add_executable(divsim_round_filter ${CMAKE_CURRENT_LIST_DIR}/round_filter.cpp)
target_link_libraries(divsim_round_filter PRIVATE divsim_core)
add_test(NAME validation.rounding COMMAND /usr/bin/python3 ${DIVSIM_VALIDATION_DIR}/rounding.py
                                          --filter $<TARGET_FILE:divsim_round_filter>)
set_tests_properties(validation.rounding PROPERTIES LABELS validation TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
