#include "comm/collectives.hpp"

#include <sched.h>
#include <time.h>

#include "comm/mpi_check.hpp"

namespace divsim {

void wait_politely(MPI_Request& request) {
  int done = 0;
  // Short operations finish within a few polls; only then start sleeping (timer slack ~50 us).
  for (int polls = 0; !done; ++polls) {
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) break;
    if (polls < 64) {
      sched_yield();
    } else {
      const timespec pause{0, 20000};
      nanosleep(&pause, nullptr);
    }
  }
}

void allreduce_in_place(void* buffer, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  MPI_Request request;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buffer, count, type, op, comm, &request), "MPI_Iallreduce");
  wait_politely(request);
}

void broadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  MPI_Request request;
  mpi_check(MPI_Ibcast(buffer, count, type, root, comm, &request), "MPI_Ibcast");
  wait_politely(request);
}

int processes_sharing_memory(MPI_Comm comm) {
  MPI_Comm node;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int size = 1;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size;
}

}  // namespace divsim
