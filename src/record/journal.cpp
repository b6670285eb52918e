// The journal's record format, its collective appends and its reader (see the header).
//
// Record: a 40-byte header, then `size` payload bytes.
//   u32 magic "DSJ1" | u32 kind | u32 process | u32 processes | u64 group | u64 size | u32 payload CRC-32 |
//   u32 CRC-32 of the 36 header bytes before it
// A group is one record per process, processes 0..P-1 in order, all with the same group number.
#include "record/journal.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <fstream>

namespace divsim {

namespace {

constexpr std::uint32_t kMagic = 0x314A5344;  // "DSJ1" in little-endian byte order
constexpr std::size_t kHeaderBytes = 40;

struct RecordHeader {
  std::uint32_t magic, kind, proc, procs;
  std::uint64_t group, size;
  std::uint32_t payload_crc, header_crc;
};
static_assert(sizeof(RecordHeader) == kHeaderBytes);

std::uint32_t crc32_of(const void* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const auto part = static_cast<uInt>(std::min<std::size_t>(n, UINT_MAX));
    crc = crc32(crc, p, part);
    p += part;
    n -= part;
  }
  return static_cast<std::uint32_t>(crc);
}

std::uint32_t header_crc(const RecordHeader& h) { return crc32_of(&h, offsetof(RecordHeader, header_crc)); }

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  std::string s(text, static_cast<std::size_t>(n));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

bool known_kind(std::uint32_t k) {
  return k == static_cast<std::uint32_t>(JournalKind::header) || k == static_cast<std::uint32_t>(JournalKind::array) ||
         k == static_cast<std::uint32_t>(JournalKind::rows);
}

}  // namespace

std::string journal_path(const std::string& final_path) { return final_path + ".journal"; }

void agree_on_io_error(MPI_Comm comm, const std::string& error) {
  int proc = 0, procs = 1;
  MPI_Comm_rank(comm, &proc);
  MPI_Comm_size(comm, &procs);
  int first = error.empty() ? procs : proc;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == procs) return;
  std::string message = proc == first ? error : std::string();
  int n = static_cast<int>(message.size());
  MPI_Bcast(&n, 1, MPI_INT, first, comm);
  message.resize(static_cast<std::size_t>(n));
  MPI_Bcast(message.data(), n, MPI_CHAR, first, comm);
  throw IoError(message);
}

JournalWriter::JournalWriter(MPI_Comm comm, std::string path) : comm_(comm), path_(std::move(path)) {
  MPI_Comm_rank(comm_, &proc_);
  MPI_Comm_size(comm_, &procs_);
  int rc = MPI_File_open(comm_, path_.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &file_);
  if (rc == MPI_SUCCESS) rc = MPI_File_set_size(file_, 0);  // a leftover journal of an earlier run goes
  agree_on_io_error(comm_, rc == MPI_SUCCESS ? "" : "creating the journal '" + path_ + "': " + mpi_error_text(rc));
}

JournalWriter::~JournalWriter() {
  if (file_ != MPI_FILE_NULL) MPI_File_close(&file_);
}

void JournalWriter::append(JournalKind kind, std::span<const std::byte> payload) {
  RecordHeader h{kMagic, static_cast<std::uint32_t>(kind), static_cast<std::uint32_t>(proc_),
                 static_cast<std::uint32_t>(procs_), seq_, payload.size(), crc32_of(payload.data(), payload.size()), 0};
  h.header_crc = header_crc(h);
  std::vector<std::byte> record(kHeaderBytes + payload.size());
  std::memcpy(record.data(), &h, kHeaderBytes);
  std::copy(payload.begin(), payload.end(), record.begin() + kHeaderBytes);

  // Records of one group lie back to back in process order.
  unsigned long long bytes = record.size(), before = 0, total = 0;
  MPI_Exscan(&bytes, &before, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm_);
  if (proc_ == 0) before = 0;  // MPI_Exscan leaves process 0's result undefined
  MPI_Allreduce(&bytes, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm_);
  std::string error;
  if (bytes > static_cast<unsigned long long>(INT_MAX)) {
    error = "journal record of " + std::to_string(bytes) + " bytes exceeds 2 GiB; lower record.flush_every";
  }
  // Every process takes part in the collective write, a failing one with nothing.
  const int count = error.empty() ? static_cast<int>(bytes) : 0;
  const int rc = MPI_File_write_at_all(file_, end_ + static_cast<MPI_Offset>(before), record.data(), count, MPI_BYTE,
                                       MPI_STATUS_IGNORE);
  if (error.empty() && rc != MPI_SUCCESS) error = "writing the journal '" + path_ + "': " + mpi_error_text(rc);
  agree_on_io_error(comm_, error);
  end_ += static_cast<MPI_Offset>(total);
  ++seq_;
}

void JournalWriter::remove() {
  MPI_File_close(&file_);
  if (proc_ == 0) std::remove(path_.c_str());
}

JournalContents read_journal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open the journal '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);

  JournalContents out;
  std::uint64_t offset = 0;
  std::uint32_t procs = 0;
  for (std::uint64_t group = 0;; ++group) {
    if (offset == file_size) {
      out.stop = "end of the journal";
      return out;
    }
    JournalGroup g{};
    const auto incomplete = [&](std::uint32_t p, const std::string& why) {
      out.stop = "group " + std::to_string(group) + " (record of process " + std::to_string(p) + " at byte " +
                 std::to_string(offset) + ") is incomplete: " + why;
      return std::move(out);
    };
    for (std::uint32_t p = 0; procs == 0 || p < procs; ++p) {
      RecordHeader h{};
      if (file_size - offset < kHeaderBytes) return incomplete(p, "the file ends inside its header");
      in.read(reinterpret_cast<char*>(&h), kHeaderBytes);
      if (!in) throw IoError("reading the journal '" + path + "' failed at byte " + std::to_string(offset));
      if (h.magic != kMagic || h.header_crc != header_crc(h)) return incomplete(p, "no valid record header");
      if (procs == 0) procs = h.procs;
      if (procs == 0) return incomplete(p, "it claims zero processes");
      if (h.proc != p || h.procs != procs || h.group != group || !known_kind(h.kind) ||
          (p > 0 && h.kind != static_cast<std::uint32_t>(g.kind)))
        return incomplete(p, "the record does not belong to this group");
      if (h.size > file_size - offset - kHeaderBytes) return incomplete(p, "the file ends inside its payload");
      std::vector<std::byte> payload(h.size);
      in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(h.size));
      if (!in) throw IoError("reading the journal '" + path + "' failed at byte " + std::to_string(offset));
      if (crc32_of(payload.data(), payload.size()) != h.payload_crc) return incomplete(p, "its payload fails the CRC");
      g.kind = static_cast<JournalKind>(h.kind);
      g.payloads.push_back(std::move(payload));
      offset += kHeaderBytes + h.size;
    }
    out.groups.push_back(std::move(g));
  }
}

}  // namespace divsim
