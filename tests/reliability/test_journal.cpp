// Unit tests of the trajectory journal (src/record/journal.hpp) and of recovery from it:
//  * the record format, checked against an independent encoder written from the documented layout;
//  * a journal cut at every byte, or with any one byte flipped, yields exactly its complete groups;
//  * TrajectoryWriter::recover rebuilds, bit for bit, every dataset and attribute of what a writer had
//    flushed before it was abandoned (the in-process stand-in for a killed job).
// One process (MPI_COMM_SELF); merging the records of several processes is tested under mpiexec by
// kill_job.py.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "record/h5.hpp"
#include "record/journal.hpp"
#include "record/trajectory_writer.hpp"

using namespace divsim;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::byte>;

class Journal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("divsim_test_journal_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

Bytes pattern(std::size_t n, unsigned seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131u + seed * 17u) & 0xFFu);
  return b;
}

// The record layout as docs/reliability.md states it, encoded independently of src/record.
void put32(Bytes& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put64(Bytes& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
}
std::uint32_t crc(const Bytes& b, std::size_t from, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(b.data() + from), static_cast<uInt>(n)));
}
Bytes encode(std::uint32_t kind, std::uint32_t proc, std::uint32_t procs, std::uint64_t group, const Bytes& payload) {
  Bytes r;
  put32(r, 0x314A5344);  // "DSJ1"
  put32(r, kind);
  put32(r, proc);
  put32(r, procs);
  put64(r, group);
  put64(r, payload.size());
  put32(r, crc(payload, 0, payload.size()));
  put32(r, crc(r, 0, 36));
  r.insert(r.end(), payload.begin(), payload.end());
  return r;
}

Bytes read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}
void write_all(const std::string& p, const Bytes& b, std::size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(n));
}

TEST_F(Journal, WriterProducesTheDocumentedRecords) {
  const std::vector<Bytes> payloads = {pattern(0, 1), pattern(1, 2), pattern(1000, 3)};
  {
    JournalWriter w(MPI_COMM_SELF, path("j"));
    w.append(JournalKind::header, payloads[0]);
    w.append(JournalKind::array, payloads[1]);
    w.append(JournalKind::rows, payloads[2]);
  }
  Bytes want;
  for (std::uint32_t g = 0; g < 3; ++g) {
    const Bytes r = encode(g + 1, 0, 1, g, payloads[g]);
    want.insert(want.end(), r.begin(), r.end());
  }
  EXPECT_EQ(read_all(path("j")), want);
  const JournalContents j = read_journal(path("j"));
  ASSERT_EQ(j.groups.size(), 3u);
  for (std::size_t g = 0; g < 3; ++g) {
    EXPECT_EQ(static_cast<std::uint32_t>(j.groups[g].kind), g + 1);
    ASSERT_EQ(j.groups[g].payloads.size(), 1u);
    EXPECT_EQ(j.groups[g].payloads[0], payloads[g]);
  }
  EXPECT_EQ(j.stop, "end of the journal");
}

TEST_F(Journal, ACutAtEveryByteKeepsExactlyTheCompleteGroups) {
  // Three groups of three processes, payload sizes varying per process.
  Bytes file;
  std::vector<std::size_t> group_end;
  for (std::uint64_t g = 0; g < 3; ++g) {
    for (std::uint32_t p = 0; p < 3; ++p) {
      const Bytes r = encode(g == 0 ? 1 : 3, p, 3, g, pattern(7 * p + 3 * g, static_cast<unsigned>(g * 3 + p)));
      file.insert(file.end(), r.begin(), r.end());
    }
    group_end.push_back(file.size());
  }
  for (std::size_t cut = 0; cut <= file.size(); ++cut) {
    write_all(path("cut"), file, cut);
    const JournalContents j = read_journal(path("cut"));
    std::size_t complete = 0;
    while (complete < group_end.size() && group_end[complete] <= cut) ++complete;
    ASSERT_EQ(j.groups.size(), complete) << "cut at byte " << cut << ": " << j.stop;
    for (const auto& g : j.groups) ASSERT_EQ(g.payloads.size(), 3u);
  }
}

TEST_F(Journal, AFlippedByteEndsTheGroupsAtTheDamage) {
  Bytes file;
  std::vector<std::size_t> group_end;
  for (std::uint64_t g = 0; g < 4; ++g) {
    const Bytes r = encode(3, 0, 1, g, pattern(20, static_cast<unsigned>(g)));
    file.insert(file.end(), r.begin(), r.end());
    group_end.push_back(file.size());
  }
  for (std::size_t at = 0; at < file.size(); ++at) {
    Bytes bad = file;
    bad[at] ^= std::byte{0x40};
    write_all(path("bad"), bad, bad.size());
    const JournalContents j = read_journal(path("bad"));
    std::size_t intact = 0;
    while (group_end[intact] <= at) ++intact;
    ASSERT_EQ(j.groups.size(), intact) << "byte " << at << " flipped: " << j.stop;
  }
}

TEST_F(Journal, UnpackerRefusesToReadPastThePayload) {
  BytePacker p;
  p.put<std::uint32_t>(7);
  p.put_span(std::span<const double>());
  p.put_string("abc");
  ByteUnpacker u(p.bytes(), "test payload");
  EXPECT_EQ(u.get<std::uint32_t>(), 7u);
  EXPECT_TRUE(u.get_vector<double>().empty());
  EXPECT_EQ(u.get_string(), "abc");
  EXPECT_TRUE(u.done());
  EXPECT_THROW(u.get<std::uint8_t>(), IoError);
  // A length prefix larger than what follows fails before anything is allocated.
  BytePacker huge;
  huge.put<std::uint64_t>(std::uint64_t{1} << 60);
  ByteUnpacker v(huge.bytes(), "test payload");
  EXPECT_THROW(v.get_vector<double>(), IoError);
}

// --- recovery ------------------------------------------------------------------------------------

// Every dataset (by path) as raw bytes in its file type, and every root attribute as text.
struct FileImage {
  std::map<std::string, Bytes> datasets;
  std::map<std::string, std::string> attrs;
};

// A link visitor (its info type differs between HDF5 1.10 and 1.12, hence the template).
template <class LinkInfo>
herr_t collect_dataset(hid_t root, const char* name, const LinkInfo*, void* out) {
  const hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
  if (H5Iget_type(obj) == H5I_DATASET) {
    const h5::Datatype t(H5Dget_type(obj));
    const h5::Dataspace s(H5Dget_space(obj));
    Bytes b(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)) * H5Tget_size(t));
    if (!b.empty()) H5Dread(obj, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
    static_cast<FileImage*>(out)->datasets[std::string("/") + name] = b;
  }
  H5Oclose(obj);
  return 0;
}

herr_t collect_attr(hid_t obj, const char* name, const H5A_info_t*, void* out) {
  const h5::Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  const h5::Datatype t(H5Aget_type(a));
  static_cast<FileImage*>(out)->attrs[name] =
      H5Tget_class(t) == H5T_STRING ? h5::read_string_attr(obj, name) : std::to_string(h5::read_int64_attr(obj, name));
  return 0;
}

FileImage image(const std::string& p) {
  FileImage img;
  const h5::File f(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_GE(static_cast<hid_t>(f), 0) << p;
  H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &img);
  H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_attr, &img);
  return img;
}

TEST_F(Journal, RecoveryRebuildsWhatTheWriterFlushed) {
  constexpr int W = 3, B = 2, L = 2, kStats = 5;
  TrajectoryLayout layout;
  layout.world_size = W;
  layout.rank_count = W;
  layout.samples_per_step = B;
  layout.record_samples = true;
  layout.layer_names = {"fc1", "fc2"};
  layout.chunk_steps = 4;
  layout.flush_every = 3;
  layout.schedule_lr = {0.1, 0.2, 0.3, 0.05, 0.025, 0.0125, 0.001, 0.0};  // in the journal's header
  RootAttributes attrs{"0.1.0", "abc", "2024-01-01T00:00:00Z", "[run]\nseed = 1\n", "mpi=test\n", {{"data", "x"}}};
  const std::vector<FaultRow> faults = {{"bitflip", "1", "bitflip:ranks=1", 2, 3, 1, 1.0}};
  const std::string out = path("run.h5");
  {
    TrajectoryWriter w(MPI_COMM_SELF, out, false, layout, attrs, faults);
    w.write_array("/init/fc1/weight", std::vector<float>{1.5f, -2.0f, 0.25f, 8.0f}, {2, 2}, "out,in", "initial");
    for (int s = 0; s < 8; ++s) {  // flushes after rows 3 and 6; rows 6..7 stay unflushed
      std::vector<double> v(W), fwd(W * L * kStats), lgn(W * L);
      std::vector<std::uint64_t> h(W);
      std::vector<std::int64_t> smp(W * B);
      for (int r = 0; r < W; ++r) {
        v[r] = s + 0.125 * r;
        h[r] = 0xABCDEF00ull + static_cast<unsigned>(16 * s + r);
        for (int b = 0; b < B; ++b) smp[r * B + b] = 100 * s + 10 * r + b;
      }
      for (std::size_t i = 0; i < fwd.size(); ++i) fwd[i] = 1000.0 * s + static_cast<double>(i);
      for (std::size_t i = 0; i < lgn.size(); ++i) lgn[i] = s - 0.5 * static_cast<double>(i);
      if (s % 2 == 1) w.add_event(s, s % W, "bitflip", "step " + std::to_string(s));
      w.append_train(TrainRow{s, 0.5 * s, v, v, v, v, v, v, h, smp});
      if (s % 2 == 0) w.append_layers(s, fwd, fwd, lgn);
      if (s % 3 == 2) w.append_eval(s, v, v);
    }
  }  // abandoned without finish(), as a killed job leaves it
  ASSERT_TRUE(fs::exists(out + ".partial"));
  ASSERT_TRUE(fs::exists(journal_path(out)));

  const auto r = TrajectoryWriter::recover(journal_path(out), path("recovered.h5"));
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.flushes, 2u);
  EXPECT_EQ(r.stop, "end of the journal");

  const FileImage want = image(out + ".partial"), got = image(path("recovered.h5"));
  EXPECT_EQ(got.datasets.size(), want.datasets.size());
  for (const auto& [name, bytes] : want.datasets) {
    ASSERT_TRUE(got.datasets.count(name)) << name << " missing from the recovered file";
    EXPECT_EQ(got.datasets.at(name), bytes) << name << " differs";
  }
  for (const auto& [name, value] : want.attrs) EXPECT_EQ(got.attrs.at(name), value) << "attribute " << name;
  ASSERT_TRUE(got.attrs.count("recovered"));
  EXPECT_NE(got.attrs.at("recovered").find("6 steps in 2 complete flushes"), std::string::npos)
      << got.attrs.at("recovered");
  EXPECT_EQ(want.datasets.at("/train/step").size(), 6 * sizeof(std::int64_t));  // the .partial held the 6 flushed rows
}

TEST_F(Journal, RecoveryWithoutACompleteHeaderSaysSo) {
  const Bytes r = encode(1, 0, 1, 0, pattern(50, 9));
  write_all(path("j"), r, r.size() - 1);
  try {
    TrajectoryWriter::recover(path("j"), path("out.h5"));
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to recover"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("out.h5")));
  EXPECT_FALSE(fs::exists(path("out.h5.partial")));
}

}  // namespace
