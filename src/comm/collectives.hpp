#pragma once
// The collectives of the step loop, as nonblocking calls completed by a polite wait.
//
// Why: users run more ranks than cores (mpiexec -n 8 on a 2-core laptop). MPICH's blocking collectives
// busy-poll, so a rank that arrives early spins on a core that a rank still computing needs, and the job
// runs several times slower than its work. Waiting with MPI_Test and short sleeps gives the core back.
// Results are identical to the blocking calls: the same algorithm runs underneath.
#include <mpi.h>

namespace divsim {

void wait_politely(MPI_Request& request);  // MPI_Wait that yields the core while waiting
void allreduce_in_place(void* buffer, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void broadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);
int processes_sharing_memory(MPI_Comm comm);  // collective: the processes of comm on this node

}  // namespace divsim
