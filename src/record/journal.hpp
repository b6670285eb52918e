#pragma once
// The trajectory journal, "<out>.journal": an append-only companion of "<out>.partial" from which
// tools/divsim-recover rebuilds a valid trajectory after the job was killed, even in the middle of an
// HDF5 flush (HDF5 may then leave a file that does not open at all).
//
// All processes write into one shared file with MPI-IO. Each collective append() adds one *group*: one
// record per process, in process order. Every record carries its process, the group's sequence number
// and CRC-32s of its header and payload, so a group cut short by a kill is recognised and it and
// everything after it are ignored: what can be read back is exactly the groups that were complete.
//
// It knows nothing about trajectories (payloads are bytes; TrajectoryWriter decides what goes in them)
// and it does not fsync: it survives the death of the job's processes (kill -9, the OOM killer, a
// crashed rank), not the loss of the file server's cache. Payloads use the writing machine's byte order.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "record/io_error.hpp"

namespace divsim {

// "<final>.journal" for the output path `final_path`.
std::string journal_path(const std::string& final_path);

enum class JournalKind : std::uint32_t { header = 1, array = 2, rows = 3 };

class JournalWriter {
 public:
  // Collective: creates `path` (an existing file is truncated). Throws IoError on every process if it
  // fails on any.
  JournalWriter(MPI_Comm comm, std::string path);
  // Collective (MPI_File_close); the file stays.
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  // Collective: appends this process's record of the next group. Throws IoError on every process if
  // the write failed on any (the group is then incomplete on disk and will be ignored).
  void append(JournalKind kind, std::span<const std::byte> payload);
  // Collective: closes the file and deletes it (process 0).
  void remove();
  // Local: forgets the file without the collective close (for a process unwinding alone; the file
  // keeps every complete group).
  void abandon() noexcept { file_ = MPI_FILE_NULL; }

 private:
  MPI_Comm comm_;
  int proc_ = 0, procs_ = 1;
  std::string path_;
  MPI_File file_ = MPI_FILE_NULL;
  MPI_Offset end_ = 0;     // bytes of complete groups
  std::uint64_t seq_ = 0;  // sequence number of the next group
};

struct JournalGroup {
  JournalKind kind;
  std::vector<std::vector<std::byte>> payloads;  // one per process, in process order
};

struct JournalContents {
  std::vector<JournalGroup> groups;  // every complete group, in order
  std::string stop;                  // why reading stopped: the end, or what is wrong with the next group
};

// Reads every complete group of a journal (plain file reads, no MPI). Throws IoError if the file cannot
// be opened or read; damage inside it only ends the list of groups (see `stop`).
JournalContents read_journal(const std::string& path);

// Collective: each process passes its own error ("" = none). If any process has one, every process
// throws IoError with the message of the lowest failing process, so that all of them leave a sequence
// of collective calls at the same point and none is left waiting for the others.
void agree_on_io_error(MPI_Comm comm, const std::string& error);

// Packing of plain values into a payload, and reading them back.
class BytePacker {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof v);
  }
  template <class T, std::size_t Extent>
  void put_span(std::span<T, Extent> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<std::uint64_t>(v.size());
    append(v.data(), v.size_bytes());
  }
  void put_string(std::string_view s) { put_span(std::span<const char>(s.data(), s.size())); }
  void put_bytes(std::span<const std::byte> b) { append(b.data(), b.size()); }  // raw, no length
  void reserve(std::size_t bytes) { bytes_.reserve(bytes); }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  void append(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<std::byte> bytes_;
};

// Reads what a BytePacker wrote, in the same order. Throws IoError naming `what` when the payload ends
// early (a record that passed its CRC but does not match the reader: a different divsim version).
class ByteUnpacker {
 public:
  ByteUnpacker(std::span<const std::byte> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto n = get<std::uint64_t>();
    if (n > bytes_.size() / sizeof(T)) fail();
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));  // an empty vector's data() may be null
    return v;
  }
  std::string get_string() {
    const std::vector<char> c = get_vector<char>();
    return std::string(c.begin(), c.end());
  }
  bool done() const { return bytes_.empty(); }

 private:
  const std::byte* take(std::size_t n) {
    if (n > bytes_.size()) fail();
    const std::byte* p = bytes_.data();
    bytes_ = bytes_.subspan(n);
    return p;
  }
  [[noreturn]] void fail() const { throw IoError(what_ + ": record ends early (written by another divsim version?)"); }
  std::span<const std::byte> bytes_;
  std::string what_;
};

}  // namespace divsim
