// The contract every layer style keeps with the engines (model/layer.hpp), checked on each registered
// style: forward writes every element of its output; backward_input overwrites every element of each
// input gradient (a NaN left there would survive); backward_params with GradWrite::overwrite gives the
// bits of accumulating onto zeros, whatever the gradient slot held; in bf16 its operands fit the
// rounding scratch. A style registered without an
// example here fails the test, so new styles are covered from the start.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layer_bench.hpp"
#include "model/layer.hpp"

using namespace divsim;

namespace {

// One small instance of each style, with the rows it runs on.
const std::map<std::string, LayerSpec>& examples() {
  static const std::map<std::string, LayerSpec> specs = {
      {"linear", {"linear", "fc", {{6}}, {{"out", 4}}}},
      {"relu", {"relu", "relu", {{2, 3}}, {}}},
      {"dropout", {"dropout", "drop", {{5}}, {{"p", 0.3}}}},
      {"batchnorm1d", {"batchnorm1d", "bn", {{5}}, {}}},
      {"batchnorm2d", {"batchnorm2d", "bn", {{2, 3, 3}}, {}}},
      {"conv2d", {"conv2d", "conv", {{2, 5, 5}}, {{"out", 3}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}}},
      {"avgpool", {"avgpool", "pool", {{3, 4, 4}}, {}}},
      {"add", {"add", "add", {{2, 3}, {2, 3}}, {}}},
      {"layernorm", {"layernorm", "ln", {{3, 8}}, {}}},
      {"gelu", {"gelu", "gelu", {{3, 5}}, {{"tanh", 1}}}},
      {"attention", {"attention", "attn", {{4, 12}}, {{"heads", 2}, {"causal", 1}}}},
      {"patch_tokens", {"patch_tokens", "tokens", {{3, 2, 2}}, {}}},
      {"class_token", {"class_token", "cls", {{4, 3}}, {}}},
      {"embedding", {"embedding", "wte", {{6}}, {{"vocab", 5}, {"dim", 4}}}},
  };
  return specs;
}


constexpr std::int64_t kRows = 4;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Styles whose input is token ids, with their bound.
const std::map<std::string, std::int64_t> kTokenInputs = {{"embedding", 5}};

test::LayerBench bench_for(const std::string& style) {
  test::LayerBench b(examples().at(style), kRows);
  if (kTokenInputs.contains(style)) b.token_ids(0, kTokenInputs.at(style));
  return b;
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
         });
}

}  // namespace

TEST(LayerContract, EveryStyleWritesItsOutputsAndHonoursGradWrite) {
  for (const auto& [style, factory] : layer_registry()) {
    ASSERT_TRUE(examples().contains(style)) << "layer style " << style << " has no example in contract_test.cpp";
    test::LayerBench b = bench_for(style);
    std::fill(b.y.begin(), b.y.end(), kNaN);
    b.forward();
    EXPECT_TRUE(all_finite(b.y)) << style << ": forward left output elements unwritten";
    std::fill(b.grads.begin(), b.grads.end(), 0.0f);
    b.backward(GradWrite::accumulate);
    const std::vector<float> accumulated = b.grads;
    std::fill(b.grads.begin(), b.grads.end(), kNaN);
    for (auto& dx : b.dx) std::fill(dx.begin(), dx.end(), kNaN);
    b.backward(GradWrite::overwrite);
    EXPECT_TRUE(same_bits(b.grads, accumulated)) << style << ": overwrite is not accumulate onto zeros";
    EXPECT_TRUE(all_finite(b.grads)) << style;
    for (const auto& dx : b.dx) EXPECT_TRUE(all_finite(dx)) << style << ": an input gradient element was not overwritten";
    // Reduced precision rounds operands through the engine's scratch (or the layer's workspace): it must fit.
    test::LayerBench bf16 = bench_for(style);
    bf16.format = MatmulFormat::bf16;
    EXPECT_NO_THROW(bf16.forward()) << style << " in bf16";
    EXPECT_NO_THROW(bf16.backward(GradWrite::overwrite)) << style << " in bf16";
    EXPECT_TRUE(all_finite(bf16.y) && all_finite(bf16.grads)) << style << " in bf16";
    std::printf("[ contract ] %-12s %zu params, %zu saved tensors: OK\n", style.c_str(), b.params.size(), b.saved.size());
  }
}
