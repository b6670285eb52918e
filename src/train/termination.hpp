#pragma once
// SIGTERM/SIGINT as a request to stop cleanly: Slurm sends SIGTERM before the time limit (--signal) and
// on preemption; the step loop finishes its step, checkpoints, flushes and exits with kExitPreempted so
// that a requeued job resumes with run.resume=auto.
namespace divsim {

inline constexpr int kExitPreempted = 75;  // EX_TEMPFAIL: interrupted, checkpoint written, resume to continue

void install_termination_handler();
bool termination_requested();

}  // namespace divsim
