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

namespace divsim::test {

// The first lines of every torch script: import torch, or print NO_TORCH (the caller skips) and exit.
inline constexpr const char* kImportTorch =
    "import sys\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print('NO_TORCH', repr(e)); sys.exit(0)\n";

// What a whole-model script needs after kImportTorch: nn and F, one thread, h() to read hex_list()'s
// floats and out() to print a tensor's values bit for bit under a key (parsed by run_python).
inline constexpr const char* kModelScriptPrelude =
    "nn = torch.nn\n"
    "F = nn.functional\n"
    "torch.set_num_threads(1)\n"
    "h = lambda s: [float.fromhex(v) for v in s.split()]\n"
    "out = lambda key, t: print(key, ' '.join(float(v).hex() for v in t.detach().double().flatten().tolist()))\n";

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

}  // namespace divsim::test
