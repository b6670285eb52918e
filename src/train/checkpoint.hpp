#pragma once
// Checkpoints: everything a run needs to continue bit for bit (seed 004's list of what a resume loses).
//
// Layout: <out>.ckpt/step-<t>/rank-<r>.bin, one file per logical rank (so a run may resume on another
// number of processes with the same world size), and a manifest written last. A checkpoint directory is
// complete only once it has its final name: it is written as step-<t>.tmp and renamed (atomic on POSIX),
// then older checkpoints are removed. Random streams need no state: every draw is keyed by step, sample
// and purpose, so the step number restores them.
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/replica.hpp"

namespace divsim {

struct CheckpointManifest {
  std::int64_t next_step = 0;                  // the first step the resumed run executes
  std::int64_t world_size = 0;
  std::int64_t train_rows = 0, layer_rows = 0, eval_rows = 0;  // trajectory rows covered
  std::string config;                          // effective configuration (without run.resume)
};

// Per-rank state beyond the replica's own vectors.
struct RankCheckpointExtra {
  std::vector<std::int64_t> fault_last_active;  // FaultSet bookkeeping of this rank
  bool nonfinite_seen = false;
};

std::string checkpoint_root(const std::string& output_path);

// Collective: every process writes its logical ranks; process 0 writes the manifest and publishes.
void write_checkpoint(MPI_Comm comm, const std::string& output_path, const CheckpointManifest& manifest,
                      const std::vector<const Replica*>& replicas, const std::vector<RankCheckpointExtra>& extras);

// The newest complete checkpoint for this output, if any (reads the manifest only).
std::optional<CheckpointManifest> find_checkpoint(const std::string& output_path);

// Restores one logical rank; throws IoError on a missing, truncated or mismatched file.
void read_rank_checkpoint(const std::string& output_path, std::int64_t step, Replica& r, RankCheckpointExtra& extra);

}  // namespace divsim
