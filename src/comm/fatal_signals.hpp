#pragma once
// A rank that crashes (SIGSEGV, SIGBUS, SIGILL, SIGFPE) says so and dies of that signal at once, so
// that the launcher ends the job.
//
// Why divsim has its own handler: UCX (MPICH's ch4:ucx device) installs one when libucs is loaded,
// before main, and it prints its backtrace with functions that are not async-signal-safe (malloc,
// mutexes, the symbol reader). A rank that got SIGSEGV while it was inside one of them deadlocked in
// the handler, and the whole job hung until it was killed (CI, reliability.failing_rank.n4: "Caught
// signal 11", then nothing for 60 s). This handler writes with write(2) only, and a report that still
// cannot finish within 2 s is cut short by SIGALRM's default action.
namespace divsim {

// Replaces the handlers of the fatal signals; call first in main, before MPI_Init (the window in which
// UCX's handler is in place is then only the dynamic loader's). The rank is taken from the launcher's
// environment (PMI_RANK, PMIX_RANK, SLURM_PROCID) until report_fatal_signals_as_rank says it.
void install_fatal_signal_report();

// The rank (in MPI_COMM_WORLD) that the report names.
void report_fatal_signals_as_rank(int rank);

}  // namespace divsim
