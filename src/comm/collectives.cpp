#include "comm/collectives.hpp"

#include <sched.h>
#include <time.h>

#include <cstdint>

#include "comm/mpi_check.hpp"

namespace divsim {

namespace {

Waiting g_waiting = Waiting::sleep;
NodeShare g_share;
constexpr int kPolls = 64;                 // polls before sleeping, at least
constexpr std::int64_t kYieldNs = 1000000; // ... and with a core of its own, 1 ms of them

std::int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

void adapt_waiting(const NodeShare& share) {
  g_share = share;
  g_waiting = share.processes > share.cpus ? Waiting::sleep : Waiting::yield;
}
Waiting current_waiting() { return g_waiting; }
NodeShare waiting_share() { return g_share; }

void wait_politely(MPI_Request& request) {
  // Poll and yield the core for a while (MPI_Test is what advances a nonblocking collective), then
  // sleep between polls (timer slack ~50 us). With a core per process the polling lasts long enough
  // for the step loop's collectives to complete; a longer wait means a peer is descheduled or far
  // behind, and sleeping then gives the core to whatever else runs on the machine.
  const std::int64_t yield_until = g_waiting == Waiting::yield ? monotonic_ns() + kYieldNs : 0;
  for (int polls = 0, done = 0;; ++polls) {
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (polls < kPolls || monotonic_ns() < yield_until) {
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

NodeShare node_share(MPI_Comm comm) {
  MPI_Comm node;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  NodeShare share;
  MPI_Comm_size(node, &share.processes);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) CPU_SET(0, &cpus);  // unknown: count one CPU
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &cpus, sizeof cpus, MPI_BYTE, MPI_BOR, node), "MPI_Allreduce");
  share.cpus = CPU_COUNT(&cpus);
  MPI_Comm_free(&node);
  return share;
}

}  // namespace divsim
