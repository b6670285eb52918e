#pragma once
// One layer style outside a model, for tests: its parameters (random), buffers (their initial values),
// inputs (random), output, gradients and saved tensors for `rows` samples, laid out as a model would, and
// the calls an engine makes, with cross-row statistics (BatchNorm) run in one chunk.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/layer.hpp"

namespace divsim::test {

class LayerBench {
 public:
  LayerBench(const LayerSpec& spec, std::int64_t rows, double input_scale = 1.0);

  const Layer& layer() const { return *layer_; }
  std::size_t param_offset(std::size_t i) const { return param_offsets_[i]; }
  std::size_t buffer_offset(std::size_t i) const { return buffer_offsets_[i]; }
  // The pass over all rows (x, y, dx, dy, saved, params, buffers, grads); fp32 operands unless `round`.
  Pass pass();

  void forward();
  void forward_eval(std::vector<float>& out);
  // Parameter gradients into `grads` as `write` says, then the input gradients.
  void backward(GradWrite write);
  // Input i holds indices in [0, bound) (token ids, random) instead of values, and has no gradient.
  void token_ids(std::size_t i, std::int64_t bound);

  std::int64_t rows;
  std::vector<float> params, grads, buffers, y, dy;
  std::vector<std::vector<float>> x, dx, saved;
  std::vector<std::int64_t> samples;          // global sample index of each row (dropout keys)
  std::vector<double> forward_totals, backward_totals;  // statistics layers: the phases' totals
  MatmulFormat format = MatmulFormat::fp32;

 private:
  std::unique_ptr<Layer> layer_;
  std::vector<std::size_t> param_offsets_, buffer_offsets_;
  std::vector<float*> saved_ptrs_;
  std::vector<float> work_;
  std::vector<float> round_scratch_[3];
  std::unique_ptr<OperandRounding> round_;
};

}  // namespace divsim::test
