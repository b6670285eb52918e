// Dataset tests: the IDX reader on small fixture files (valid and broken), the normalisation against
// an independent two-pass computation and against numpy-computed bits of the real Fashion-MNIST, the
// synthetic teacher data, and the augmentation's transform family and keying.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data_error.hpp"
#include "numerics/philox.hpp"
#include "temp_dir.hpp"

using namespace divsim;
using divsim::test::expect_data_error;
using divsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;


void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(const Bytes& labels, std::uint32_t magic = 0x801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_gz(const std::string& path, const Bytes& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Cuts the compressed file to its first `keep` bytes (keep < 0: drop -keep bytes from the end).
void truncate_file(const std::string& path, std::ptrdiff_t keep) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto n = keep >= 0 ? static_cast<std::size_t>(keep) : all.size() - static_cast<std::size_t>(-keep);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(all.data(), static_cast<std::streamsize>(n));
}

Bytes iota_bytes(std::size_t n, int mul) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::uint8_t>((i * static_cast<std::size_t>(mul)) % 256);
  return b;
}

}  // namespace

TEST(IdxReader, ReadsPixelsAndLabels) {
  TempDir dir;
  const Bytes px = iota_bytes(3 * 4 * 5, 17);
  write_gz(dir.file("img.gz"), idx_images(3, 4, 5, px));
  write_gz(dir.file("lab.gz"), idx_labels({0, 9, 3}));
  const Dataset ds = read_idx_pair(dir.file("img.gz"), dir.file("lab.gz"));
  EXPECT_EQ(ds.n, 3);
  EXPECT_EQ(ds.height, 4);
  EXPECT_EQ(ds.width, 5);
  EXPECT_EQ(ds.dim, 20);
  EXPECT_EQ(ds.classes, 10);
  ASSERT_EQ(ds.x.size(), px.size());
  for (std::size_t i = 0; i < px.size(); ++i) EXPECT_EQ(ds.x[i], static_cast<float>(px[i] / 255.0)) << i;
  EXPECT_EQ(ds.y, (std::vector<std::int32_t>{0, 9, 3}));
  EXPECT_EQ(ds.background, std::vector<float>(20, 0.0f));
  EXPECT_EQ(ds.row(2), ds.x.data() + 40);
}

TEST(IdxReader, ReportsBrokenFilesByName) {
  TempDir dir;
  const Bytes px = iota_bytes(3 * 4 * 5, 7);
  const std::string img = dir.file("img.gz"), lab = dir.file("lab.gz");
  const auto read = [&] { read_idx_pair(img, lab); };
  write_gz(lab, idx_labels({1, 2, 3}));

  expect_data_error(read, img, "cannot open");  // images not written yet
  write_gz(img, idx_images(3, 4, 5, px, 0x801));
  expect_data_error(read, img, "wrong magic 0x00000801");
  write_gz(img, idx_images(4, 4, 5, px));  // header claims a 4th image the file lacks
  expect_data_error(read, img, "truncated");
  write_gz(img, idx_images(3, 4, 5, iota_bytes(61, 7)));  // one byte more than declared
  expect_data_error(read, img, "more data than its header declares");
  write_gz(img, idx_images(0, 4, 5, {}));
  expect_data_error(read, img, "empty");

  // A gzip stream cut in the middle of the data, and one cut inside its 8-byte CRC/size trailer.
  const Bytes big = iota_bytes(50 * 4 * 5, 13);
  write_gz(img, idx_images(50, 4, 5, big));
  truncate_file(img, 40);
  expect_data_error(read, img, "truncated");
  write_gz(img, idx_images(50, 4, 5, big));
  truncate_file(img, -4);
  expect_data_error(read, img, "gzip");

  write_gz(img, idx_images(3, 4, 5, px));
  EXPECT_NO_THROW(read());
  write_gz(lab, idx_labels({1, 2, 3}, 0x803));
  expect_data_error(read, lab, "wrong magic 0x00000803");
  write_gz(lab, idx_labels({1, 2}));
  expect_data_error(read, lab, "has 2 labels but " + img + " has 3 images");
  write_gz(lab, idx_labels({1, 10, 3}));
  expect_data_error(read, lab, "label 10 of sample 1 is out of range");
  fs::remove(lab);
  expect_data_error(read, lab, "No such file");
}

namespace {

// A 4-file Fashion-MNIST-shaped root with 2x3 images: train n=5, test n=2. Pixel 4 is constant (=51) in
// the first 4 training images, so with train_size = 4 its std hits the 1e-3 floor.
struct TinyRoot {
  TempDir dir;
  Bytes train_px{0,   10,  20,  30,  51,  255,  //
                 5,   15,  25,  35,  51,  0,    //
                 100, 110, 120, 130, 51,  128,  //
                 7,   8,   9,   10,  51,  1,    //
                 200, 200, 200, 200, 200, 200};
  Bytes test_px{50, 60, 70, 80, 52, 90,  //
                0,  0,  0,  0,  0,  0};
  TinyRoot() {
    write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_images(5, 2, 3, train_px));
    write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({0, 1, 2, 3, 4}));
    write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_images(2, 2, 3, test_px));
    write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels({5, 6}));
  }
};

}  // namespace

TEST(LoadData, StandardisesPerPixelWithTrainingStatistics) {
  TinyRoot fx;
  DataSection cfg;
  cfg.root = fx.dir.root();
  cfg.train_size = 4;  // statistics over the first 4 training images only
  const DataSplits d = load_data(cfg, 0, 64);
  ASSERT_EQ(d.train.n, 4);
  ASSERT_EQ(d.test.n, 2);
  EXPECT_EQ(d.train.dim, 6);
  EXPECT_EQ(d.train.height, 2);
  EXPECT_EQ(d.description, "fashion-mnist 4/2 (6 features, 10 classes)");
  EXPECT_EQ(d.train.y, (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.test.y, (std::vector<std::int32_t>{5, 6}));
  // Independent two-pass statistics in double.
  for (int p = 0; p < 6; ++p) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += fx.train_px[static_cast<std::size_t>(i * 6 + p)] / 255.0 / 4;
    for (int i = 0; i < 4; ++i)
      var += std::pow(fx.train_px[static_cast<std::size_t>(i * 6 + p)] / 255.0 - mean, 2) / 4;
    const double sd = std::max(std::sqrt(var), 1e-3);
    const auto expect = [&](const Bytes& px, int i) {
      return (px[static_cast<std::size_t>(i * 6 + p)] / 255.0 - mean) / sd;
    };
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(d.train.row(i)[p], expect(fx.train_px, i), 1e-5) << "train " << i << "," << p;
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(d.test.row(i)[p], expect(fx.test_px, i),
                  1e-5 * std::max(1.0, std::fabs(expect(fx.test_px, i))))
          << "test " << i << "," << p;
    }
    EXPECT_NEAR(d.train.background[static_cast<std::size_t>(p)], -mean / sd, 1e-5 * std::max(1.0, mean / sd));
  }
  // The floored pixel: constant in training -> 0; the test's 52 vs 51 -> (1/255) / 1e-3.
  EXPECT_EQ(d.train.row(0)[4], 0.0f);
  EXPECT_NEAR(d.test.row(0)[4], 1.0 / 255.0 / 1e-3, 1e-3);
  EXPECT_EQ(d.test.background, d.train.background);
}

TEST(LoadData, RejectsSizesBeyondTheFile) {
  TinyRoot fx;
  DataSection cfg;
  cfg.root = fx.dir.root() + "/";
  cfg.train_size = 6;
  expect_data_error([&] { load_data(cfg, 0, 64); }, fx.dir.file("train-images-idx3-ubyte.gz"),
                    "data.train_size = 6");
  cfg.train_size = 0;
  cfg.test_size = 3;
  expect_data_error([&] { load_data(cfg, 0, 64); }, fx.dir.file("t10k-images-idx3-ubyte.gz"),
                    "data.test_size = 3");
  cfg.test_size = 0;
  write_gz(fx.dir.file("t10k-images-idx3-ubyte.gz"), idx_images(2, 3, 2, fx.test_px));
  write_gz(fx.dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels({5, 6}));
  expect_data_error([&] { load_data(cfg, 0, 64); }, fx.dir.file("t10k-images-idx3-ubyte.gz"), "3x2");
  cfg.root = fx.dir.file("nowhere");
  expect_data_error([&] { load_data(cfg, 0, 64); }, fx.dir.file("nowhere/train-images-idx3-ubyte.gz"),
                    "cannot open");
}

TEST(LoadData, RealFashionMnist) {
  const DataSection cfg;
  if (!fs::exists(cfg.root + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST at " << cfg.root;
  const DataSplits d = load_data(cfg, 0, 64);
  EXPECT_EQ(d.description, "fashion-mnist 60000/10000 (784 features, 10 classes)");
  ASSERT_EQ(d.train.n, 60000);
  ASSERT_EQ(d.test.n, 10000);
  EXPECT_EQ(d.train.dim, 784);
  EXPECT_EQ(d.train.height, 28);
  EXPECT_EQ(d.train.width, 28);
  EXPECT_EQ(d.test.dim, 784);
  EXPECT_EQ(d.train.y[0], 9);  // ankle boot
  EXPECT_EQ(d.test.y[1], 2);
  std::vector<int> per_class(10, 0);
  for (auto c : d.train.y) ++per_class[static_cast<std::size_t>(c)];
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
  // Bits computed by numpy with the documented formula (integer sums, double arithmetic, one rounding).
  EXPECT_EQ(std::bit_cast<std::uint32_t>(d.train.row(0)[300]), 0x3f784866u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(d.train.row(59999)[400]), 0x3e8aac7eu);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(d.test.row(0)[350]), 0xbe8d0aa2u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(d.train.background[0]), 0xbb4d9a67u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(d.train.background[406]), 0xbfe19f10u);
  // Normalised training pixels: mean 0, std 1, except the two whose raw std is below the 1e-3 floor.
  std::vector<double> sum(784, 0.0), sum2(784, 0.0);
  for (std::int64_t i = 0; i < d.train.n; ++i) {
    for (std::size_t p = 0; p < 784; ++p) {
      sum[p] += d.train.row(i)[p];
      sum2[p] += static_cast<double>(d.train.row(i)[p]) * d.train.row(i)[p];
    }
  }
  int off_one = 0;
  for (std::size_t p = 0; p < 784; ++p) {
    const double mean = sum[p] / 60000, sd = std::sqrt(sum2[p] / 60000 - mean * mean);
    EXPECT_NEAR(mean, 0.0, 1e-5) << p;
    off_one += std::fabs(sd - 1.0) > 1e-3;
  }
  EXPECT_EQ(off_one, 2);
}

namespace {

DataSection synthetic(std::int64_t train, std::int64_t test) {
  DataSection cfg;
  cfg.source = DataSource::synthetic;
  cfg.synthetic_train = train;
  cfg.synthetic_test = test;
  return cfg;
}

}  // namespace

TEST(SyntheticData, DeterministicAndKeyedBySampleIndex) {
  const DataSplits a = load_data(synthetic(1000, 300), 17, 64), b = load_data(synthetic(1000, 300), 17, 64);
  const DataSplits big = load_data(synthetic(2000, 100), 17, 64), other = load_data(synthetic(1000, 300), 18, 64);
  EXPECT_EQ(a.description, "synthetic teacher 1000/300 (64 features, 10 classes, teacher hidden 32)");
  EXPECT_EQ(a.train.x, b.train.x);
  EXPECT_EQ(a.train.y, b.train.y);
  EXPECT_EQ(a.test.x, b.test.x);
  EXPECT_EQ(a.train.height, 0);
  EXPECT_TRUE(a.train.background.empty());
  // A sample does not depend on the split size.
  EXPECT_TRUE(std::equal(a.train.x.begin(), a.train.x.end(), big.train.x.begin()));
  EXPECT_TRUE(std::equal(a.train.y.begin(), a.train.y.end(), big.train.y.begin()));
  EXPECT_TRUE(std::equal(big.test.x.begin(), big.test.x.end(), a.test.x.begin()));
  // Train and test are different samples; another seed is other data.
  EXPECT_FALSE(std::equal(a.test.x.begin(), a.test.x.end(), a.train.x.begin()));
  EXPECT_NE(a.train.x, other.train.x);
}

TEST(SyntheticData, FeaturesAreStandardAndLabelsFollowTheTeacher) {
  const std::uint64_t seed = 5;
  const DataSplits d = load_data(synthetic(4000, 10), seed, 64);
  ASSERT_EQ(d.train.dim, 64);
  ASSERT_EQ(d.train.classes, 10);
  double s = 0, s2 = 0;
  for (float v : d.train.x) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(d.train.x.size());
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  std::vector<int> per_class(10, 0);
  for (auto c : d.train.y) {
    ASSERT_GE(c, 0);
    ASSERT_LT(c, 10);
    ++per_class[static_cast<std::size_t>(c)];
  }
  EXPECT_GE(std::count_if(per_class.begin(), per_class.end(), [](int c) { return c > 40; }), 6);
  EXPECT_LT(*std::max_element(per_class.begin(), per_class.end()), 2000);
  // The documented construction, evaluated here from the stream words directly.
  const KeyedStream l0(seed, Stream::synthetic, 2, 0), l1(seed, Stream::synthetic, 2, 1);
  for (std::uint32_t i : {0u, 1u, 999u, 3999u}) {
    const KeyedStream xs(seed, Stream::synthetic, 0, i);
    std::vector<double> logits(10, 0.0);
    for (int c = 0; c < 10; ++c) {
      for (int o = 0; o < 32; ++o) {
        double pre = 0;
        for (int j = 0; j < 64; ++j) {
          const double x = static_cast<float>(xs.normal(static_cast<std::uint64_t>(j)));
          EXPECT_EQ(d.train.row(i)[j], static_cast<float>(x));
          pre += l0.normal(static_cast<std::uint64_t>(o * 64 + j)) / 8.0 * x;
        }
        logits[static_cast<std::size_t>(c)] +=
            l1.normal(static_cast<std::uint64_t>(c * 32 + o)) / std::sqrt(32.0) * std::tanh(pre);
      }
    }
    EXPECT_EQ(d.train.y[i], std::max_element(logits.begin(), logits.end()) - logits.begin())
        << "sample " << i;
  }
}

TEST(SyntheticData, RejectsUnusableSettings) {
  auto cfg = synthetic(100, 10);
  cfg.synthetic_classes = 1;
  try {
    load_data(cfg, 0, 64);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("data.synthetic_classes"), std::string::npos) << e.what();
  }
  cfg = synthetic(0, 10);
  EXPECT_THROW(load_data(cfg, 0, 64), std::invalid_argument);
}

namespace {

// A 6x7 "image" dataset with distinct pixel values and distinct (negative) background values.
Dataset toy_images() {
  Dataset ds;
  ds.n = 1;
  ds.height = 6;
  ds.width = 7;
  ds.dim = 42;
  ds.classes = 10;
  for (int p = 0; p < 42; ++p) {
    ds.x.push_back(static_cast<float>(p + 1));
    ds.background.push_back(static_cast<float>(-p - 1));
  }
  ds.y = {0};
  return ds;
}

// The candidate transform (flip, dx, dy) written out independently.
std::vector<float> transformed(const Dataset& ds, bool flip, int dx, int dy) {
  std::vector<float> out(42);
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 7; ++c) {
      const int sr = r - dy, sc = c - dx;  // content moves by (+dx, +dy)
      const bool inside = sr >= 0 && sr < 6 && sc >= 0 && sc < 7;
      out[static_cast<std::size_t>(r * 7 + c)] =
          inside ? ds.x[static_cast<std::size_t>(sr * 7 + (flip ? 6 - sc : sc))]
                 : ds.background[static_cast<std::size_t>(r * 7 + c)];
    }
  }
  return out;
}

}  // namespace

TEST(Augment, IsOneOfTheFiftyTransformsDrawnUniformly) {
  const Dataset ds = toy_images();
  std::vector<float> out(42);
  int flips = 0;
  std::vector<int> dxs(5, 0), dys(5, 0);
  const int samples = 1000;
  for (int g = 0; g < samples; ++g) {
    augment_image(ds.row(0), out.data(), ds, 3, 7, g);
    int matches = 0;
    for (bool flip : {false, true}) {
      for (int dx = -2; dx <= 2; ++dx) {
        for (int dy = -2; dy <= 2; ++dy) {
          if (transformed(ds, flip, dx, dy) != out) continue;
          ++matches;
          flips += flip;
          ++dxs[static_cast<std::size_t>(dx + 2)];
          ++dys[static_cast<std::size_t>(dy + 2)];
        }
      }
    }
    ASSERT_EQ(matches, 1) << "sample " << g;
    // The documented draws (the replay's recipe): flip if uniform(0) < 0.5, dx/dy = below(1/2, 5) - 2.
    const KeyedStream s(3, Stream::augment, 7, static_cast<std::uint32_t>(g));
    EXPECT_EQ(out, transformed(ds, s.uniform(0) < 0.5f, static_cast<int>(s.below(1, 5)) - 2,
                               static_cast<int>(s.below(2, 5)) - 2))
        << "sample " << g;
  }
  EXPECT_NEAR(flips, samples / 2, 80);  // sd ~ 16
  for (int k = 0; k < 5; ++k) {
    EXPECT_NEAR(dxs[static_cast<std::size_t>(k)], samples / 5, 60) << "dx " << k - 2;  // sd ~ 13
    EXPECT_NEAR(dys[static_cast<std::size_t>(k)], samples / 5, 60) << "dy " << k - 2;
  }
}

TEST(Augment, KeyedBySeedStepAndSampleOnly) {
  const Dataset ds = toy_images();
  std::vector<float> a(42), b(42);
  int step_differs = 0, index_differs = 0, seed_differs = 0;
  for (int g = 0; g < 50; ++g) {
    augment_image(ds.row(0), a.data(), ds, 1, 4, g);
    augment_image(ds.row(0), b.data(), ds, 1, 4, g);
    EXPECT_EQ(a, b);
    augment_image(ds.row(0), b.data(), ds, 1, 5, g);
    step_differs += a != b;
    augment_image(ds.row(0), b.data(), ds, 1, 4, g + 50);
    index_differs += a != b;
    augment_image(ds.row(0), b.data(), ds, 2, 4, g);
    seed_differs += a != b;
  }
  // Two random draws out of 50 transforms coincide with probability 1/50.
  EXPECT_GT(step_differs, 40);
  EXPECT_GT(index_differs, 40);
  EXPECT_GT(seed_differs, 40);
  Dataset flat = ds;
  flat.height = flat.width = 0;
  flat.background.clear();
  EXPECT_THROW(augment_image(ds.row(0), a.data(), flat, 1, 4, 0), std::invalid_argument);
  EXPECT_THROW(augment_image(ds.row(0), a.data(), ds, 1, -1, 0), std::invalid_argument);
}
