#include "data/raw_images.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

namespace divsim {
namespace {
constexpr double kStdFloor = 1e-3;
__extension__ typedef __int128 int128;  // GCC/Clang builtin
}  // namespace

void require_regular_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found || ec || std::filesystem::is_regular_file(status)) return;
  throw DataError(path, std::filesystem::is_directory(status) ? "cannot open: is a folder, not a file"
                                                              : "cannot open: not a regular file (a pipe, device or socket)");
}

// Keeps the first n samples (n = 0: all). `key` names the setting for the error message.
void truncate_raw(RawImages& raw, std::int64_t n, const char* key, const std::string& file) {
  if (n < 0) throw std::invalid_argument(std::string(key) + " = " + std::to_string(n) + " must be >= 0");
  if (n == 0) return;
  if (n > raw.n) {
    throw DataError(file, std::string(key) + " = " + std::to_string(n) + " exceeds the " +
                              std::to_string(raw.n) + " samples in this file");
  }
  raw.n = n;
  raw.pixels.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(raw.height * raw.width));
  raw.labels.resize(static_cast<std::size_t>(n));
}

PixelStats pixel_stats(const RawImages& train) {
  const auto dim = static_cast<std::size_t>(train.height * train.width);
  std::vector<std::int64_t> s1(dim, 0), s2(dim, 0);
  for (std::int64_t i = 0; i < train.n; ++i) {
    const std::uint8_t* px = train.pixels.data() + static_cast<std::size_t>(i) * dim;
    for (std::size_t p = 0; p < dim; ++p) {
      s1[p] += px[p];
      s2[p] += std::int64_t{px[p]} * px[p];
    }
  }
  PixelStats st{std::vector<double>(dim), std::vector<double>(dim)};
  const auto n = static_cast<double>(train.n);
  for (std::size_t p = 0; p < dim; ++p) {
    st.mean[p] = static_cast<double>(s1[p]) / (255.0 * n);
    // In 128 bits: n * S2 overflows 64 for tens of millions of samples (same result below that).
    const auto nn = static_cast<int128>(train.n);
    const double var = static_cast<double>(nn * s2[p] - static_cast<int128>(s1[p]) * s1[p]) / (n * n * 65025.0);
    st.std[p] = std::max(std::sqrt(var), kStdFloor);
  }
  return st;
}

Dataset standardise(const RawImages& raw, const PixelStats& st) {
  Dataset ds;
  ds.n = raw.n;
  ds.height = raw.images ? raw.height : 0;
  ds.width = raw.images ? raw.width : 0;
  ds.dim = std::int64_t{raw.height} * raw.width;
  ds.classes = raw.classes;
  const auto dim = static_cast<std::size_t>(ds.dim);
  // A pixel takes one of 256 values: tabulate each feature's 256 standardised floats (the same double
  // expression, so the same bits) instead of a division and a modulo per pixel of the whole split.
  std::vector<float> table(dim * 256);
  for (std::size_t p = 0; p < dim; ++p)
    for (int v = 0; v < 256; ++v) table[p * 256 + v] = static_cast<float>((v / 255.0 - st.mean[p]) / st.std[p]);
  ds.x.resize(raw.pixels.size());
  for (std::size_t row = 0; row < static_cast<std::size_t>(ds.n); ++row) {
    const std::uint8_t* px = raw.pixels.data() + row * dim;
    float* x = ds.x.data() + row * dim;
    for (std::size_t p = 0; p < dim; ++p) x[p] = table[p * 256 + px[p]];
  }
  ds.y = raw.labels;
  if (raw.images) {
    ds.background.resize(dim);
    for (std::size_t p = 0; p < dim; ++p)
      ds.background[p] = static_cast<float>(-st.mean[p] / st.std[p]);  // b = 0
  }
  return ds;
}

}  // namespace divsim
