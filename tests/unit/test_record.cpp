// Unit tests of the HDF5 trajectory writer (src/record/): one process owning several logical ranks,
// files read back with the plain HDF5 C API and compared with the values the test appended.
// Multi-process collective behaviour is covered by the MPI integration tests, not here.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "record/h5.hpp"
#include "record/schema.hpp"
#include "record/trajectory_writer.hpp"

using namespace divsim;
namespace fs = std::filesystem;

namespace {

constexpr int kW = 3;   // logical ranks, all owned by this process
constexpr int kB = 2;   // samples per rank and step
constexpr int kSteps = 7;

// A fresh folder per test, removed afterwards.
class Record : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("divsim_test_record_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Independent closed forms of what the test appends.
double loss_at(int s, int r) { return 0.5 + s + 0.01 * r; }
double col_at(int c, int s, int r) { return 10.0 * (c + 1) + s + 0.1 * r; }  // c: 0 grad_norm_local .. 4 loss_scale
std::uint64_t hash_at(int s, int r) { return 0xF000000000000000ull + 16u * static_cast<unsigned>(s) + static_cast<unsigned>(r); }
std::int64_t sample_at(int s, int r, int b) { return 100 * s + 10 * r + b; }
double fwd_at(int s, int r, int l, int k) { return 1000.0 * s + 100.0 * r + 10.0 * l + k; }
double lgn_at(int s, int r, int l) { return s + 0.1 * r + 0.01 * l; }
double eval_loss_at(int s, int r) { return 2.0 - 0.1 * s + r; }
double eval_acc_at(int s, int r) { return 0.5 + 0.01 * r + 0.001 * s; }

TrajectoryLayout layout3(bool samples) {
  TrajectoryLayout l;
  l.world_size = kW;
  l.rank_begin = 0;
  l.rank_count = kW;
  l.samples_per_step = kB;
  l.record_samples = samples;
  l.layer_names = {"fc1", "fc2.linear"};
  l.chunk_steps = 4;
  l.flush_every = 3;
  l.schedule_lr = {0.5, 0.25, 0.125};
  return l;
}

RootAttributes root_attrs() {
  RootAttributes a;
  a.divsim_version = "0.1.0";
  a.git_sha = "abcdef123456";
  a.created = "2024-01-02T03:04:05Z";
  a.config = "[run]\nname = test\nseed = 7\n";
  a.env = "mpi=MPICH\nhdf5=1.10\n";
  a.extra = {{"slurm_job_id", "4242"}};
  return a;
}

// Appends train step s for ranks [r0, r0 + n) (and the step's layer/eval rows on their cadence).
void append_step(TrajectoryWriter& w, int s, int r0, int n, bool samples, int layers) {
  std::vector<double> loss, cols[5];
  std::vector<std::uint64_t> hash;
  std::vector<std::int64_t> smp;
  for (int r = r0; r < r0 + n; ++r) {
    loss.push_back(loss_at(s, r));
    for (int c = 0; c < 5; ++c) cols[c].push_back(col_at(c, s, r));
    hash.push_back(hash_at(s, r));
    for (int b = 0; b < kB; ++b) smp.push_back(sample_at(s, r, b));
  }
  TrainRow row{s, 0.25 + s, loss, cols[0], cols[1], cols[2], cols[3], cols[4], hash, {}};
  if (samples) row.samples = smp;
  w.append_train(row);
  if (s % 2 == 0) {
    std::vector<double> fwd, bwd, gn;
    for (int r = r0; r < r0 + n; ++r)
      for (int l = 0; l < layers; ++l) {
        for (int k = 0; k < 5; ++k) {
          fwd.push_back(fwd_at(s, r, l, k));
          bwd.push_back(-fwd_at(s, r, l, k));
        }
        gn.push_back(lgn_at(s, r, l));
      }
    w.append_layers(s, fwd, bwd, gn);
  }
  if (s == 3 || s == 6) {
    std::vector<double> el, ea;
    for (int r = r0; r < r0 + n; ++r) {
      el.push_back(eval_loss_at(s, r));
      ea.push_back(eval_acc_at(s, r));
    }
    w.append_eval(s, el, ea);
  }
}

h5::File open_ro(const fs::path& p) {
  return h5::File(h5::check(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening " + p.string()));
}

std::vector<hsize_t> shape_of(hid_t file, const std::string& path) {
  const h5::Dataset d(h5::check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "open " + path));
  const h5::Dataspace s(h5::check(H5Dget_space(d), "space"));
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(s)));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  return dims;
}

template <class T>
std::vector<T> read_all(hid_t file, const std::string& path, hid_t mem_type) {
  const h5::Dataset d(h5::check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "open " + path));
  const h5::Dataspace s(h5::check(H5Dget_space(d), "space"));
  std::vector<T> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  h5::check(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "read " + path);
  return v;
}

std::string dataset_attr(hid_t file, const std::string& path, const std::string& name) {
  const h5::Dataset d(h5::check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "open " + path));
  return h5::read_string_attr(d, name);
}

// Every dataset in the file (found by walking it, not from the writer's list).
std::vector<std::string> all_datasets(hid_t file) {
  std::vector<std::string> out;
  H5Ovisit(
      file, H5_INDEX_NAME, H5_ITER_NATIVE,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
        return 0;
      },
      &out);
  return out;
}

// The names of an object's attributes.
std::vector<std::string> attribute_names(hid_t obj) {
  std::vector<std::string> out;
  hsize_t at = 0;
  H5Aiterate2(
      obj, H5_INDEX_NAME, H5_ITER_NATIVE, &at,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
      },
      &out);
  return out;
}

// A stored type as the schema names it (schema::type_name): a string attribute with a one-dimensional
// dataspace is a string list.
std::string stored_type(hid_t type, hid_t space, bool attribute) {
  const std::string bits = std::to_string(8 * H5Tget_size(type));
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT: return "float" + bits;
    case H5T_STRING: return attribute && H5Sget_simple_extent_ndims(space) == 1 ? "string list" : "string";
    case H5T_COMPOUND: return "compound";
    default: return "class " + std::to_string(H5Tget_class(type));
  }
}

std::string attribute_type(hid_t obj, const std::string& name) {
  const h5::Attribute a(h5::check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "open attribute " + name));
  const h5::Datatype t(h5::check(H5Aget_type(a), "attribute type"));
  const h5::Dataspace s(h5::check(H5Aget_space(a), "attribute space"));
  return stored_type(t, s, true);
}

struct EventRow {
  std::int64_t step;
  std::int32_t rank;
  char kind[32];
  char detail[224];
};

std::vector<EventRow> read_events(hid_t file) {
  const h5::Datatype kind = h5::fixed_string_type(32), detail = h5::fixed_string_type(224);
  const h5::Datatype t(H5Tcreate(H5T_COMPOUND, sizeof(EventRow)));
  H5Tinsert(t, "step", offsetof(EventRow, step), H5T_NATIVE_INT64);
  H5Tinsert(t, "rank", offsetof(EventRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(t, "kind", offsetof(EventRow, kind), kind);
  H5Tinsert(t, "detail", offsetof(EventRow, detail), detail);
  return read_all<EventRow>(file, "/events", t);
}

std::string fixed(const char* p, std::size_t n) { return std::string(p, strnlen(p, n)); }

}  // namespace

TEST_F(Record, WritesSchemaV1AndRenamesOnFinish) {
  const fs::path final_path = dir_ / "sub" / "run.h5";  // missing parent folder is created
  const std::string long_detail(300, 'x'), long_kind = "a_kind_name_longer_than_thirty_two_bytes";
  const std::vector<FaultRow> faults{{"bitflip", "1,2", "bitflip:ranks=1,2:start=2:stop=5:prob=0.5", 2, 5, 1, 0.5}};
  {
    TrajectoryWriter w(MPI_COMM_WORLD, final_path.string(), false, layout3(true), root_attrs(), faults);
    EXPECT_EQ(w.partial_path(), final_path.string() + ".partial");
    EXPECT_TRUE(fs::exists(w.partial_path()));
    const std::vector<float> init{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
    w.write_array("/init/fc1/weight", init, {2, 3}, "out,in", "initial weights of fc1");
    for (int s = 0; s < kSteps; ++s) {
      append_step(w, s, 0, kW, true, 2);
      if (s == 1) w.add_event(1, 1, "nan", long_detail);
      if (s == 4) w.add_event(4, 1, "skip", "overflow");
      if (s == 5) {  // added out of order within one flush block
        w.add_event(5, 2, "fault", "bitflip on rank 2");
        w.add_event(5, 0, "fault", "bitflip on rank 0");
        w.add_event(3, 0, "late", "reported late");
      }
      if (s == 6) w.add_event(6, -1, long_kind, "");
    }
    EXPECT_FALSE(fs::exists(final_path));
    w.finish();
    EXPECT_TRUE(fs::exists(final_path));
    EXPECT_FALSE(fs::exists(final_path.string() + ".partial"));
  }

  const h5::File f = open_ro(final_path);
  EXPECT_EQ(h5::read_int64_attr(f, "schema_version"), 1);
  EXPECT_EQ(h5::read_int64_attr(f, "world_size"), kW);
  const RootAttributes a = root_attrs();
  EXPECT_EQ(h5::read_string_attr(f, "divsim_version"), a.divsim_version);
  EXPECT_EQ(h5::read_string_attr(f, "git_sha"), a.git_sha);
  EXPECT_EQ(h5::read_string_attr(f, "created"), a.created);
  EXPECT_EQ(h5::read_string_attr(f, "config"), a.config);
  EXPECT_EQ(h5::read_string_attr(f, "env"), a.env);
  EXPECT_EQ(h5::read_string_attr(f, "slurm_job_id"), "4242");

  // Every dataset is self-describing.
  const auto datasets = all_datasets(f);
  EXPECT_EQ(datasets.size(), 22u);  // 10 train, 5 layers, 3 eval, events, faults, schedule, init array
  for (const auto& d : datasets) {
    EXPECT_FALSE(dataset_attr(f, d, "dims").empty()) << d;
    EXPECT_FALSE(dataset_attr(f, d, "description").empty()) << d;
  }

  using V = std::vector<hsize_t>;
  const hsize_t S = kSteps, W = kW;
  EXPECT_EQ(read_all<double>(f, "/schedule/lr", H5T_NATIVE_DOUBLE), (std::vector<double>{0.5, 0.25, 0.125}));
  EXPECT_EQ(dataset_attr(f, "/schedule/lr", "dims"), "step");
  EXPECT_EQ(shape_of(f, "/train/step"), V{S});
  EXPECT_EQ(dataset_attr(f, "/train/step", "dims"), "step");
  EXPECT_EQ(read_all<std::int64_t>(f, "/train/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  const auto gl = read_all<double>(f, "/train/global_loss", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(gl.size(), S);
  for (int s = 0; s < kSteps; ++s) EXPECT_EQ(gl[static_cast<std::size_t>(s)], 0.25 + s);

  const char* cols[] = {"/train/grad_norm_local", "/train/grad_norm", "/train/param_norm", "/train/lr",
                        "/train/loss_scale"};
  const auto loss = read_all<double>(f, "/train/loss", H5T_NATIVE_DOUBLE);
  EXPECT_EQ(shape_of(f, "/train/loss"), (V{S, W}));
  EXPECT_EQ(dataset_attr(f, "/train/loss", "dims"), "step,rank");
  const auto hash = read_all<std::uint64_t>(f, "/train/param_hash", H5T_NATIVE_UINT64);
  EXPECT_EQ(shape_of(f, "/train/param_hash"), (V{S, W}));
  const auto smp = read_all<std::int64_t>(f, "/train/samples", H5T_NATIVE_INT64);
  EXPECT_EQ(shape_of(f, "/train/samples"), (V{S, W, kB}));
  EXPECT_EQ(dataset_attr(f, "/train/samples", "dims"), "step,rank,sample");
  for (int c = 0; c < 5; ++c) {
    EXPECT_EQ(shape_of(f, cols[c]), (V{S, W}));
    EXPECT_EQ(dataset_attr(f, cols[c], "dims"), "step,rank");
    const auto v = read_all<double>(f, cols[c], H5T_NATIVE_DOUBLE);
    for (int s = 0; s < kSteps; ++s)
      for (int r = 0; r < kW; ++r) EXPECT_EQ(v[static_cast<std::size_t>(s * kW + r)], col_at(c, s, r)) << cols[c];
  }
  for (int s = 0; s < kSteps; ++s)
    for (int r = 0; r < kW; ++r) {
      const auto i = static_cast<std::size_t>(s * kW + r);
      EXPECT_EQ(loss[i], loss_at(s, r));
      EXPECT_EQ(hash[i], hash_at(s, r));
      for (int b = 0; b < kB; ++b) EXPECT_EQ(smp[i * kB + static_cast<std::size_t>(b)], sample_at(s, r, b));
    }

  // Layers: recorded at steps 0, 2, 4, 6.
  EXPECT_EQ(shape_of(f, "/layers/names"), V{2});
  EXPECT_EQ(dataset_attr(f, "/layers/names", "dims"), "layer");
  {
    const h5::Dataset d(H5Dopen2(f, "/layers/names", H5P_DEFAULT));
    const h5::Datatype t(H5Dget_type(d));
    ASSERT_EQ(H5Tis_variable_str(t), 0);  // fixed-length: parallel HDF5 1.10 cannot write variable ones
    const std::size_t width = H5Tget_size(t);
    std::vector<char> buf(2 * width);
    H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    EXPECT_EQ(fixed(buf.data(), width), "fc1");
    EXPECT_EQ(fixed(buf.data() + width, width), "fc2.linear");
  }
  EXPECT_EQ(read_all<std::int64_t>(f, "/layers/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(shape_of(f, "/layers/forward"), (V{4, W, 2, 5}));
  EXPECT_EQ(shape_of(f, "/layers/backward"), (V{4, W, 2, 5}));
  EXPECT_EQ(shape_of(f, "/layers/grad_norm"), (V{4, W, 2}));
  EXPECT_EQ(dataset_attr(f, "/layers/forward", "dims"), "step,rank,layer,stat");
  EXPECT_EQ(dataset_attr(f, "/layers/grad_norm", "dims"), "step,rank,layer");
  for (const char* p : {"/layers/forward", "/layers/backward"}) {
    const h5::Dataset d(H5Dopen2(f, p, H5P_DEFAULT));
    EXPECT_EQ(h5::read_strings_attr(d, "stats"), (std::vector<std::string>{"mean", "std", "min", "max", "l2"}));
  }
  const auto fwd = read_all<double>(f, "/layers/forward", H5T_NATIVE_DOUBLE);
  const auto bwd = read_all<double>(f, "/layers/backward", H5T_NATIVE_DOUBLE);
  const auto lgn = read_all<double>(f, "/layers/grad_norm", H5T_NATIVE_DOUBLE);
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < kW; ++r)
      for (int l = 0; l < 2; ++l) {
        const int s = 2 * i;
        EXPECT_EQ(lgn[static_cast<std::size_t>((i * kW + r) * 2 + l)], lgn_at(s, r, l));
        for (int k = 0; k < 5; ++k) {
          const auto j = static_cast<std::size_t>(((i * kW + r) * 2 + l) * 5 + k);
          EXPECT_EQ(fwd[j], fwd_at(s, r, l, k));
          EXPECT_EQ(bwd[j], -fwd_at(s, r, l, k));
        }
      }

  EXPECT_EQ(read_all<std::int64_t>(f, "/eval/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{3, 6}));
  EXPECT_EQ(shape_of(f, "/eval/loss"), (V{2, W}));
  EXPECT_EQ(dataset_attr(f, "/eval/accuracy", "dims"), "step,rank");
  const auto el = read_all<double>(f, "/eval/loss", H5T_NATIVE_DOUBLE);
  const auto ea = read_all<double>(f, "/eval/accuracy", H5T_NATIVE_DOUBLE);
  for (int e = 0; e < 2; ++e)
    for (int r = 0; r < kW; ++r) {
      EXPECT_EQ(el[static_cast<std::size_t>(e * kW + r)], eval_loss_at(3 + 3 * e, r));
      EXPECT_EQ(ea[static_cast<std::size_t>(e * kW + r)], eval_acc_at(3 + 3 * e, r));
    }

  // Events: three flush blocks (steps 0-2, 3-5, 6); each block sorted by (step, rank).
  EXPECT_EQ(dataset_attr(f, "/events", "dims"), "event");
  const auto ev = read_events(f);
  ASSERT_EQ(ev.size(), 6u);
  const std::array<std::pair<std::int64_t, std::int32_t>, 6> order{{{1, 1}, {3, 0}, {4, 1}, {5, 0}, {5, 2}, {6, -1}}};
  for (std::size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].step, order[i].first) << i;
    EXPECT_EQ(ev[i].rank, order[i].second) << i;
  }
  EXPECT_EQ(fixed(ev[0].kind, 32), "nan");
  EXPECT_EQ(fixed(ev[0].detail, 224), std::string(224, 'x'));  // truncated to the field
  EXPECT_EQ(fixed(ev[3].detail, 224), "bitflip on rank 0");
  EXPECT_EQ(fixed(ev[5].kind, 32), long_kind.substr(0, 32));

  // Faults table.
  EXPECT_EQ(dataset_attr(f, "/faults", "dims"), "fault");
  struct FaultOut {
    char name[64], ranks[64], spec[128];
    std::int64_t start, stop, every;
    double prob;
  };
  const h5::Datatype s64 = h5::fixed_string_type(64), s128 = h5::fixed_string_type(128);
  const h5::Datatype ft(H5Tcreate(H5T_COMPOUND, sizeof(FaultOut)));
  H5Tinsert(ft, "name", offsetof(FaultOut, name), s64);
  H5Tinsert(ft, "ranks", offsetof(FaultOut, ranks), s64);
  H5Tinsert(ft, "spec", offsetof(FaultOut, spec), s128);
  H5Tinsert(ft, "start", offsetof(FaultOut, start), H5T_NATIVE_INT64);
  H5Tinsert(ft, "stop", offsetof(FaultOut, stop), H5T_NATIVE_INT64);
  H5Tinsert(ft, "every", offsetof(FaultOut, every), H5T_NATIVE_INT64);
  H5Tinsert(ft, "prob", offsetof(FaultOut, prob), H5T_NATIVE_DOUBLE);
  const auto fr = read_all<FaultOut>(f, "/faults", ft);
  ASSERT_EQ(fr.size(), 1u);
  EXPECT_EQ(fixed(fr[0].name, 64), faults[0].name);
  EXPECT_EQ(fixed(fr[0].ranks, 64), faults[0].ranks);
  EXPECT_EQ(fixed(fr[0].spec, 128), faults[0].spec);
  EXPECT_EQ(fr[0].start, 2);
  EXPECT_EQ(fr[0].stop, 5);
  EXPECT_EQ(fr[0].every, 1);
  EXPECT_EQ(fr[0].prob, 0.5);

  // write_array: float32 of the given shape.
  EXPECT_EQ(shape_of(f, "/init/fc1/weight"), (V{2, 3}));
  EXPECT_EQ(dataset_attr(f, "/init/fc1/weight", "dims"), "out,in");
  {
    const h5::Dataset d(H5Dopen2(f, "/init/fc1/weight", H5P_DEFAULT));
    const h5::Datatype t(H5Dget_type(d));
    EXPECT_EQ(H5Tget_class(t), H5T_FLOAT);
    EXPECT_EQ(H5Tget_size(t), 4u);
  }
  EXPECT_EQ(read_all<float>(f, "/init/fc1/weight", H5T_NATIVE_FLOAT),
            (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f}));
}

TEST_F(Record, WritesOnlyItsOwnRankColumns) {
  // Logical ranks 1..3 of 4, no samples, no layers, no faults: the empty parts of the schema still exist.
  TrajectoryLayout l = layout3(false);
  l.world_size = 4;
  l.rank_begin = 1;
  l.layer_names.clear();
  const fs::path path = dir_ / "offset.h5";
  {
    TrajectoryWriter w(MPI_COMM_WORLD, path.string(), false, l, root_attrs(), {});
    for (int s = 0; s < 4; ++s) append_step(w, s, 1, 3, false, 0);
    w.finish();
  }
  const h5::File f = open_ro(path);
  EXPECT_EQ(h5::read_int64_attr(f, "world_size"), 4);
  EXPECT_LE(H5Lexists(f, "/train/samples", H5P_DEFAULT), 0);
  using V = std::vector<hsize_t>;
  EXPECT_EQ(shape_of(f, "/train/loss"), (V{4, 4}));
  const auto loss = read_all<double>(f, "/train/loss", H5T_NATIVE_DOUBLE);
  for (int s = 0; s < 4; ++s)
    for (int r = 1; r < 4; ++r) EXPECT_EQ(loss[static_cast<std::size_t>(s * 4 + r)], loss_at(s, r));
  EXPECT_EQ(shape_of(f, "/layers/names"), V{0});
  EXPECT_EQ(shape_of(f, "/layers/forward"), (V{2, 4, 0, 5}));
  EXPECT_EQ(read_all<std::int64_t>(f, "/layers/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(shape_of(f, "/faults"), V{0});
  EXPECT_EQ(shape_of(f, "/events"), V{0});
}

TEST_F(Record, RefusesExistingOutputUnlessOverwrite) {
  const fs::path path = dir_ / "run.h5";
  std::ofstream(path) << "old results";
  try {
    TrajectoryWriter w(MPI_COMM_WORLD, path.string(), false, layout3(false), root_attrs(), {});
    FAIL() << "an existing output was not refused";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));  // refused before anything was created

  {
    TrajectoryWriter w(MPI_COMM_WORLD, path.string(), true, layout3(false), root_attrs(), {});
    EXPECT_GT(H5Fis_hdf5(path.c_str()), -1);
    EXPECT_LE(H5Fis_hdf5(path.c_str()), 0);  // the old file stays until finish() replaces it
    append_step(w, 0, 0, kW, false, 2);
    append_step(w, 1, 0, kW, false, 2);
    w.finish();
  }
  EXPECT_GT(H5Fis_hdf5(path.c_str()), 0);
  const h5::File f = open_ro(path);
  EXPECT_EQ(read_all<std::int64_t>(f, "/train/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 1}));
}

TEST_F(Record, UnfinishedWriterLeavesReadablePartialWithFlushedSteps) {
  const fs::path path = dir_ / "crash.h5", snapshot = dir_ / "snapshot.h5";
  std::string partial;
  {
    TrajectoryWriter w(MPI_COMM_WORLD, path.string(), false, layout3(true), root_attrs(), {});
    partial = w.partial_path();
    for (int s = 0; s < 3; ++s) append_step(w, s, 0, kW, true, 2);
    w.add_event(2, 1, "nan", "loss is NaN");
    append_step(w, 3, 0, kW, true, 2);  // the block of steps 0-2 is full: written before step 3 is buffered
    // What is on disk now, while the writer still holds the file, is a valid file with steps 0-2.
    fs::copy_file(partial, snapshot);
    {
      const h5::File f = open_ro(snapshot);
      EXPECT_EQ(read_all<std::int64_t>(f, "/train/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 1, 2}));
      EXPECT_EQ(shape_of(f, "/train/samples"), (std::vector<hsize_t>{3, kW, kB}));
      EXPECT_EQ(read_all<std::int64_t>(f, "/layers/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 2}));
      EXPECT_EQ(read_events(f).size(), 1u);
    }
    for (int s = 4; s < kSteps; ++s) append_step(w, s, 0, kW, true, 2);  // 3-5 written, 6 buffered
    w.add_event(6, 0, "nan", "never flushed");
  }
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(fs::exists(partial));
  const h5::File f = open_ro(partial);
  EXPECT_EQ(read_all<std::int64_t>(f, "/train/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  const auto loss = read_all<double>(f, "/train/loss", H5T_NATIVE_DOUBLE);
  ASSERT_EQ(loss.size(), 6u * kW);
  EXPECT_EQ(loss[5 * kW + 2], loss_at(5, 2));
  EXPECT_EQ(read_all<std::int64_t>(f, "/eval/step", H5T_NATIVE_INT64), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(read_events(f).size(), 1u);  // the one of step 2; step 6's was never flushed
}

TEST_F(Record, FileHoldsExactlyWhatTheSchemaDeclares) {
  const fs::path path = dir_ / "schema.h5";
  {
    TrajectoryWriter w(MPI_COMM_WORLD, path.string(), false, layout3(true), root_attrs(),
                       {{"bitflip", "1", "bitflip:ranks=1", 0, -1, 1, 1.0}});
    w.write_array("/init/fc1/weight", std::vector<float>(6, 0.5f), {2, 3}, "out,in", "initial weights of fc1");
    for (int s = 0; s < 4; ++s) append_step(w, s, 0, kW, true, 2);
    w.add_event(1, 0, "bitflip", "bit 3");
    w.finish();
  }
  const h5::File f = open_ro(path);
  for (const std::string& name : attribute_names(f)) {
    SCOPED_TRACE("root attribute " + name);
    const schema::AttributeSchema& a = schema::root_attribute(name);  // throws if undeclared
    EXPECT_EQ(attribute_type(f, name), schema::type_name(a.type));
  }
  const auto found = all_datasets(f);
  for (const std::string& p : found) {
    SCOPED_TRACE(p);
    const schema::DatasetSchema& d = schema::dataset(p);  // throws if undeclared
    const h5::Dataset dset(h5::check(H5Dopen2(f, p.c_str(), H5P_DEFAULT), "open " + p));
    const h5::Datatype t(h5::check(H5Dget_type(dset), "type"));
    const h5::Dataspace space(h5::check(H5Dget_space(dset), "space"));
    EXPECT_EQ(stored_type(t, space, false), schema::type_name(d.type));
    if (d.id != schema::DatasetId::init) {  // /init's dims and description are each tensor's own
      EXPECT_EQ(h5::read_string_attr(dset, "dims"), d.dims);
      EXPECT_EQ(h5::read_string_attr(dset, "description"), d.description);
      EXPECT_EQ(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)), d.axes().size());
    }
    for (const std::string& name : attribute_names(dset)) {
      const auto& attrs = schema::attributes();
      const auto a =
          std::find_if(attrs.begin(), attrs.end(), [&](const auto& e) { return !e.root() && e.name == name; });
      ASSERT_NE(a, attrs.end()) << "undeclared attribute " << name;
      EXPECT_EQ(attribute_type(dset, name), schema::type_name(a->type)) << name;
    }
  }
  for (const auto& d : schema::datasets()) {
    if (d.written == "always") {
      EXPECT_NE(std::find(found.begin(), found.end(), std::string(d.path)), found.end()) << d.path << " is missing";
    }
  }
}

TEST_F(Record, RefusesAttributesAndArraysTheSchemaDoesNotDeclare) {
  RootAttributes attrs = root_attrs();
  attrs.extra["undeclared"] = "x";
  const fs::path path = dir_ / "refused.h5";
  EXPECT_THROW(TrajectoryWriter(MPI_COMM_WORLD, path.string(), false, layout3(false), attrs, {}), std::logic_error);
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));  // refused before anything was created

  TrajectoryWriter w(MPI_COMM_WORLD, path.string(), false, layout3(false), root_attrs(), {});
  EXPECT_THROW(w.write_array("/train/extra", std::vector<float>(2, 1.0f), {2}, "feature", "not declared"),
               std::logic_error);
  w.finish();
}

TEST_F(Record, RejectsInconsistentLayoutsAndRows) {
  TrajectoryLayout bad = layout3(false);
  bad.rank_begin = 1;  // ranks 1..3 of a world of 3
  EXPECT_THROW(TrajectoryWriter(MPI_COMM_WORLD, (dir_ / "a.h5").string(), false, bad, root_attrs(), {}),
               std::invalid_argument);
  bad = layout3(true);
  bad.samples_per_step = 0;
  EXPECT_THROW(TrajectoryWriter(MPI_COMM_WORLD, (dir_ / "b.h5").string(), false, bad, root_attrs(), {}),
               std::invalid_argument);

  TrajectoryWriter w(MPI_COMM_WORLD, (dir_ / "c.h5").string(), false, layout3(false), root_attrs(), {});
  const std::vector<double> two(2, 1.0), three(3, 1.0);
  const std::vector<std::uint64_t> hash(3, 0);
  EXPECT_THROW(w.append_train(TrainRow{0, 1.0, two, three, three, three, three, three, hash, {}}),
               std::invalid_argument);
  EXPECT_THROW(w.append_eval(0, three, two), std::invalid_argument);
  w.finish();
  EXPECT_THROW(w.flush(), std::logic_error);
}

TEST(RecordH5, AttributesRoundTripAndErrorsCarryHdf5Reason) {
  h5::silence_error_printing();
  const fs::path path = fs::temp_directory_path() / ("divsim_test_h5_" + std::to_string(::getpid()) + ".h5");
  {
    const h5::File f(h5::check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create"));
    h5::write_int64_attr(f, "i", -42);
    h5::write_uint64_attr(f, "u", 0xFFFFFFFFFFFFFFFFull);
    h5::write_double_attr(f, "d", 0.1);
    h5::write_string_attr(f, "s", "line 1\nline 2 \xc3\xa9");
    h5::write_strings_attr(f, "v", {"a", "", "ccc"});
    EXPECT_EQ(h5::read_int64_attr(f, "i"), -42);
    EXPECT_EQ(h5::read_uint64_attr(f, "u"), 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(h5::read_double_attr(f, "d"), 0.1);
    EXPECT_EQ(h5::read_string_attr(f, "s"), "line 1\nline 2 \xc3\xa9");
    EXPECT_EQ(h5::read_strings_attr(f, "v"), (std::vector<std::string>{"a", "", "ccc"}));
    try {
      h5::write_int64_attr(f, "i", 1);
      FAIL() << "duplicate attribute accepted";
    } catch (const IoError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'i'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;  // HDF5's own reason
    }
  }
  fs::remove(path);
  try {
    h5::check(H5Fopen((path.string() + ".missing").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening it");
    FAIL() << "opening a missing file succeeded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("unable to open file"), std::string::npos) << e.what();
  }
}
