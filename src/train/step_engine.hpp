#pragma once
// Forward, loss and backward of one micro-step for all of this process's logical ranks, in lockstep
// layer by layer over the model's graph, so that SyncBatchNorm can reduce batch statistics across every
// logical rank in the middle of the pass. Also evaluation with each rank's own replica.
//
// Chunks: in deterministic mode a rank's micro-batch is processed as fixed chunks of `chunk` samples
// (the same shapes whatever the world size, so every chunk's float results are identical bits), and each
// chunk's parameter gradient goes to its own slot of Replica::grads for the reducer to sum exactly (or is
// added onto its tree sibling's, EngineSettings::grad_slot); the forward and input-gradient products
// take the whole micro-batch where that gives every row its chunk's bits (EngineSettings::product_rows).
// In the other modes the whole micro-batch is one chunk and every micro-step accumulates into slot 0,
// as PyTorch accumulates .grad.
#include <cstdint>
#include <span>
#include <vector>

#include "train/engine.hpp"

namespace divsim {

class StepEngine final : public Engine {
 public:
  StepEngine(const Model& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings);

  int grad_parts() const override { return grad_parts_; }
  int chunks_per_micro() const { return chunks_per_micro_; }
  void allocate(Replica& r) const override;

  void run_micro(std::span<Replica> replicas, std::int64_t step, int micro, float grad_scale,
                 LayerStatsBuffer* stats) override;

  EvalResult evaluate(const Replica& r, const Dataset& data) override;

 private:
  void gather_inputs(Replica& r, std::int64_t step) const;
  void forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step);
  void backward_layer(std::span<Replica> replicas, std::size_t l, int micro);
  void statistics_forward(std::span<Replica> replicas, std::size_t l, std::int64_t step);
  void statistics_backward(std::span<Replica> replicas, std::size_t l, int micro);
  // Combine per-chunk partial sums [rank_count][chunks][n] into per-rank totals [rank_count][n] (at
  // `totals` + k * stride): across all logical ranks (sync_bn, identical totals) or within each rank.
  // Returns the row count they cover.
  double combine_statistics(std::size_t ranks, std::size_t n, double* totals, std::size_t stride);
  // Layer l's view of rows [row0, row0 + rows) of replica r: inputs, output, saved tensors, gradients.
  Pass pass(Replica& r, std::size_t l, std::int64_t row0, std::int64_t rows, std::int64_t step);
  // Where layer l's input i writes its gradient: the activation's gradient, or the scratch whose sum onto
  // it follows (a later reader of the activation has written it already).
  float* input_grad(Replica& r, std::size_t l, std::size_t i, std::int64_t row0);
  void add_input_grads(Replica& r, std::size_t l);
  const float* activation(const Replica& r, int a) const;
  struct GradTarget {
    std::size_t slot;  // of Replica::grads
    GradWrite write;
  };
  GradTarget grad_target(int micro, int chunk) const;

  const Model& model_;
  const Dataset& data_;
  Reducer& reducer_;
  EngineSettings s_;
  int chunks_per_micro_ = 1, grad_parts_ = 1;
  std::vector<std::int64_t> block_rows_;  // per layer: rows per forward / input-gradient call
  std::vector<std::array<bool, 2>> adds_grad_;  // per layer and input: add onto the activation's gradient
  std::vector<double> stat_parts_, stat_totals_;  // cross-row statistics: per chunk, per rank
  std::vector<float> round_a_, round_b_, round_c_;  // precision-emulation scratch
  std::vector<float> grad_scratch_;                 // input gradients that are added, not written
  std::vector<float> work_;                         // the layers' per-call workspace (Layer::add_workspace)
  std::vector<float*> saved_ptrs_;
  OperandRounding round_;
  // Evaluation: one buffer per activation of eval_batch rows.
  std::vector<std::vector<float>> eval_act_;
};

}  // namespace divsim
