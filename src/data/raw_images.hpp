#pragma once
// Internal to data/: byte images before standardisation, shared by the IDX reader (dataset.cpp) and the
// HDF5 reader (h5_dataset.cpp), and the checks every reader makes of a path before it opens it.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace divsim {

// One byte per pixel (or feature), one label per sample. Standardisation needs the bytes themselves:
// its statistics are exact integer sums of them.
struct RawImages {
  std::int64_t n = 0;
  int height = 0, width = 0;         // width = features and height = 1 for flat byte features
  bool images = true;                // false: flat features (no augmentation)
  std::int64_t classes = 10;
  std::vector<std::uint8_t> pixels;  // n * height * width
  std::vector<std::int32_t> labels;  // n, each in [0, classes)
};

// Keeps the first n samples (n = 0: all). `key` names the setting for the error message.
void truncate_raw(RawImages& raw, std::int64_t n, const char* key, const std::string& file);

// Per-pixel statistics of the training split, exactly as the PyTorch replay computes them:
//   with b the raw byte, n the number of (used) training samples, for each pixel p:
//   S1 = sum b, S2 = sum b^2                                        (exact integers)
//   mean_p = double(S1) / (255.0 * n)
//   var_p  = double(n * S2 - S1 * S1) / (double(n) * double(n) * 65025.0)    (population variance)
//   std_p  = max(sqrt(var_p), 1e-3)         (the floor keeps near-constant border pixels finite)
//   x      = float32((b / 255.0 - mean_p) / std_p)    every operation in double, one final rounding
// The test split uses the training mean_p and std_p. Integer sums make the statistics independent of
// summation order, so numpy reproduces every float bit for bit.
struct PixelStats {
  std::vector<double> mean, std;
};
PixelStats pixel_stats(const RawImages& train);
Dataset standardise(const RawImages& raw, const PixelStats& st);

// Throws DataError unless `path` is missing (the reader's own open reports that) or a regular file: a
// folder would read as an empty stream and opening a FIFO blocks forever.
void require_regular_file(const std::string& path);

}  // namespace divsim
