#include "comm/abort_job.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace divsim {

void wait_for_stderr_reader() {
  std::fflush(stderr);
  // FIONREAD on a pipe counts the bytes not yet read, from either end; on a file it is 0 at its end.
  int unread = 0;
  for (int i = 0; i < 100 && ioctl(STDERR_FILENO, FIONREAD, &unread) == 0 && unread > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void abort_job(MPI_Comm comm, int exit_code, std::string_view message) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "divsim: error on rank %d: %.*s\n", rank, static_cast<int>(message.size()), message.data());
  wait_for_stderr_reader();
  MPI_Abort(comm, exit_code);
  std::abort();  // MPI_Abort does not return; the compiler cannot know that
}

}  // namespace divsim
