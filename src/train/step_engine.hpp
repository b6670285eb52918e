#pragma once
// Forward, loss and backward of one micro-step for all of this process's logical ranks, in lockstep
// layer by layer, so that SyncBatchNorm can reduce batch statistics across every logical rank in the
// middle of the pass. Also evaluation with each rank's own replica.
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

#include "model/layers.hpp"
#include "train/engine.hpp"

namespace divsim {

class StepEngine final : public Engine {
 public:
  StepEngine(const Mlp& model, const Dataset& train, Reducer& reducer, const EngineSettings& settings);

  int grad_parts() const override { return grad_parts_; }
  int chunks_per_micro() const { return chunks_per_micro_; }
  void allocate(Replica& r) const override;

  void run_micro(std::span<Replica> replicas, std::int64_t step, int micro, LayerStatsBuffer* stats) override;

  EvalResult evaluate(const Replica& r, const Dataset& data) override;

 private:
  void gather_inputs(Replica& r, std::int64_t step) const;
  void forward_layer(std::span<Replica> replicas, std::size_t l, std::int64_t step);
  void batchnorm_forward(std::span<Replica> replicas, const Layer& layer);
  void backward_layer(std::span<Replica> replicas, std::size_t l, int micro);
  void batchnorm_backward(std::span<Replica> replicas, const Layer& layer, int micro);
  // Combine per-chunk partial sums [rank_count][chunks][n] into per-rank totals [rank_count][n]: across
  // all logical ranks (sync_bn, identical totals) or within each rank. Returns the row count they cover.
  double combine_bn_sums(std::size_t ranks, std::size_t n);
  // Matmul inputs in the replica's precision (rounded copies unless fp32).
  ConstMatView matmul_input(const Replica& r, ConstMatView m, std::vector<float>& scratch) const;
  const float* layer_input(const Replica& r, std::size_t l) const;
  struct GradTarget {
    std::size_t slot;  // of Replica::grads
    GradWrite write;
  };
  GradTarget grad_target(int micro, int chunk) const;

  const Mlp& model_;
  const Dataset& data_;
  Reducer& reducer_;
  EngineSettings s_;
  int chunks_per_micro_ = 1, grad_parts_ = 1;
  std::vector<std::int64_t> product_rows_;  // per layer: EngineSettings::product_rows resolved
  std::vector<double> bn_parts_, bn_totals_, bn_means_;    // scratch for BN statistics
  std::vector<float> round_a_, round_b_, round_c_;         // precision-emulation scratch
  std::vector<float> eval_a_, eval_b_;                     // eval ping-pong
  std::vector<std::int32_t> eval_labels_;
};

}  // namespace divsim
