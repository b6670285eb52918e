// divsim_h5_rate: how fast divsim's TrajectoryWriter (parallel HDF5, collective MPI-IO) writes a run's
// trajectory, against a plain sequential write() of the same payload bytes by one process, with and
// without an fsync at each flush (H5Fflush on the MPI-IO driver ends in MPI_File_sync). Synthetic rows,
// no training: it measures the writer alone; bench/hdf5_rate.py runs it and prints the table. It does
// not read the file back or check its contents (tests/ do).
//
// usage: mpiexec -n P divsim_h5_rate DIR W STEPS SAMPLES_PER_STEP LAYERS LAYERS_EVERY FLUSH_EVERY
//   W logical ranks (a multiple of P); SAMPLES_PER_STEP 0 = no /train/samples; LAYERS_EVERY 0 = no
//   /layers rows. Process 0 prints "hdf5 <payload bytes> <file bytes> <s>", "plain <bytes> <s>" and
//   "plain_fsync <bytes> <s>"; the files are left in DIR.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "record/trajectory_writer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::string dir;
  int world = 1;
  std::int64_t steps = 0, samples = 0, layers = 0, layers_every = 0, flush_every = 100;
};

std::int64_t parse(const char* text, const char* what, std::int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || v < min)
    throw std::invalid_argument(std::string(what) + " must be an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

// Bytes of one train row and one layer row for all W ranks, as the schema stores them.
std::int64_t train_row_bytes(const Settings& s) { return 8 + 8 + s.world * (6 * 8 + 8 + s.samples * 8); }
std::int64_t layer_row_bytes(const Settings& s) { return s.layers_every > 0 ? 8 + s.world * s.layers * (2 * 5 * 8 + 8) : 0; }

double hdf5_write(const Settings& s, MPI_Comm comm, const std::string& path) {
  int proc = 0, procs = 1;
  MPI_Comm_rank(comm, &proc);
  MPI_Comm_size(comm, &procs);
  divsim::TrajectoryLayout layout;
  layout.world_size = s.world;
  layout.rank_count = s.world / procs;
  layout.rank_begin = proc * layout.rank_count;
  layout.samples_per_step = s.samples;
  layout.record_samples = s.samples > 0;
  for (std::int64_t l = 0; l < s.layers; ++l) layout.layer_names.push_back("layer" + std::to_string(l));
  layout.flush_every = s.flush_every;
  const auto R = static_cast<std::size_t>(layout.rank_count), L = static_cast<std::size_t>(s.layers);
  std::vector<double> values(R);
  std::vector<std::uint64_t> hashes(R);
  std::vector<std::int64_t> samples(R * static_cast<std::size_t>(s.samples));
  std::vector<double> stats(R * L * 5), grad_norm(R * L);

  MPI_Barrier(comm);
  const auto t0 = Clock::now();
  {
    divsim::TrajectoryWriter writer(comm, path, true, layout, divsim::RootAttributes{}, {});
    for (std::int64_t step = 0; step < s.steps; ++step) {
      // Values that change every step and name their logical rank (bench/test_bench.py checks where
      // each process's columns landed).
      for (std::size_t k = 0; k < R; ++k) {
        const auto rank = static_cast<std::uint64_t>(layout.rank_begin) + k;
        values[k] = 1.0 / static_cast<double>(static_cast<std::uint64_t>(step) + 1 + rank);
        hashes[k] = static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull + rank;
      }
      for (std::size_t i = 0; i < samples.size(); ++i) samples[i] = step * 7919 + static_cast<std::int64_t>(i);
      writer.append_train(divsim::TrainRow{step, values[0], values, values, values, values, values, values, hashes, samples});
      if (s.layers_every > 0 && step % s.layers_every == 0) {
        for (double& v : stats) v = values[0];
        for (double& v : grad_norm) v = values[0];
        writer.append_layers(step, stats, stats, grad_norm);
      }
    }
    writer.finish();
  }
  MPI_Barrier(comm);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One process writes `total` bytes sequentially, one write() per flush's worth of rows, as the HDF5
// writer flushes; `sync` adds an fsync after each of those writes.
double plain_write(const std::string& path, std::int64_t total, std::int64_t per_flush, bool sync) {
  std::vector<char> block(static_cast<std::size_t>(per_flush), 'x');
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  for (std::int64_t done = 0; done < total;) {
    const auto n = static_cast<std::size_t>(std::min(per_flush, total - done));
    if (::write(fd, block.data(), n) != static_cast<ssize_t>(n)) throw std::runtime_error("write to " + path + " failed");
    if (sync && ::fsync(fd) != 0) throw std::runtime_error("fsync of " + path + " failed");
    done += static_cast<std::int64_t>(n);
  }
  if (::close(fd) != 0) throw std::runtime_error("closing " + path + " failed");
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int proc = 0, procs = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &proc);
  MPI_Comm_size(MPI_COMM_WORLD, &procs);
  int status = 0;
  try {
    if (argc != 8)
      throw std::invalid_argument("usage: mpiexec -n P divsim_h5_rate DIR W STEPS SAMPLES_PER_STEP LAYERS LAYERS_EVERY FLUSH_EVERY");
    Settings s;
    s.dir = argv[1];
    s.world = static_cast<int>(parse(argv[2], "W", 1));
    s.steps = parse(argv[3], "STEPS", 1);
    s.samples = parse(argv[4], "SAMPLES_PER_STEP", 0);
    s.layers = parse(argv[5], "LAYERS", 1);
    s.layers_every = parse(argv[6], "LAYERS_EVERY", 0);
    s.flush_every = parse(argv[7], "FLUSH_EVERY", 1);
    if (s.world % procs != 0)
      throw std::invalid_argument("W=" + std::to_string(s.world) + " is not a multiple of the " + std::to_string(procs) + " processes");
    const std::string h5_path = s.dir + "/h5_write_rate.h5";
    const double h5_seconds = hdf5_write(s, MPI_COMM_WORLD, h5_path);
    const std::int64_t layer_rows = s.layers_every > 0 ? (s.steps + s.layers_every - 1) / s.layers_every : 0;
    const std::int64_t payload = s.steps * train_row_bytes(s) + layer_rows * layer_row_bytes(s);
    if (proc == 0) {
      const std::int64_t per_flush = s.flush_every * train_row_bytes(s) +
                                     (s.layers_every > 0 ? (s.flush_every + s.layers_every - 1) / s.layers_every : 0) * layer_row_bytes(s);
      const std::string plain_path = s.dir + "/h5_write_rate.bin";
      const double plain = plain_write(plain_path, payload, per_flush, false);
      const double plain_sync = plain_write(plain_path, payload, per_flush, true);
      std::printf("hdf5 %lld %lld %.6f\nplain %lld %.6f\nplain_fsync %lld %.6f\n", static_cast<long long>(payload),
                  static_cast<long long>(std::filesystem::file_size(h5_path)), h5_seconds,
                  static_cast<long long>(payload), plain, static_cast<long long>(payload), plain_sync);
    }
  } catch (const std::exception& e) {
    if (proc == 0) std::fprintf(stderr, "divsim_h5_rate: %s\n", e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
