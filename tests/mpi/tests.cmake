# MPI integration tests: the real binary under real mpiexec (oversubscribed on small machines), checked
# with h5py by tests/mpi/*.py. Each test gets its own output folder under the build tree.
find_program(DIVSIM_MPIEXEC NAMES mpiexec.mpich mpiexec REQUIRED)
set(DIVSIM_PYTHON /usr/bin/python3)
set(DIVSIM_MPI_DIR ${CMAKE_CURRENT_LIST_DIR})

# divsim_mpi_test(NAME <name> LABELS <labels> SCRIPT <script.py> ARGS <args...>)
function(divsim_mpi_test)
  cmake_parse_arguments(T "" "NAME;SCRIPT;TIMEOUT" "LABELS;ARGS" ${ARGN})
  set(workdir ${CMAKE_BINARY_DIR}/test-output/${T_NAME})
  add_test(NAME ${T_NAME}
           COMMAND ${DIVSIM_PYTHON} ${DIVSIM_MPI_DIR}/${T_SCRIPT} --divsim $<TARGET_FILE:divsim>
                   --mpiexec ${DIVSIM_MPIEXEC} --workdir ${workdir} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                       ENVIRONMENT "PYTHONPATH=${DIVSIM_MPI_DIR}")
endfunction()

foreach(n 1 2 4)
  divsim_mpi_test(NAME mpi.schema_and_sync.n${n} LABELS mpi SCRIPT test_engine.py ARGS schema --ranks ${n})
endforeach()
divsim_mpi_test(NAME mpi.reproducible.n2 LABELS mpi SCRIPT test_engine.py ARGS reproducible --ranks 2)
divsim_mpi_test(NAME mpi.reproducible_bn_dropout.n4 LABELS mpi SCRIPT test_engine.py ARGS reproducible --ranks 4 --bn-dropout)
divsim_mpi_test(NAME mpi.bad_input LABELS mpi SCRIPT test_engine.py ARGS bad-input --ranks 2)
divsim_mpi_test(NAME mpi.print_config_roundtrip LABELS mpi SCRIPT test_engine.py ARGS print-config --ranks 2)
divsim_mpi_test(NAME mpi.oversubscription_note LABELS mpi SCRIPT test_engine.py ARGS oversubscription)
set_tests_properties(mpi.oversubscription_note PROPERTIES SKIP_RETURN_CODE 77)
divsim_mpi_test(NAME mpi.resume_summary LABELS mpi SCRIPT test_engine.py ARGS resume-summary)
divsim_mpi_test(NAME mpi.resume_bitwise.resnet LABELS mpi SCRIPT test_engine.py ARGS resume-bitwise-resnet --ranks 2)
divsim_mpi_test(NAME mpi.resume_bitwise.gpt LABELS mpi SCRIPT test_engine.py ARGS resume-bitwise-gpt --ranks 2)
divsim_mpi_test(NAME mpi.hdf5_source.n2 LABELS mpi SCRIPT test_engine.py ARGS hdf5-source --ranks 2)
# No heap allocation in the step loop, counted by an LD_PRELOAD library around the real allocator. Not
# under the sanitizers: ASan must be the first library loaded and replaces malloc itself.
if(NOT DIVSIM_SANITIZE)
  add_library(divsim_alloc_counter SHARED ${CMAKE_CURRENT_LIST_DIR}/alloc_counter.cpp)
  divsim_mpi_test(NAME mpi.step_allocations LABELS mpi SCRIPT test_engine.py
                  ARGS step-allocations --preload $<TARGET_FILE:divsim_alloc_counter>)
endif()
divsim_mpi_test(NAME mpi.default_accuracy.n4 LABELS "mpi;slow" SCRIPT test_engine.py ARGS default-accuracy --ranks 4
                TIMEOUT 900)

# One test per fault of the catalog (inputs/faults/<name>.ini at W=4 against its baseline), and all of
# them in one short run. The per-fault tests run their 4 logical ranks on 2 processes (2 each: the faulty
# rank shares its process with a healthy one, and the exchange still crosses processes), 2-4x faster than 4
# busy-polling processes on 2 cores; fault.all_at_once runs every fault on 4 processes, one rank each.
foreach(fault unsynced_seed overlapping_shards tf32_mismatch bn_drift skip_rank accum_misalign loss_skew
              optimizer_state_reset loss_scaler_desync reduction_order reduction_order_shuffle bitflip stale_scheduler
              clip_mismatch reduce_dtype_mismatch)
  divsim_mpi_test(NAME fault.${fault} LABELS "mpi;faults" SCRIPT test_faults.py ARGS ${fault} --ranks 4 --procs 2)
endforeach()
divsim_mpi_test(NAME fault.all_at_once LABELS "mpi;faults" SCRIPT test_faults.py ARGS all_at_once --ranks 4)
# The same on a ResNet (BatchNorm2d, convolutions, residual adds), and bn_drift's signature there.
divsim_mpi_test(NAME fault.all_at_once.resnet LABELS "mpi;faults" SCRIPT test_faults.py ARGS all_at_once_resnet --ranks 4)
divsim_mpi_test(NAME fault.bn_drift.resnet LABELS "mpi;faults" SCRIPT test_faults.py ARGS bn_drift_resnet --ranks 4 --procs 2)
# And on a ViT (attention, LayerNorm, dropout): every fault at once, and unsynced dropout masks.
divsim_mpi_test(NAME fault.all_at_once.vit LABELS "mpi;faults" SCRIPT test_faults.py ARGS all_at_once_vit --ranks 4)
divsim_mpi_test(NAME fault.unsynced_dropout.vit LABELS "mpi;faults" SCRIPT test_faults.py ARGS unsynced_dropout_vit
                --ranks 4 --procs 2)
# And on a character GPT (causal attention, a tied head, a loss over padded sequences).
divsim_mpi_test(NAME fault.all_at_once.gpt LABELS "mpi;faults" SCRIPT test_faults.py ARGS all_at_once_gpt --ranks 4)
divsim_mpi_test(NAME fault.unsynced_dropout.gpt LABELS "mpi;faults" SCRIPT test_faults.py ARGS unsynced_dropout_gpt
                --ranks 4 --procs 2)
divsim_mpi_test(NAME fault.baseline_comments LABELS "mpi;faults" SCRIPT test_faults.py ARGS baseline_comments)
# Every fault alone at W=8 for 6 steps: on 8 processes, one rank each (every fault, ~7 s a run: each
# parallel HDF5 write is a collective of 8 busy-polling processes on 2 cores), and on virtual ranks, 4
# per process (every mode of every fault).
divsim_mpi_test(NAME fault.every_fault_w8 LABELS "mpi;faults" SCRIPT test_faults.py ARGS every_fault --ranks 8 TIMEOUT 900)
divsim_mpi_test(NAME fault.every_mode_w8.virtual LABELS "mpi;faults" SCRIPT test_faults.py ARGS every_mode --ranks 8 --procs 2
                TIMEOUT 900)

# Reproducibility across world sizes, bucket sizes and process layouts.
foreach(case invariance invariance_sync_bn invariance_global_batch invariance_tree invariance_resnet invariance_vit
             invariance_gpt
             derived_accumulation
             ring_buckets reduce_dtype world_size_noise virtual_ranks)
  divsim_mpi_test(NAME repro.${case} LABELS "mpi;repro" SCRIPT test_repro.py ARGS ${case} TIMEOUT 600)
endforeach()
