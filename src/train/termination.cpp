#include "train/termination.hpp"

#include <csignal>

namespace divsim {
namespace {

volatile std::sig_atomic_t g_requested = 0;

extern "C" void on_termination(int) { g_requested = 1; }

}  // namespace

void install_termination_handler() {
  struct sigaction sa{};
  sa.sa_handler = on_termination;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool termination_requested() { return g_requested != 0; }

}  // namespace divsim
