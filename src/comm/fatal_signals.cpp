#include "comm/fatal_signals.hpp"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace divsim {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
constexpr int kReportDeadlineSeconds = 2;
constexpr int kMaxFrames = 64;

volatile std::sig_atomic_t g_rank = -1;  // -1: not known yet
char g_host[256] = "?";
// The report must also run when the fault is a stack overflow: on a stack of its own.
alignas(64) char g_alt_stack[64 * 1024];

// From here to on_fatal_signal, everything runs inside the handler: write(2), no stdio, no allocation,
// no locks.
void put(const char* text) {
  const ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
  static_cast<void>(written);  // nowhere left to report a failed write to stderr
}

void put_number(std::uintptr_t value, unsigned base) {
  char digits[24];  // 2^64 - 1 has 20 decimal digits
  char* p = digits + sizeof digits;
  *--p = '\0';
  do {
    *--p = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0);
  put(p);
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    default: return "a fatal signal";
  }
}

// What the kernel says about a fault it raised (si_code > 0), before the address.
const char* fault_cause(int signo, int code) {
  switch (signo) {
    case SIGSEGV: return code == SEGV_MAPERR   ? "no memory mapped at"
                         : code == SEGV_ACCERR ? "no permission for the access at"
                                               : "invalid memory access at";
    case SIGBUS: return code == BUS_ADRERR ? "no backing for the mapped page (a file that shrank, a full tmpfs) at"
                                           : "bus error at";
    case SIGILL: return "illegal instruction at";
    case SIGFPE: return code == FPE_INTDIV ? "integer division by zero at" : "arithmetic exception at";
    default: return "fault at";
  }
}

extern "C" void on_fatal_signal(int signo, siginfo_t* info, void* /*context*/) {
  // A report that cannot finish (the backtrace walks unwinder tables) must not keep the rank alive:
  // SIGALRM's default action ends it.
  std::signal(SIGALRM, SIG_DFL);
  alarm(kReportDeadlineSeconds);

  put("divsim: error on rank ");
  if (g_rank >= 0) put_number(static_cast<std::uintptr_t>(g_rank), 10);
  else put("?");
  put(" (pid ");
  put_number(static_cast<std::uintptr_t>(getpid()), 10);
  put(" on ");
  put(g_host);
  put("): ");
  put(signal_name(signo));
  if (info->si_code <= 0) {  // kill(2), tgkill(2), sigqueue(3): the sender's pid is all there is to say
    put(" sent by process ");
    put_number(static_cast<std::uintptr_t>(info->si_pid), 10);
  } else {
    put(", ");
    put(fault_cause(signo, info->si_code));
    put(" 0x");
    put_number(reinterpret_cast<std::uintptr_t>(info->si_addr), 16);
  }
  put("; the job ends. Backtrace (addr2line -f -C -e <binary> <+offset> names the functions):\n");
  void* frames[kMaxFrames];
  backtrace_symbols_fd(frames, backtrace(frames, kMaxFrames), STDERR_FILENO);

  // SA_RESETHAND put the default action back: the raised signal, delivered when the handler returns,
  // kills the rank with its own number (and a core, where the limits allow one), and Hydra or srun ends
  // the job. A fault the kernel raised would also simply recur on return.
  raise(signo);
}

int rank_from_launcher() {
  for (const char* name : {"PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0 && rank < (1L << 30)) return static_cast<int>(rank);
    }
  }
  return -1;
}

}  // namespace

void install_fatal_signal_report() {
  g_rank = rank_from_launcher();
  if (gethostname(g_host, sizeof g_host - 1) != 0) std::strcpy(g_host, "?");
  // backtrace() loads libgcc's unwinder on its first call, which allocates: do that now, not in the handler.
  void* frame = nullptr;
  backtrace(&frame, 1);

  stack_t alt{};
  alt.ss_sp = g_alt_stack;
  alt.ss_size = sizeof g_alt_stack;
  sigaltstack(&alt, nullptr);

  struct sigaction action{};
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (const int signo : kFatalSignals) sigaction(signo, &action, nullptr);
}

void report_fatal_signals_as_rank(int rank) { g_rank = rank; }

}  // namespace divsim
