# Shared by the divsim jobscripts; sourced, never submitted. It finds the checkout and the binary, turns
# the script's arguments into divsim arguments, launches the ranks inside the allocation, and makes a
# SIGTERM (Slurm's --signal=B:TERM@N before the time limit, or a preemption) end in checkpoint + requeue.
#
# It deliberately does not choose resources, output names or sweep elements: each jobscript does that.
#
# Environment (all optional):
#   DIVSIM_ROOT      the divsim checkout (default: the submit directory); tools/ and jobscripts/ live there
#   DIVSIM           the binary (default: $DIVSIM_ROOT/build/divsim)
#   DIVSIM_LAUNCHER  mpiexec (default: MPICH's Hydra, which finds the allocation by itself) | srun
#                    (srun --mpi=pmi2: needs Slurm's pmi2 plugin and an MPICH that speaks PMI-2)
#   DIVSIM_SCENARIO  scenario INI file (a first positional argument not starting with -- wins)
#   DIVSIM_ARGS      extra divsim arguments, split on whitespace, placed before the script's own arguments
#   DIVSIM_RESUME    value of run.resume (default auto: continue from the newest checkpoint); empty = not
#                    passed (binaries without checkpointing; then a SIGTERM does not requeue)
#   DIVSIM_CHECKPOINT_EVERY  value of run.checkpoint_every; empty (default) = not passed
DIVSIM_ROOT=${DIVSIM_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
DIVSIM=${DIVSIM:-$DIVSIM_ROOT/build/divsim}
DIVSIM_LAUNCHER=${DIVSIM_LAUNCHER:-mpiexec}
DIVSIM_RESUME=${DIVSIM_RESUME-auto}

# divsim_stop_ranks: the TERM trap. Passes the signal on to the ranks: Hydra's mpiexec forwards its own
# SIGTERM to every rank; srun answers one by killing its tasks, so there Slurm signals the job's steps
# (every rank) instead. Before the launch it only remembers the signal; divsim_run passes it on after.
divsim_signalled=""
divsim_pid=""
divsim_stop_ranks() {
  divsim_signalled=1
  [[ -n $divsim_pid ]] || return 0
  echo "divsim-job: SIGTERM, passing it on to the ranks" >&2
  case $DIVSIM_LAUNCHER in
    mpiexec) kill -TERM "$divsim_pid" ;;
    srun) scancel --signal=TERM "$SLURM_JOB_ID" ;;
  esac || true
}
trap divsim_stop_ranks TERM

divsim_die() {
  echo "divsim-job: error: $*" >&2
  exit 2
}

if [[ -z ${SLURM_JOB_ID:-} ]]; then
  echo "divsim-job: not under Slurm: running on this machine (tools/local-slurm starts a one-node Slurm to sbatch to)" >&2
fi
[[ -x $DIVSIM ]] || divsim_die "no divsim binary at '$DIVSIM' (set DIVSIM, or DIVSIM_ROOT to a built checkout)"

# divsim_args ARGS...: sets the array divsim_argv from [SCENARIO.ini] [--key=value ...] and the environment.
divsim_args() {
  local scenario=${DIVSIM_SCENARIO:-}
  if (($#)) && [[ $1 != -* ]]; then
    scenario=$1
    shift
  fi
  divsim_argv=()
  if [[ -n $scenario ]]; then
    [[ -f $scenario ]] || divsim_die "scenario file '$scenario' not found (relative to $PWD)"
    divsim_argv+=(--config "$scenario")
  fi
  local extra
  read -ra extra <<<"${DIVSIM_ARGS:-}"
  divsim_argv+=("${extra[@]}" "$@")
}

# divsim_tasks: the job's task count: SLURM_NTASKS inside an allocation (or when set by hand); outside one
# (the script run with bash on a workstation) the script's own `#SBATCH --ntasks=`, as sbatch reads it.
divsim_tasks() {
  if [[ -n ${SLURM_NTASKS:-} ]]; then
    echo "$SLURM_NTASKS"
    return
  fi
  local n
  n=$(sed -n 's/^#SBATCH --ntasks=\([0-9][0-9]*\).*/\1/p' "$0" | head -n 1)
  echo "${n:-1}"
}

# divsim_fold W: the number of processes for W logical ranks: W when the job may start >= W processes,
# else the largest divisor of W that fits (divsim then runs W/P logical ranks per process). The job may
# start SLURM_NTASKS processes, or outside Slurm one per CPU of this machine: more would only wait for
# each other's time slices.
divsim_fold() {
  local world=$1 slots=${SLURM_NTASKS:-$(nproc)} procs
  for ((procs = slots < world ? slots : world; world % procs; procs--)); do :; done
  if ((procs != world)); then
    local why="the allocation has $slots tasks"
    [[ -n ${SLURM_NTASKS:-} ]] || why="not under Slurm: this machine has $slots CPUs"
    echo "divsim-job: W=$world folded onto $procs processes ($why)" >&2
  fi
  echo "$procs"
}

# divsim_run OUT PROCS ARGS...: runs divsim on PROCS processes writing OUT, and waits for it. A SIGTERM
# is passed on to the ranks (which finish their step, checkpoint and exit); if the run then has not
# finished, the job requeues itself and the next start resumes. Returns divsim's exit code.
divsim_run() {
  local out=$1 procs=$2
  shift 2
  local launcher
  case $DIVSIM_LAUNCHER in
    mpiexec) launcher=(mpiexec -n "$procs") ;;
    srun) launcher=(srun --mpi=pmi2 --ntasks="$procs") ;;
    *) divsim_die "DIVSIM_LAUNCHER must be mpiexec or srun, not '$DIVSIM_LAUNCHER'" ;;
  esac
  local resume=()
  if [[ -n $DIVSIM_RESUME ]]; then resume+=(--run.resume="$DIVSIM_RESUME"); fi
  if [[ -n ${DIVSIM_CHECKPOINT_EVERY:-} ]]; then resume+=(--run.checkpoint_every="$DIVSIM_CHECKPOINT_EVERY"); fi
  local cmd=("${launcher[@]}" "$DIVSIM" --quiet --run.out="$out" "${resume[@]}" "$@")
  mkdir -p "$(dirname "$out")"
  echo "divsim-job: job ${SLURM_JOB_ID:-none} restart ${SLURM_RESTART_COUNT:-0} on" \
    "${SLURM_JOB_NODELIST:-localhost}: ${cmd[*]}" >&2

  "${cmd[@]}" &
  divsim_pid=$!
  if [[ -n $divsim_signalled ]]; then divsim_stop_ranks; fi
  # wait returns early (status > 128) whenever the trap runs; wait again until the launcher is gone.
  local rc
  while wait "$divsim_pid" && rc=0 || rc=$?; ((rc > 128)) && kill -0 "$divsim_pid" 2>/dev/null; do :; done

  if [[ -n $divsim_signalled && ! -e $out ]]; then
    if [[ -n $DIVSIM_RESUME && -n ${SLURM_JOB_ID:-} ]]; then
      echo "divsim-job: stopped before the end (exit $rc); requeueing job $SLURM_JOB_ID to resume" >&2
      scontrol requeue "$SLURM_JOB_ID" ||
        echo "divsim-job: scontrol requeue failed (a job submitted with --no-requeue cannot be requeued)" >&2
    else
      echo "divsim-job: stopped before the end (exit $rc); not requeued: DIVSIM_RESUME is empty" >&2
    fi
  fi
  return "$rc"
}
