#include "train/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "comm/abort_job.hpp"

namespace divsim {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
  beat_ns_ = now_ns();
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_one();
  thread_.join();
}

void Watchdog::progress(std::int64_t step) noexcept {
  step_.store(step, std::memory_order_relaxed);
  beat_ns_.store(now_ns(), std::memory_order_relaxed);
}

void Watchdog::watch() {
  // Checking a few times per timeout is enough; at least once a second.
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout_s_ / 4));
  std::unique_lock lock(mutex_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    const double idle = static_cast<double>(now_ns() - beat_ns_.load(std::memory_order_relaxed)) * 1e-9;
    if (idle <= timeout_s_) continue;
    std::fprintf(stderr,
                 "divsim: error on rank %d: %s%lld made no progress for %.0f s (dist.timeout_s = %g): another "
                 "rank is hung or lost, or the file system is stuck; ending the job\n",
                 rank_, step_.load() < 0 ? "set-up before step " : "step ", std::max<long long>(0, step_.load()), idle,
                 timeout_s_);
    wait_for_stderr_reader();
    std::_Exit(1);  // no MPI call from this thread: mpiexec sees the exit and ends the other processes
  }
}

}  // namespace divsim
