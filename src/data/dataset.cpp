// Dataset loading: the IDX/gzip reader with its integrity checks, the per-pixel standardisation of
// Fashion-MNIST, the synthetic teacher data and the per-sample augmentation.
//
// Deliberately not here: HDF5 input (h5_dataset.cpp), label noise or class subsetting, and anything
// rank-dependent: every rank loads the same full splits and the sampler chooses rows.
#include "data/dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "data/h5_dataset.hpp"
#include "data/text_data.hpp"
#include "data/raw_images.hpp"
#include "numerics/philox.hpp"

namespace divsim {

DataError::DataError(std::string file, const std::string& problem)
    : std::runtime_error(file + ": " + problem), file_(std::move(file)) {}

namespace {

constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr std::int64_t kIdxClasses = 10;               // (Fashion-)MNIST labels are 0..9
constexpr int kShift = 2;  // augmentation shifts by up to this many pixels each way

// Owns a zlib read handle. gzread also reads uncompressed files transparently.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {
    require_regular_file(path_);  // gzopen would block on a FIFO and read a folder as an empty stream
    errno = 0;  // gzopen reports through errno; a stale value would name the wrong cause
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      throw DataError(path_,
                      std::string("cannot open: ") + (errno != 0 ? std::strerror(errno) : "gzopen failed"));
    }
    gzbuffer(file_, 1u << 17);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  // Reads exactly `n` bytes into `out` (resized as data arrives, so a header that claims far more
  // data than the file holds fails as truncated rather than as a huge allocation).
  void read_exact(std::vector<std::uint8_t>& out, std::size_t n, const char* what) {
    constexpr std::size_t kChunk = std::size_t{1} << 22;
    out.clear();
    while (out.size() < n) {
      const std::size_t want = std::min(kChunk, n - out.size());
      const std::size_t at = out.size();
      out.resize(at + want);
      const int got = gzread(file_, out.data() + at, static_cast<unsigned>(want));
      if (got < 0) throw DataError(path_, std::string("read error in ") + what + ": " + error_text());
      out.resize(at + static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < want) {
        throw DataError(path_, "truncated: expected " + std::to_string(n) + " bytes of " + what + ", got " +
                                   std::to_string(out.size()) + " (" + error_text() + ")");
      }
    }
  }

  std::uint32_t read_be32(const char* what) {
    std::vector<std::uint8_t> b;
    read_exact(b, 4, what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
  }

  // The data must end exactly where the header says, and the gzip stream must be complete (its
  // trailer holds the CRC: a stream cut inside it decompresses fully but is still corrupt).
  void expect_end() {
    std::uint8_t extra = 0;
    const int got = gzread(file_, &extra, 1);
    if (got > 0) throw DataError(path_, "has more data than its header declares");
    if (got < 0) throw DataError(path_, "read error at end of data: " + error_text());
    int errnum = Z_OK;
    gzerror(file_, &errnum);
    if (errnum != Z_OK) throw DataError(path_, "corrupt or truncated gzip stream: " + error_text());
  }

 private:
  std::string error_text() {
    int errnum = Z_OK;
    const char* msg = gzerror(file_, &errnum);
    if (errnum == Z_ERRNO) return std::strerror(errno);
    if (errnum == Z_OK) return "unexpected end of file";
    // zlib prefixes its message with the path, which DataError already puts first.
    const std::string text = msg, prefix = path_ + ": ";
    return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
  }

  std::string path_;
  gzFile file_ = nullptr;
};

void expect_magic(GzReader& f, const std::string& path, std::uint32_t expected, const char* what) {
  const std::uint32_t magic = f.read_be32("header");
  if (magic == expected) return;
  char got[16], want[16];
  std::snprintf(got, sizeof got, "0x%08X", magic);
  std::snprintf(want, sizeof want, "0x%08X", expected);
  throw DataError(path, std::string("wrong magic ") + got + " (" + what + " starts with " + want + ")");
}

RawImages read_idx_raw(const std::string& images_path, const std::string& labels_path) {
  RawImages raw;
  {
    GzReader f(images_path);
    expect_magic(f, images_path, kIdxImagesMagic, "an IDX image file");
    const std::uint32_t n = f.read_be32("header"), rows = f.read_be32("header"), cols = f.read_be32("header");
    if (n == 0 || rows == 0 || cols == 0) {
      throw DataError(images_path, "empty image set: " + std::to_string(n) + " images of " +
                                       std::to_string(rows) + "x" + std::to_string(cols));
    }
    if (rows > 4096 || cols > 4096) {  // also keeps n * rows * cols far from overflowing
      throw DataError(images_path,
                      "implausible image size " + std::to_string(rows) + "x" + std::to_string(cols));
    }
    raw.n = n;
    raw.height = static_cast<int>(rows);
    raw.width = static_cast<int>(cols);
    f.read_exact(raw.pixels, std::size_t{n} * rows * cols, "pixels");
    f.expect_end();
  }
  {
    GzReader f(labels_path);
    expect_magic(f, labels_path, kIdxLabelsMagic, "an IDX label file");
    const std::uint32_t n = f.read_be32("header");
    if (static_cast<std::int64_t>(n) != raw.n) {
      throw DataError(labels_path, "has " + std::to_string(n) + " labels but " + images_path + " has " +
                                       std::to_string(raw.n) + " images");
    }
    std::vector<std::uint8_t> bytes;
    f.read_exact(bytes, n, "labels");
    f.expect_end();
    raw.labels.resize(n);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] >= kIdxClasses) {
        throw DataError(labels_path, "label " + std::to_string(bytes[i]) + " of sample " + std::to_string(i) +
                                         " is out of range [0, " + std::to_string(kIdxClasses) + ")");
      }
      raw.labels[i] = bytes[i];
    }
  }
  return raw;
}

DataSplits load_fashion_mnist(const DataSection& cfg) {
  const std::string root = cfg.root.empty() || cfg.root.back() == '/' ? cfg.root : cfg.root + "/";
  const std::string train_images = root + "train-images-idx3-ubyte.gz";
  const std::string test_images = root + "t10k-images-idx3-ubyte.gz";
  RawImages train = read_idx_raw(train_images, root + "train-labels-idx1-ubyte.gz");
  RawImages test = read_idx_raw(test_images, root + "t10k-labels-idx1-ubyte.gz");
  if (test.height != train.height || test.width != train.width) {
    throw DataError(test_images, "images are " + std::to_string(test.height) + "x" +
                                     std::to_string(test.width) + " but the training images are " +
                                     std::to_string(train.height) + "x" + std::to_string(train.width));
  }
  truncate_raw(train, cfg.train_size, "data.train_size", train_images);
  truncate_raw(test, cfg.test_size, "data.test_size", test_images);
  const PixelStats st = pixel_stats(train);
  DataSplits out{standardise(train, st), standardise(test, st), ""};
  out.description = "fashion-mnist " + std::to_string(out.train.n) + "/" + std::to_string(out.test.n) + " (" +
                    std::to_string(out.train.dim) + " features, " + std::to_string(out.train.classes) +
                    " classes)";
  return out;
}

// Synthetic teacher data. Stream::synthetic words (what, index):
//   what = 0 / 1: features of training / test sample `index`: x_j = float32(normal(j)), j < dim
//   what = 2: teacher layer `index` (0: features -> hidden, 1: hidden -> classes), weight (o, i) of a
//             layer with fan-in F is normal(o * F + i) / sqrt(F); no biases
//   label = argmax_c (W1 tanh(W0 x))_c in double on the float32 features, the first maximum on ties.
// Keying features by sample index keeps a sample independent of the split sizes.
enum SyntheticWhat : std::uint32_t { kTrainFeatures = 0, kTestFeatures = 1, kTeacher = 2 };

struct Teacher {
  std::int64_t dim, hidden, classes;
  std::vector<double> w0, w1;  // hidden x dim, classes x hidden (row-major)
};

Teacher make_teacher(std::uint64_t seed, std::int64_t dim, std::int64_t hidden, std::int64_t classes) {
  Teacher t{dim, hidden, classes, std::vector<double>(static_cast<std::size_t>(hidden * dim)),
            std::vector<double>(static_cast<std::size_t>(classes * hidden))};
  const KeyedStream s0(seed, Stream::synthetic, kTeacher, 0), s1(seed, Stream::synthetic, kTeacher, 1);
  const double g0 = 1.0 / std::sqrt(static_cast<double>(dim)),
               g1 = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (std::size_t k = 0; k < t.w0.size(); ++k) t.w0[k] = s0.normal(k) * g0;
  for (std::size_t k = 0; k < t.w1.size(); ++k) t.w1[k] = s1.normal(k) * g1;
  return t;
}

Dataset make_synthetic_split(std::uint64_t seed, SyntheticWhat what, std::int64_t n, const Teacher& t) {
  Dataset ds;
  ds.n = n;
  ds.dim = t.dim;
  ds.classes = t.classes;
  ds.x.resize(static_cast<std::size_t>(n * t.dim));
  ds.y.resize(static_cast<std::size_t>(n));
  std::vector<double> h(static_cast<std::size_t>(t.hidden));
  for (std::int64_t i = 0; i < n; ++i) {
    const KeyedStream s(seed, Stream::synthetic, what, static_cast<std::uint32_t>(i));
    float* xi = ds.x.data() + i * t.dim;
    for (std::int64_t j = 0; j < t.dim; ++j)
      xi[j] = static_cast<float>(s.normal(static_cast<std::uint64_t>(j)));
    for (std::int64_t o = 0; o < t.hidden; ++o) {
      double acc = 0;
      for (std::int64_t j = 0; j < t.dim; ++j) acc += t.w0[static_cast<std::size_t>(o * t.dim + j)] * xi[j];
      h[static_cast<std::size_t>(o)] = std::tanh(acc);
    }
    std::int32_t best = 0;
    double best_logit = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < t.classes; ++c) {
      double acc = 0;
      for (std::int64_t o = 0; o < t.hidden; ++o)
        acc += t.w1[static_cast<std::size_t>(c * t.hidden + o)] * h[static_cast<std::size_t>(o)];
      if (acc > best_logit) {
        best_logit = acc;
        best = static_cast<std::int32_t>(c);
      }
    }
    ds.y[static_cast<std::size_t>(i)] = best;
  }
  return ds;
}

void require_at_least(std::int64_t v, std::int64_t min, const char* key) {
  if (v < min)
    throw std::invalid_argument(std::string(key) + " = " + std::to_string(v) +
                                " must be >= " + std::to_string(min));
}

DataSplits load_synthetic(const DataSection& cfg, std::uint64_t seed) {
  require_at_least(cfg.synthetic_train, 1, "data.synthetic_train");
  require_at_least(cfg.synthetic_test, 1, "data.synthetic_test");
  require_at_least(cfg.synthetic_features, 1, "data.synthetic_features");
  require_at_least(cfg.synthetic_classes, 2, "data.synthetic_classes");
  require_at_least(cfg.synthetic_teacher_hidden, 1, "data.synthetic_teacher_hidden");
  // Sample indices are one 32-bit stream word.
  constexpr std::int64_t kMaxSamples = std::int64_t{1} << 32;
  if (cfg.synthetic_train > kMaxSamples || cfg.synthetic_test > kMaxSamples) {
    throw std::invalid_argument("data.synthetic_train / data.synthetic_test must be <= 2^32");
  }
  const Teacher t =
      make_teacher(seed, cfg.synthetic_features, cfg.synthetic_teacher_hidden, cfg.synthetic_classes);
  DataSplits out{make_synthetic_split(seed, kTrainFeatures, cfg.synthetic_train, t),
                 make_synthetic_split(seed, kTestFeatures, cfg.synthetic_test, t), ""};
  out.description = "synthetic teacher " + std::to_string(out.train.n) + "/" + std::to_string(out.test.n) +
                    " (" + std::to_string(out.train.dim) + " features, " + std::to_string(out.train.classes) +
                    " classes, teacher hidden " + std::to_string(t.hidden) + ")";
  return out;
}

}  // namespace

Dataset read_idx_pair(const std::string& images_gz, const std::string& labels_gz) {
  const RawImages raw = read_idx_raw(images_gz, labels_gz);
  Dataset ds;
  ds.n = raw.n;
  ds.height = raw.height;
  ds.width = raw.width;
  ds.dim = std::int64_t{raw.height} * raw.width;
  ds.classes = kIdxClasses;
  ds.x.resize(raw.pixels.size());
  for (std::size_t i = 0; i < ds.x.size(); ++i) ds.x[i] = static_cast<float>(raw.pixels[i]) / 255.0f;
  ds.y = raw.labels;
  ds.background.assign(static_cast<std::size_t>(ds.dim), 0.0f);
  return ds;
}

std::int64_t Dataset::counted(std::int64_t i) const {
  const std::int32_t* t = targets_of(i);
  return std::count_if(t, t + targets, [](std::int32_t v) { return v != kIgnoredTarget; });
}

DataSplits load_data(const DataSection& cfg, std::uint64_t seed, std::int64_t block_size) {
  switch (cfg.source) {
    case DataSource::fashion_mnist: return load_fashion_mnist(cfg);
    case DataSource::synthetic: return load_synthetic(cfg, seed);  // data.augment is refused once loaded
    case DataSource::hdf5: return read_h5_splits(cfg.path, cfg.train_size, cfg.test_size);
    case DataSource::fortunes: {
      DataSplits d = load_text(fortune_files(), block_size, cfg.train_size, cfg.test_size);
      d.description = "fortunes " + d.description;
      return d;
    }
    case DataSource::text: {
      DataSplits d = load_text({cfg.path}, block_size, cfg.train_size, cfg.test_size);
      d.description = "text " + cfg.path + " " + d.description;
      return d;
    }
  }
  throw std::logic_error("unknown data.source");
}

void augment_image(const float* in, float* out, const Dataset& ds, std::uint64_t seed, std::int64_t step,
                   std::int64_t global_index) {
  if (ds.height <= 0 || std::int64_t{ds.height} * ds.width != ds.dim ||
      ds.background.size() != static_cast<std::size_t>(ds.dim)) {
    throw std::invalid_argument("augment_image: the dataset is not an image dataset");
  }
  if (step < 0 || step > std::numeric_limits<std::uint32_t>::max() || global_index < 0 ||
      global_index > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("augment_image: step " + std::to_string(step) + " or sample index " +
                                std::to_string(global_index) + " does not fit the 32-bit stream words");
  }
  // Draws: u = uniform(0) (flip if u < 0.5), dx = below(1, 5) - 2, dy = below(2, 5) - 2.
  // out(r, c) = src(r - dy, c - dx), src(r, c) = in(r, flip ? W-1-c : c); outside -> background(r, c).
  const KeyedStream s(seed, Stream::augment, static_cast<std::uint32_t>(step),
                      static_cast<std::uint32_t>(global_index));
  const bool flip = s.uniform(0) < 0.5f;
  const int dx = static_cast<int>(s.below(1, 2 * kShift + 1)) - kShift;
  const int dy = static_cast<int>(s.below(2, 2 * kShift + 1)) - kShift;
  const int h = ds.height, w = ds.width;
  for (int r = 0; r < h; ++r) {
    const int sr = r - dy;
    for (int c = 0; c < w; ++c) {
      const int sc = c - dx;
      const int at = r * w + c;
      if (sr < 0 || sr >= h || sc < 0 || sc >= w) {
        out[at] = ds.background[static_cast<std::size_t>(at)];
      } else {
        out[at] = in[sr * w + (flip ? w - 1 - sc : sc)];
      }
    }
  }
}

}  // namespace divsim
