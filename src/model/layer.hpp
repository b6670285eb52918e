#pragma once
// A layer style: one registered file (DIVSIM_REGISTER_LAYER, as faults register) that owns the whole math
// of one kind of layer, forward and backward, and declares what the rest of divsim needs to know about it:
//   - its parameter tensors (PyTorch state_dict name, shape, init rule) and buffers (BatchNorm's running
//     statistics), laid out by the model in the flat float32 parameter / buffer arrays;
//   - the tensors it keeps from forward for backward ("saved", named after what they hold);
//   - the matrix products it runs (the determinism planning and the GEMM probes ask these);
//   - for layers whose statistics span rows (BatchNorm): phases, partial sums -> reducer -> finish, so the
//     engine reduces them across ranks (SyncBatchNorm) between the phases; a layer never calls MPI.
// Activations are float32, row-major per sample: rows are the samples of the block being processed, and a
// sample's features are its shape flattened as PyTorch does ((C,H,W) for images, (T,C) for sequences).
// Layers are immutable after construction; all per-rank state lives in the buffers a Pass points at, so
// one layer object serves every replica.
//
// Contract of the calls (the engines, train/step_engine.cpp and kernels/, hold to it):
//   forward        rows of a block; writes y and the saved tensors of those rows
//   backward_params rows of one chunk; writes (GradWrite::overwrite) or adds its parameter gradients into
//                  the chunk's gradient slot
//   backward_input rows of a block; OVERWRITES dx of every input that needs one (dx[i] null: it does not)
// The engine adds the input gradients of an activation read by several layers (residual connections).
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/tensor.hpp"
#include "numerics/bits.hpp"

namespace divsim {

using Shape = std::vector<std::int64_t>;  // one sample's shape, e.g. {C, H, W} or {T, C}
std::int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "(16, 28, 28)"

// How a parameter tensor starts: U(-bound, bound), N(0, std) or a constant. Draws come from the tensor's
// own keyed stream (model.cpp), so one tensor's values never depend on another's.
struct Init {
  enum class Kind { uniform, normal, constant } kind = Kind::constant;
  double value = 0.0;  // the bound, the standard deviation or the constant
  static Init uniform(double bound) { return {Kind::uniform, bound}; }
  static Init normal(double std) { return {Kind::normal, std}; }
  static Init constant(double v) { return {Kind::constant, v}; }
};

struct ParamSpec {
  std::string name;  // within the layer: "weight", "bias", "in_proj_weight"
  Shape shape;
  Init init;
  // Tied weights (GPT-2's output head is its token embedding): the state_dict key of an earlier layer's
  // tensor this one IS (LayerSpec::ties); it has no storage of its own and its gradient adds onto that
  // tensor's. Empty: the layer's own tensor.
  std::string tied;
  // Whether a later layer may tie to this tensor: the layer then adds its gradient onto the later layer's
  // (write_of), which runs first in backward.
  bool shareable = false;
};

struct BufferSpec {
  std::string name;  // "running_mean"
  std::int64_t size = 0;
  float value = 0.0f;  // its initial value
};

// A tensor kept from forward for backward: `per_sample` floats for each row (an activation), or
// `per_replica` floats for the whole micro-batch (BatchNorm's batch mean). A per-sample tensor's pointer
// in a Pass is at the block's first row; a per-replica tensor's is at its start, whatever the block.
struct SavedSpec {
  std::string name;
  std::int64_t per_sample = 0, per_replica = 0;
};

// A product the layer runs as y[rows * rows_per_sample, out] = x[.., in] w[out, in]^T, with its weight
// gradient dw += dy^T x and input gradient dx = dy w (a convolution's im2col rows count rows_per_sample
// per sample). The planner probes the kernels on these shapes (model/gemm_backend.hpp).
struct MatrixProduct {
  std::int64_t rows_per_sample = 1, in = 0, out = 0;
};

enum class GradWrite { accumulate, overwrite };

// out[c] (=|+=) sum over r of x[r * stride + c], c < cols: a bias's (or a position table's) gradient.
// Not Eigen's colwise().sum(), which vectorises with alignment-dependent peeling, so its bits would depend
// on where the buffer happens to lie: rows are added in order into a block of sums that is then stored or
// added, as a product is onto its weight gradient (one rounding per element either way, so overwrite
// gives the bits of accumulating onto zeros; gemm_backend.hpp, accumulate_adds_rounded_product).
void column_sums(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride, float* out, GradWrite write);

// Matmul operands in the replica's precision: the view itself in fp32, else a rounded copy in one of the
// engine's scratch areas (one per operand role, so the three operands of a product can coexist).
class OperandRounding {
 public:
  enum Role { activation = 0, weight = 1, gradient = 2 };
  OperandRounding(MatmulFormat format, std::array<std::span<float>, 3> scratch) : format_(format), scratch_(scratch) {}
  MatmulFormat format() const { return format_; }
  ConstMatView operator()(Role role, ConstMatView m) const;
  // The same into memory of the layer's own (its workspace), for operands larger than the engine's
  // scratch: each role's holds the largest activation and the largest operand of a declared product
  // (MatrixProduct), for the rows of one call, and the largest parameter tensor.
  ConstMatView into(ConstMatView m, std::span<float> memory) const;

 private:
  MatmulFormat format_;
  std::array<std::span<float>, 3> scratch_;
};

// Per-row keys of the random streams a layer may draw from (dropout): a sample's mask is keyed by the
// step and its global sample index, never by rank or micro-step.
struct RowKeys {
  std::uint64_t dropout_seed = 0;
  std::int64_t step = 0;
  const std::int64_t* samples = nullptr;  // global sample index of each row of the block
};

// One replica, one block of rows. Pointers to per-row tensors are already at the block's first row.
struct Pass {
  std::int64_t rows = 0;
  std::array<const float*, 2> x{};  // inputs, in the order the model wired them
  float* y = nullptr;               // output
  std::span<float* const> saved;    // the layer's SavedSpec tensors, in declaration order (empty in eval)
  std::span<float> work;            // the layer's workspace for this call (Layer::add_workspace)
  const float* params = nullptr;    // the replica's flat parameters (layer offsets index into it)
  float* buffers = nullptr;         // the replica's flat buffers
  RowKeys keys;
  const OperandRounding* round = nullptr;
  // backward
  const float* dy = nullptr;        // gradient w.r.t. y
  std::array<float*, 2> dx{};       // gradients w.r.t. the inputs; null: not needed
  float* grads = nullptr;           // the gradient slot (same layout as params)
  GradWrite write = GradWrite::accumulate;
};

// What a model asks of a style: its name in the model, the shapes of its inputs, and its own settings.
struct LayerSpec {
  std::string style, name;
  std::vector<Shape> inputs;
  std::map<std::string, double> options;
  std::map<std::string, std::string> ties = {};  // parameter name -> the earlier tensor's key it is (ParamSpec::tied)
  double option(const std::string& key) const;                 // required (std::logic_error when missing)
  double option(const std::string& key, double fallback) const;
};

class StatisticsPhases;

class Layer {
 public:
  explicit Layer(const LayerSpec& spec);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const std::string& style() const { return style_; }
  const std::vector<Shape>& input_shapes() const { return inputs_; }
  const Shape& output_shape() const { return output_; }
  std::int64_t in_features(std::size_t i = 0) const { return numel(inputs_[i]); }
  std::int64_t out_features() const { return numel(output_); }
  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<BufferSpec>& buffers() const { return buffers_; }
  const std::vector<SavedSpec>& saved() const { return saved_; }
  const std::vector<MatrixProduct>& products() const { return products_; }
  // Floats of working memory one call needs for `rows` rows (Pass::work).
  std::int64_t workspace(std::int64_t rows) const { return work_per_sample_ * rows + work_per_call_; }
  // The settings it was built with (LayerSpec::options), for whoever rebuilds it elsewhere (the GPU
  // engine, a PyTorch export).
  double option(const std::string& key, double fallback) const;
  const std::map<std::string, double>& options() const { return options_; }

  // Where the model placed its tensors: offsets into the flat parameter and buffer arrays, in params() /
  // buffers() order, and its position in the model (keys its random streams).
  std::size_t param(std::size_t i) const { return param_offsets_[i]; }
  std::size_t buffer(std::size_t i) const { return buffer_offsets_[i]; }
  std::uint32_t index() const { return index_; }
  void place(std::uint32_t index, std::vector<std::size_t> param_offsets, std::vector<std::size_t> buffer_offsets);
  // A later layer ties its parameter to this layer's parameter i (ParamSpec::shareable).
  void share(std::size_t i);

  virtual void forward(const Pass& p) const = 0;
  // Evaluation mode (running statistics, no dropout); saved is empty.
  virtual void forward_eval(const Pass& p) const { forward(p); }
  virtual void backward_params(const Pass&) const {}
  virtual void backward_input(const Pass& p) const = 0;
  // Non-null for layers whose forward and backward need sums over all rows that share statistics.
  virtual const StatisticsPhases* statistics() const { return nullptr; }

 protected:
  void set_output(Shape s) { output_ = std::move(s); }
  void add_param(std::string name, Shape shape, Init init, bool shareable = false);
  void add_buffer(std::string name, std::int64_t size, float value) { buffers_.push_back({std::move(name), size, value}); }
  void add_saved(std::string name, std::int64_t per_sample, std::int64_t per_replica = 0) {
    saved_.push_back({std::move(name), per_sample, per_replica});
  }
  void add_product(MatrixProduct p) { products_.push_back(p); }
  // Working memory for the duration of one call, in training and in eval: not kept between calls (keep
  // tensors backward needs with add_saved), shared by all layers.
  void add_workspace(std::int64_t per_sample, std::int64_t per_call = 0) {
    work_per_sample_ = per_sample;
    work_per_call_ = per_call;
  }
  // A parameter or buffer of this replica, by declaration index.
  const float* weight_of(const Pass& p, std::size_t i) const { return p.params + param_offsets_[i]; }
  float* grad_of(const Pass& p, std::size_t i) const { return p.grads + param_offsets_[i]; }
  // How backward_params writes parameter i's gradient: as the Pass says, or added when a later layer
  // shares the tensor (its gradient is there already).
  GradWrite write_of(const Pass& p, std::size_t i) const { return shared_[i] ? GradWrite::accumulate : p.write; }

 private:
  std::string style_, name_;
  std::vector<Shape> inputs_;
  std::map<std::string, double> options_;
  std::map<std::string, std::string> ties_;
  Shape output_;
  std::vector<ParamSpec> params_;
  std::vector<BufferSpec> buffers_;
  std::vector<SavedSpec> saved_;
  std::vector<MatrixProduct> products_;
  std::int64_t work_per_sample_ = 0, work_per_call_ = 0;
  std::vector<std::size_t> param_offsets_, buffer_offsets_;
  std::vector<bool> shared_;
  std::uint32_t index_ = 0;
};

// Cross-row statistics in phases. Forward: for phase 0..forward_phases()-1 the engine collects each
// chunk's partial sums (width doubles), sums them over the rows that share statistics (the rank's
// micro-batch; every rank's with SyncBatchNorm, through the Reducer), and passes the totals of all earlier
// phases to the next; forward_finish then sees every phase's totals. Backward: one phase of partial sums
// (which may also write the chunk's parameter gradients), then backward_finish writes dx. `rows` is the
// number of samples the totals cover.
class StatisticsPhases {
 public:
  virtual ~StatisticsPhases() = default;
  virtual int forward_phases() const = 0;
  virtual std::size_t forward_width() const = 0;
  virtual void forward_partial(int phase, const Pass& chunk, std::span<const double> earlier, double rows,
                               std::span<double> partial) const = 0;
  virtual void forward_finish(const Pass& all, std::span<const double> totals, double rows) const = 0;
  virtual std::size_t backward_width() const = 0;
  virtual void backward_partial(const Pass& chunk, std::span<double> partial) const = 0;
  virtual void backward_finish(const Pass& all, std::span<const double> totals, double rows) const = 0;
};

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&)>;
std::map<std::string, LayerFactory>& layer_registry();
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);  // std::logic_error for an unknown style

struct LayerRegistrar {
  LayerRegistrar(const char* style, LayerFactory factory) { layer_registry()[style] = std::move(factory); }
};

#define DIVSIM_REGISTER_LAYER(STYLE, CLASS)                                                         \
  static const ::divsim::LayerRegistrar layer_registrar_##CLASS(STYLE, [](const ::divsim::LayerSpec& s) { \
    return std::unique_ptr<::divsim::Layer>(std::make_unique<CLASS>(s));                            \
  })

}  // namespace divsim
