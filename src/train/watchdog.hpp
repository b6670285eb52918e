#pragma once
// The step loop's watchdog (dist.timeout_s). A rank that hangs without dying (stopped, stuck in a driver
// or a file system) is invisible to MPI: the others wait for it in the next collective, in divsim's own
// or inside parallel HDF5, until the allocation's time limit. Like the watchdog of torch.distributed, a
// thread of each process checks that the run makes progress (set-up stages, then every step); after
// `timeout_s` seconds without,
// it names the step and ends the process (exit 1), which makes mpiexec end the whole job. It calls no MPI
// function (the library is initialised for one thread), so it works whatever the main thread waits in.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace divsim {

class Watchdog {
 public:
  Watchdog(double timeout_s, int process);  // timeout_s = 0: no thread, progress() does nothing
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void progress(std::int64_t step) noexcept;  // the run reached `step` (-1: a stage of set-up)

 private:
  void watch();

  double timeout_s_;
  int rank_;
  std::atomic<std::int64_t> step_{-1};
  std::atomic<std::int64_t> beat_ns_{0};  // steady clock at the last progress()
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace divsim
