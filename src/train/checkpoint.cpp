#include "train/checkpoint.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "record/io_error.hpp"

namespace divsim {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'D', 'V', 'S', 'C', 'K', 'P', 'T', '1'};

std::string step_dir(const std::string& output_path, std::int64_t step) {
  return checkpoint_root(output_path) + "/step-" + std::to_string(step);
}

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
    if (!out_) throw IoError("cannot write checkpoint file '" + path + "'");
  }
  template <class T>
  void value(const T& v) { bytes(&v, sizeof v); }
  template <class T>
  void vec(const std::vector<T>& v) {
    value<std::uint64_t>(v.size());
    bytes(v.data(), v.size() * sizeof(T));
  }
  void bytes(const void* p, std::size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!out_) throw IoError("writing checkpoint file '" + path_ + "' failed (disk full?)");
  }
  void close() {
    out_.flush();
    out_.close();
    if (!out_) throw IoError("closing checkpoint file '" + path_ + "' failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw IoError("cannot read checkpoint file '" + path + "'");
  }
  template <class T>
  T value() {
    T v{};
    bytes(&v, sizeof v);
    return v;
  }
  template <class T>
  void vec(std::vector<T>& v, std::size_t expected, const char* what) {
    const auto n = value<std::uint64_t>();
    if (n != expected)
      throw IoError("checkpoint file '" + path_ + "': " + what + " has " + std::to_string(n) + " values, expected " +
                    std::to_string(expected));
    v.resize(n);
    bytes(v.data(), n * sizeof(T));
  }
  template <class T>
  void vec_any(std::vector<T>& v) {
    v.resize(value<std::uint64_t>());
    bytes(v.data(), v.size() * sizeof(T));
  }
  void bytes(void* p, std::size_t n) {
    in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (!in_) throw IoError("checkpoint file '" + path_ + "' is truncated");
  }

 private:
  std::string path_;
  std::ifstream in_;
};

std::string manifest_text(const CheckpointManifest& m) {
  std::ostringstream s;
  s << "next_step " << m.next_step << "\nworld_size " << m.world_size << "\ntrain_rows " << m.train_rows
    << "\nlayer_rows " << m.layer_rows << "\neval_rows " << m.eval_rows << "\nconfig\n" << m.config;
  return s.str();
}

}  // namespace

std::string checkpoint_root(const std::string& output_path) { return output_path + ".ckpt"; }

void write_checkpoint(MPI_Comm comm, const std::string& output_path, const CheckpointManifest& manifest,
                      const std::vector<const Replica*>& replicas, const std::vector<RankCheckpointExtra>& extras) {
  int process = 0;
  MPI_Comm_rank(comm, &process);
  const std::string final_dir = step_dir(output_path, manifest.next_step - 1);
  const std::string tmp = final_dir + ".tmp";
  std::error_code ec;
  if (process == 0) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
  }
  MPI_Barrier(comm);
  int failed = 0;
  std::string problem;
  try {
    for (std::size_t k = 0; k < replicas.size(); ++k) {
      const Replica& r = *replicas[k];
      Writer w(tmp + "/rank-" + std::to_string(r.rank) + ".bin");
      w.bytes(kMagic, sizeof kMagic);
      w.value<std::int64_t>(r.rank);
      w.value<std::int64_t>(manifest.next_step);
      w.vec(r.params);
      w.vec(r.buffers);
      const auto state = r.optimizer->state();
      w.vec(std::vector<float>(state.begin(), state.end()));
      w.value<std::int64_t>(r.optimizer->steps_taken());
      w.value<double>(r.loss_scale);
      w.value<std::int64_t>(r.good_steps);
      w.vec(r.last_grad);
      w.vec(extras[k].fault_last_active);
      w.value<std::uint8_t>(extras[k].nonfinite_seen ? 1 : 0);
      w.close();
    }
  } catch (const std::exception& e) {
    failed = 1;
    problem = e.what();
  }
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, comm);
  if (failed) throw IoError(problem.empty() ? "checkpoint failed on another process" : problem);
  if (process == 0) {
    {
      std::ofstream m(tmp + "/manifest", std::ios::trunc);
      m << manifest_text(manifest);
      m.flush();
      if (!m) failed = 1;
    }
    if (!failed) {
      fs::remove_all(final_dir, ec);
      fs::rename(tmp, final_dir, ec);
      if (ec) failed = 1;
    }
    if (!failed)  // older checkpoints are superseded only once the new one is complete
      for (const auto& entry : fs::directory_iterator(checkpoint_root(output_path), ec))
        if (entry.path() != fs::path(final_dir)) fs::remove_all(entry.path(), ec);
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, comm);
  if (failed) throw IoError("could not publish checkpoint '" + final_dir + "'");
}

std::optional<CheckpointManifest> find_checkpoint(const std::string& output_path) {
  std::error_code ec;
  std::optional<CheckpointManifest> best;
  for (const auto& entry : fs::directory_iterator(checkpoint_root(output_path), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("step-") || name.ends_with(".tmp")) continue;
    std::ifstream in(entry.path() / "manifest");
    if (!in) continue;
    CheckpointManifest m;
    std::string key;
    in >> key >> m.next_step >> key >> m.world_size >> key >> m.train_rows >> key >> m.layer_rows >> key >> m.eval_rows >> key;
    if (!in || key != "config") continue;
    std::ostringstream rest;
    rest << in.rdbuf();
    m.config = rest.str();
    if (!m.config.empty() && m.config[0] == '\n') m.config.erase(0, 1);
    if (!best || m.next_step > best->next_step) best = m;
  }
  return best;
}

void read_rank_checkpoint(const std::string& output_path, std::int64_t step, Replica& r, RankCheckpointExtra& extra) {
  const std::string path = step_dir(output_path, step) + "/rank-" + std::to_string(r.rank) + ".bin";
  Reader in(path);
  char magic[sizeof kMagic];
  in.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) throw IoError("'" + path + "' is not a divsim checkpoint");
  if (in.value<std::int64_t>() != r.rank) throw IoError("'" + path + "' belongs to another rank");
  in.value<std::int64_t>();
  in.vec(r.params, r.params.size(), "params");
  in.vec(r.buffers, r.buffers.size(), "buffers");
  const auto state = r.optimizer->state();
  std::vector<float> saved;
  in.vec(saved, state.size(), "optimizer state");
  std::copy(saved.begin(), saved.end(), state.begin());
  r.optimizer->set_steps_taken(in.value<std::int64_t>());
  r.loss_scale = in.value<double>();
  r.good_steps = in.value<std::int64_t>();
  in.vec_any(r.last_grad);
  in.vec_any(extra.fault_last_active);
  extra.nonfinite_seen = in.value<std::uint8_t>() != 0;
}

}  // namespace divsim
