#pragma once
// Datasets: Fashion-MNIST from Debian's dataset-fashion-mnist (IDX files, gzip), synthetic
// teacher-network data, character sequences (data/text_data.hpp), and the random image augmentation
// applied per sample.
//
// Everything is loaded once at start-up into plain, normalised float32 arrays; the step loop only
// reads rows. Deliberately not here: which samples a rank sees (sampler.hpp), batching, and any
// caching or streaming of datasets larger than memory.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace divsim {

// A problem with an input file (missing, corrupt, inconsistent). what() = "<file>: <problem>".
class DataError : public std::runtime_error {
 public:
  DataError(std::string file, const std::string& problem);
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// A target the loss skips (a padded position of a sequence), as PyTorch's ignore_index.
inline constexpr std::int32_t kIgnoredTarget = -1;

struct Dataset {
  std::int64_t n = 0, dim = 0, classes = 0;
  std::int64_t targets = 1;       // targets per sample: 1 (a class label) or one per sequence position
  int height = 0, width = 0;      // 28x28 for images, 0 for synthetic and sequences (no augmentation)
  std::vector<float> x;           // n*dim, row-major, normalised; sequences: token ids (exact in float32)
  std::vector<std::int32_t> y;    // n*targets labels in [0, classes), or kIgnoredTarget
  std::vector<std::string> vocabulary;  // sequences: the text of each token id; empty otherwise
  std::vector<float> background;  // dim: the normalised value of a black pixel (used as padding by
                                  // augmentation); empty if not images
  const float* row(std::int64_t i) const { return x.data() + i * dim; }
  const std::int32_t* targets_of(std::int64_t i) const { return y.data() + i * targets; }
  // Targets of sample i the loss counts (all but kIgnoredTarget).
  std::int64_t counted(std::int64_t i) const;
};

struct DataSplits {
  Dataset train, test;
  std::string description;  // e.g. "fashion-mnist 60000/10000 (784 features, 10 classes)"
};

// Loads cfg.source ("fashion-mnist" | "synthetic" | "hdf5" | "fortunes" | "text"), cut to cfg.train_size /
// cfg.test_size, normalised. `seed` keys the synthetic data (Stream::synthetic); `block_size` is the sequence
// length of the text sources (model.block_size). Throws DataError for file problems and
// std::invalid_argument for settings that cannot work (naming the data.* key).
DataSplits load_data(const DataSection& cfg, std::uint64_t seed, std::int64_t block_size);

// One IDX image file + its label file (gzip or plain), pixels scaled to [0,1] as float(byte) / 255.0f,
// 10 classes, background all 0 (black). Throws DataError naming the offending file.
Dataset read_idx_pair(const std::string& images_gz, const std::string& labels_gz);

// Random horizontal flip (p = 0.5) then shift by (dx, dy) uniform in {-2..2}^2 of one image row of `ds`,
// drawn from KeyedStream(seed, Stream::augment, step, global_index) (never the rank). Operates on the
// normalised values as they are: pixels are moved, not re-standardised, and uncovered pixels take
// ds.background at their position. `in` and `out` hold ds.dim floats and must not overlap.
// Throws std::invalid_argument if ds is not an image dataset.
void augment_image(const float* in, float* out, const Dataset& ds, std::uint64_t seed, std::int64_t step,
                   std::int64_t global_index);

}  // namespace divsim
