// Reads float32 values (raw, native byte order) from stdin and writes each rounded to the format named
// by argv[1] (tf32 | bf16 | fp16) through numerics/bits.hpp's round_to_format, the function the layers
// call: validation/rounding.py compares the result with PyTorch's conversions.
#include <cstdio>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "numerics/bits.hpp"

int main(int argc, char** argv) {
  const auto format = argc == 2 ? divsim::enum_from<divsim::MatmulFormat>(argv[1]) : std::nullopt;
  if (!format) {
    std::fprintf(stderr, "usage: %s tf32|bf16|fp16|fp32 < float32s > float32s\n", argv[0]);
    return 2;
  }
  std::vector<float> v;
  float block[4096];
  for (std::size_t n; (n = std::fread(block, sizeof(float), 4096, stdin)) > 0;) v.insert(v.end(), block, block + n);
  divsim::round_to_format(v, *format);
  return std::fwrite(v.data(), sizeof(float), v.size(), stdout) == v.size() ? 0 : 1;
}
