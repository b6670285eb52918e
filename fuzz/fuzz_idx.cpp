// libFuzzer target: the IDX reader on an image file and a label file (gzip or plain). The first two
// input bytes give the length of the image part; the rest is the label file. Accepted: a DataError, or
// a dataset whose shapes agree with each other and whose pixels and labels are in range.
#include <algorithm>
#include <cstdint>

#include "data/dataset.hpp"
#include "fuzz_util.hpp"

using divsim::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t split = std::min<std::size_t>(size - 2, data[0] | (std::size_t{data[1]} << 8));
  const std::string images = divsim::fuzz::scratch_file("images", data + 2, split);
  const std::string labels = divsim::fuzz::scratch_file("labels", data + 2 + split, size - 2 - split);
  divsim::Dataset ds;
  try {
    ds = divsim::read_idx_pair(images, labels);
  } catch (const divsim::DataError&) {
    return 0;
  }
  require(ds.n > 0 && ds.dim == std::int64_t{ds.height} * ds.width && ds.dim > 0, "shape is consistent");
  require(ds.x.size() == static_cast<std::size_t>(ds.n * ds.dim) && ds.y.size() == static_cast<std::size_t>(ds.n),
          "buffers match the shape");
  for (float v : ds.x) require(v >= 0.0f && v <= 1.0f, "pixels in [0,1]");
  for (auto y : ds.y) require(y >= 0 && y < ds.classes, "labels in [0, classes)");
  return 0;
}
