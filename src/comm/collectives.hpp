#pragma once
// The collectives of the step loop, as nonblocking calls completed by a polite wait.
//
// Why: users run more ranks than cores (mpiexec -n 8 on a 2-core laptop). MPICH's blocking collectives
// busy-poll, so a rank that arrives early spins on a core that a rank still computing needs, and the job
// runs several times slower than its work. Waiting with MPI_Test and short sleeps gives the core back.
// With a core per process the sleeps cost instead: a large nonblocking allreduce advances only inside
// MPI_Test, so every sleep stalls it (measured: 2 processes on 2 cores ran the default job 1.4x slower
// sleeping than polling without sleeps). The wait therefore sleeps only where the processes of a node
// outnumber its cores. Results are identical either way: the same algorithm runs underneath.
#include <mpi.h>

namespace divsim {

void wait_politely(MPI_Request& request);  // MPI_Wait that yields the core while waiting, if it must
void allreduce_in_place(void* buffer, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void broadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);

// Collective: the processes of comm on this node, and the CPUs they may run on together (the union of
// their affinity masks, which is what Slurm's cgroups and binding leave them).
struct NodeShare {
  int processes = 1;
  int cpus = 1;
};
NodeShare node_share(MPI_Comm comm);

// How the waits above wait between MPI_Test polls: sleeping once a few polls have not completed the
// operation, or only after 1 ms of polling (a core per process). Process-wide; sleep until adapted.
enum class Waiting { yield, sleep };
void adapt_waiting(const NodeShare& share);  // sleep where the processes outnumber the CPUs
Waiting current_waiting();
NodeShare waiting_share();  // the share current_waiting() was chosen for

}  // namespace divsim
