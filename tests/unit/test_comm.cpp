// comm/abort_job: a failing process's message must reach the launcher before MPI_Abort ends the job.
// comm/fatal_signals: a crashing process says which rank it was and why, and dies of its signal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "comm/abort_job.hpp"
#include "comm/fatal_signals.hpp"

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

// The child of each death test installs the report, crashes, and must die of the signal itself (so that
// the launcher sees a crashed rank) after printing the report. "threadsafe": the child is a fresh exec of
// this binary, not a fork of a process that has MPI's threads running.
TEST(FatalSignals, ASignalFromAnotherProcessIsReportedWithTheRankAndTheSender) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        divsim::install_fatal_signal_report();
        divsim::report_fatal_signals_as_rank(3);
        raise(SIGBUS);
      },
      testing::KilledBySignal(SIGBUS),
      "divsim: error on rank 3 \\(pid [0-9]+ on [^)]+\\): SIGBUS sent by process [0-9]+; the job ends\\. Backtrace");
}

TEST(FatalSignals, AFaultIsReportedWithItsAddressAndTheRankDiesOfIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        divsim::install_fatal_signal_report();
        divsim::report_fatal_signals_as_rank(0);
        volatile std::uintptr_t unmapped = 0x40;  // volatile: the compiler must not see the bad store coming
        *reinterpret_cast<volatile int*>(unmapped) = 1;
      },
      testing::KilledBySignal(SIGSEGV), "divsim: error on rank 0 \\(pid [0-9]+ on [^)]+\\): SIGSEGV, no memory mapped at 0x40;");
}

}  // namespace
