// LD_PRELOAD library for mpi.step_allocations: counts the heap allocations that divsim's own code
// makes (its executable and the C++ standard library it calls), leaving out those of MPICH, HDF5,
// OpenBLAS and the C library, whose internal buffers are theirs to manage. At exit it writes the count
// to $DIVSIM_ALLOC_COUNT_DIR/rank<PMI_RANK>.txt. The test runs the same job for N and 2N steps: equal
// counts mean the steps themselves allocate nothing.
//
// glibc's __libc_* entry points are the real allocator, so no dlsym bootstrapping is needed; memory from
// them is freed by the ordinary free (not interposed).
#include <link.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}

namespace {

struct Range {
  std::uintptr_t lo = 0, hi = 0;
};
Range g_ranges[2];  // the executable's and libstdc++'s code, found before main runs
std::atomic<long> g_count{0};

int find_code(dl_phdr_info* info, std::size_t, void* data) {
  int* seen = static_cast<int*>(data);
  const bool main_program = (*seen)++ == 0;
  const bool cxx_library = std::strstr(info->dlpi_name, "libstdc++") != nullptr;
  if (!main_program && !cxx_library) return 0;
  Range& r = g_ranges[main_program ? 0 : 1];
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD || !(p.p_flags & PF_X)) continue;
    r.lo = info->dlpi_addr + p.p_vaddr;
    r.hi = r.lo + p.p_memsz;
  }
  return 0;
}

__attribute__((constructor)) void find_ranges() {
  int seen = 0;
  dl_iterate_phdr(find_code, &seen);
}

__attribute__((destructor)) void report() {
  const char* dir = std::getenv("DIVSIM_ALLOC_COUNT_DIR");
  const char* rank = std::getenv("PMI_RANK");  // set by mpiexec for its ranks only
  if (!dir || !rank) return;
  char path[4096];
  std::snprintf(path, sizeof path, "%s/rank%s.txt", dir, rank);
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "%ld\n", g_count.load());
    std::fclose(f);
  }
}

inline void count_if_ours(void* caller) {
  const auto a = reinterpret_cast<std::uintptr_t>(caller);
  for (const Range& r : g_ranges)
    if (a >= r.lo && a < r.hi) {
      g_count.fetch_add(1, std::memory_order_relaxed);
      return;
    }
}

void* checked(void* p) {
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  count_if_ours(__builtin_return_address(0));
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  *out = __libc_memalign(align, n);
  return *out ? 0 : ENOMEM;
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  return __libc_memalign(align, n);
}
}

void* operator new(std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  return checked(__libc_malloc(n));
}
void* operator new[](std::size_t n) {
  count_if_ours(__builtin_return_address(0));
  return checked(__libc_malloc(n));
}
void* operator new(std::size_t n, std::align_val_t a) {
  count_if_ours(__builtin_return_address(0));
  return checked(__libc_memalign(static_cast<std::size_t>(a), n));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  count_if_ours(__builtin_return_address(0));
  return checked(__libc_memalign(static_cast<std::size_t>(a), n));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  count_if_ours(__builtin_return_address(0));
  return __libc_malloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  count_if_ours(__builtin_return_address(0));
  return __libc_malloc(n);
}
