#pragma once
// Reading back the rows of an interrupted trajectory, so a resumed run can replay them through a new
// TrajectoryWriter and continue: the resumed file then holds exactly what an uninterrupted run writes.
// Each process reads only its own logical ranks' columns (plain HDF5 reads of a closed file).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "record/trajectory_writer.hpp"

namespace divsim {

struct RecordedEvent {
  std::int64_t step;
  int rank;
  std::string kind, detail;
};

struct RecordedRun {
  std::int64_t rows = 0, layer_rows = 0, eval_rows = 0;
  std::vector<std::int64_t> step;
  std::vector<double> global_loss;
  std::array<std::vector<double>, schema::kTrainColumns.size()> cols;  // in kTrainColumns' order: [row][rank]
  std::vector<std::uint64_t> param_hash;    // [row][rank]
  std::vector<std::int64_t> samples;        // [row][rank][B] when recorded
  std::vector<std::int64_t> layer_step;
  std::vector<double> forward, backward, layer_grad_norm;  // [row][rank][L][5] / [row][rank][L]
  std::vector<std::int64_t> eval_step;
  std::vector<double> eval_loss, eval_accuracy;  // [row][rank]
  std::vector<RecordedEvent> events;             // with step < rows
  std::string created;                           // root attribute, carried over
};

// Rows [0, rows) of /train, the layer and eval rows up to the same step, from `path`. Throws IoError.
RecordedRun read_recorded_run(const std::string& path, const TrajectoryLayout& layout, std::int64_t rows,
                              std::int64_t layer_rows, std::int64_t eval_rows);

// A whole float32 dataset (e.g. /init/fc1/weight) of `size` values. Throws IoError.
std::vector<float> read_recorded_array(const std::string& path, const std::string& dataset, std::size_t size);

}  // namespace divsim
