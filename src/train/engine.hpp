#pragma once
// The compute backend interface: forward, loss and backward of one micro-step for this process's
// logical ranks, and evaluation. StepEngine (train/step_engine.hpp) is the CPU reference; the GPU
// backend (kernels/, -DDIVSIM_CUDA=ON) implements the same contract. The step loop only sees this.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "comm/reducer.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "train/batch_plan.hpp"
#include "train/replica.hpp"

namespace divsim {

struct EngineSettings {
  BatchPlan plan;
  std::int64_t chunk = 0;      // rows per chunk (== micro_batch unless deterministic)
  bool deterministic = false;  // one gradient slot per chunk of the step
  // deterministic: grad_slot[s] is the slot chunk s's gradient goes to: its own, or a lower one whose
  // chunk is computed before it and onto which it is added (its tree sibling, trainer.cpp). Empty: its own.
  std::vector<int> grad_slot;
  // Per layer, rows per forward and input-gradient product: chunk (0 or absent means chunk), or the
  // micro-batch where the kernels give a row the same bits whatever the row count
  // (rows_do_not_depend_on_row_count).
  std::vector<std::int64_t> product_rows;
  bool sync_bn = false;        // BN statistics over all logical ranks
  bool augment = false;
};

// Per-layer statistics of one step for this process's ranks: [rank_count][L][kStatCount] and [rank_count][L].
struct LayerStatsBuffer {
  std::vector<double> forward, backward, grad_norm;
};

struct EvalResult {
  double loss = 0.0, accuracy = 0.0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual int grad_parts() const = 0;               // gradient slots per replica
  virtual void allocate(Replica& r) const = 0;      // sizes gradients and workspace once
  // Micro-step `micro` of optimizer step `step` over the samples already in each replica's `samples`.
  // Micro-step 0 starts the step's gradient (whatever the slots held before is overwritten), later
  // ones accumulate into the replicas' slots (host memory); losses into loss_parts/loss_sum.
  // `grad_scale` multiplies dloss/dlogits of every target (times the rank's loss scale): the step's loss
  // normalisation (trainer.cpp). When `stats` is given, layer statistics of this micro-step are written
  // into it.
  virtual void run_micro(std::span<Replica> replicas, std::int64_t step, int micro, float grad_scale,
                         LayerStatsBuffer* stats) = 0;
  // Mean cross-entropy per counted target and the fraction of targets predicted right, of one replica on
  // a dataset (eval mode: running BN statistics, no dropout), in batches of a fixed size so the result
  // does not depend on the world size.
  virtual EvalResult evaluate(const Replica& r, const Dataset& data) = 0;
};

}  // namespace divsim
