// comm/abort_job: a failing process's message must reach the launcher before MPI_Abort ends the job.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "comm/abort_job.hpp"

namespace {

// stderr on the write end of a pipe, as under mpiexec; restored on destruction.
class StderrPipe {
 public:
  StderrPipe() {
    EXPECT_EQ(pipe(fds_), 0);
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    dup2(fds_[1], STDERR_FILENO);
  }
  ~StderrPipe() {
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    close(fds_[0]);
    close(fds_[1]);
  }
  std::string read_some() {
    char buf[256];
    const ssize_t n = read(fds_[0], buf, sizeof buf);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
};

TEST(AbortJob, WaitsUntilTheStderrReaderHasTakenTheMessage) {
  StderrPipe pipe;
  std::fputs("divsim: error on rank 0: the message\n", stderr);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    divsim::wait_for_stderr_reader();
    returned = true;
  });
  // Nobody has read the pipe yet: the wait (up to about 1 s) must still be going.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(pipe.read_some(), "divsim: error on rank 0: the message\n");
  waiter.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace
