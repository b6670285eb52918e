#pragma once
// PyTorch as the reference peer of the unit tests: run a script with Debian's /usr/bin/python3 and read
// back what it prints, and check one layer style against the torch module that computes the same thing.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/layer.hpp"
#include "model/model.hpp"

namespace divsim::test {

// The first lines of every torch script: import torch, or print NO_TORCH (the caller skips) and exit.
inline constexpr const char* kImportTorch =
    "import sys\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print('NO_TORCH', repr(e)); sys.exit(0)\n";

std::string exact(double v);                    // a Python expression for v, bit for bit
std::string hex_list(std::span<const float> v);  // "0x1.8p-1 ..." for h() in the scripts

// got vs want: max abs err <= rel * max |want| (gtest expectation), the comparison printed either way.
void expect_close(const std::string& what, std::span<const float> got, const std::vector<double>& want, double rel);

// Runs `script` with /usr/bin/python3; returns stdout+stderr lines keyed by their first word. A script
// that prints NO_TORCH (its `import torch` failed) makes the caller skip.
std::map<std::string, std::vector<double>> run_python(const std::string& script, std::string& raw);

// One layer against torch: the layer runs forward (training mode) on `rows` random samples, then backward
// from a random dy; the script builds `m`, a torch module whose parameters and buffers carry the layer's
// ParamSpec / BufferSpec names, loads the same values, runs the same pass in float32 and prints y, each
// input's gradient, each parameter's gradient, each buffer after the pass, and the eval-mode output.
// Every one must agree within `rel` times its largest reference magnitude.
struct TorchLayerCase {
  TorchLayerCase(LayerSpec s, std::int64_t r, std::string m) : spec(std::move(s)), rows(r), module(std::move(m)) {}
  LayerSpec spec;
  std::int64_t rows;
  std::string module;           // Python statements defining m (torch and F = torch.nn.functional imported)
  double rel = 1e-5;
  double input_scale = 1.0;     // the inputs' standard deviation
  std::vector<int> integer_inputs;  // inputs holding indices in [0, bound) (token ids), by position
  std::int64_t integer_bound = 0;
  bool check_eval = true;
};
// Returns false (and reports the skip reason in `skipped`) when torch cannot be imported.
bool check_layer_against_torch(const TorchLayerCase& c, std::string& skipped);

// One training step of a whole model against the same network written in torch. The script defines
// `net` (nn and F in scope) and the inputs its `loss` expression reads; the check loads divsim's initial
// parameters into it by state_dict key (the names must be divsim's, in divsim's order), computes `loss`
// in float32 and its gradients. divsim's step loss and eval loss (same parameters, so the same value
// without dropout) must agree within 1e-6 relative, every parameter gradient within 1e-5 of its tensor's
// largest |grad|.
struct TorchModelStep {
  std::string net;     // Python defining `net`
  std::string inputs;  // Python defining the tensors `loss` reads
  std::string loss;    // a Python expression: the mean loss torch differentiates
};
struct DivsimStep {
  const Model& model;
  std::span<const float> init, grad;  // parameters before the step, the step's reduced gradient
  double loss = 0.0, eval_loss = 0.0;
};
// Returns false (and reports the skip reason in `skipped`) when torch cannot be imported.
bool check_model_step_against_torch(const TorchModelStep& t, const DivsimStep& d, std::string& skipped);

}  // namespace divsim::test
