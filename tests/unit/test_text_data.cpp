// Character sequences (data/text_data.hpp) on small text files whose every token is worked out by hand:
// documents and separators, the held-out rule (k % 10 == 9, and the tenths of fewer than 10 documents),
// the vocabulary, windows and padding, the size cuts and every refusal; then Debian's real fortunes.
// tests/python/test_text_data.py holds validation/text_data.py to the same fixtures and numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "data/text_data.hpp"
#include "data_error.hpp"
#include "temp_dir.hpp"

using namespace divsim;
using divsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;


// Rows [first, first + count) of a split: inputs (as ids) and targets, one block after another.
Ids inputs(const Dataset& ds, std::int64_t first, std::int64_t count) {
  Ids out;
  for (std::int64_t i = first * ds.dim; i < (first + count) * ds.dim; ++i)
    out.push_back(static_cast<std::int32_t>(ds.x[static_cast<std::size_t>(i)]));
  return out;
}
Ids targets(const Dataset& ds, std::int64_t first, std::int64_t count) {
  return Ids(ds.y.begin() + first * ds.targets, ds.y.begin() + (first + count) * ds.targets);
}

// sum over the split's inputs (or targets), flattened row-major, of (i % 65521 + 1) * value: token for
// token agreement with validation/text_data.py in one number.
std::int64_t checksum(const Dataset& ds, bool of_targets) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < ds.y.size(); ++i) {
    const std::int64_t v = of_targets ? ds.y[i] : static_cast<std::int64_t>(ds.x[i]);
    sum += static_cast<std::int64_t>(i % 65521 + 1) * v;
  }
  return sum;
}

// The loader's messages are checked whole: "<file>: <problem>" exactly.
void expect_data_error(const std::function<void()>& f, const std::string& file, const std::string& problem) {
  EXPECT_EQ(test::expect_data_error(f, file, problem), problem);
}

// Runs f, expects std::invalid_argument whose message contains every needle.
void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    for (const std::string& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Twelve documents over two files. f1: a leading separator, "ab\n", a CRLF separator, "b\n", an empty
// document between two separators (skipped), "c" ending the file without a newline. f2: "a\n" six times,
// "zé\n" (document 9: held out, neither character in training), "%%\n% \naa\n" ("%" not alone on its
// line is text), "b".
struct TwelveDocs {
  TempDir dir;
  std::string f1 = dir.write("f1.txt", "%\nab\n%\r\nb\n%\n%\nc");
  std::string f2 = dir.write("f2.txt", "a\n%\na\n%\na\n%\na\n%\na\n%\na\n%\nz\xC3\xA9\n%\n%%\n% \naa\n%\nb");
};

}  // namespace

TEST(TextData, DocumentsSplitsVocabularyAndWindows) {
  const TwelveDocs fx;
  const DataSplits d = load_text({fx.f1, fx.f2}, 4, 0, 0);
  EXPECT_EQ(d.description, "13/1 sequences of 4 tokens (vocabulary 8, 12 documents)");
  const std::vector<std::string> vocabulary{"<|doc|>", "\n", " ", "%", "a", "b", "c", "<|unk|>"};
  EXPECT_EQ(d.train.vocabulary, vocabulary);
  EXPECT_EQ(d.test.vocabulary, vocabulary);
  for (const Dataset* ds : {&d.train, &d.test}) {
    EXPECT_EQ(ds->dim, 4);
    EXPECT_EQ(ds->targets, 4);
    EXPECT_EQ(ds->classes, 8);
    EXPECT_EQ(ds->height, 0);
    EXPECT_EQ(ds->width, 0);
    EXPECT_TRUE(ds->background.empty());
  }
  ASSERT_EQ(d.train.n, 13);
  ASSERT_EQ(d.train.x.size(), 13u * 4);
  ASSERT_EQ(d.train.y.size(), 13u * 4);
  // ids: \n 1, ' ' 2, % 3, a 4, b 5, c 6, <|unk|> 7
  const Ids x{0, 4, 5, 1,  // "ab\n": [0 a b \n 0] exactly fills a block
              0, 5, 1, 0,  // "b\n": shorter than a block
              0, 6, 0, 0,  // "c": input padding
              0, 4, 1, 0, 0, 4, 1, 0, 0, 4, 1, 0, 0, 4, 1, 0, 0, 4, 1, 0, 0, 4, 1, 0,  // "a\n" x 6
              0, 3, 3, 1, 3, 2, 1, 4, 4, 1, 0, 0,  // "%%\n% \naa\n" over three blocks
              0, 5, 0, 0};                         // "b"
  const Ids y{4, 5, 1, 0,
              5, 1, 0, -1,
              6, 0, -1, -1,
              4, 1, 0, -1, 4, 1, 0, -1, 4, 1, 0, -1, 4, 1, 0, -1, 4, 1, 0, -1, 4, 1, 0, -1,
              3, 3, 1, 3, 2, 1, 4, 4, 1, 0, -1, -1,
              5, 0, -1, -1};
  EXPECT_EQ(inputs(d.train, 0, 13), x);
  EXPECT_EQ(targets(d.train, 0, 13), y);
  ASSERT_EQ(d.test.n, 1);
  EXPECT_EQ(inputs(d.test, 0, 1), (Ids{0, 7, 7, 1}));  // "zé\n": both characters unknown to training
  EXPECT_EQ(targets(d.test, 0, 1), (Ids{7, 7, 1, 0}));
  EXPECT_EQ(d.train.counted(2), 2);
  EXPECT_EQ(d.train.counted(0), 4);
}

TEST(TextData, BlockOfOneToken) {
  const TwelveDocs fx;
  const DataSplits d = load_text({fx.f1, fx.f2}, 1, 0, 0);
  // A document of L characters gives L + 1 windows of one token, never padded.
  ASSERT_EQ(d.train.n, 4 + 3 + 2 + 6 * 3 + 10 + 2);
  EXPECT_EQ(inputs(d.train, 0, 6), (Ids{0, 4, 5, 1, 0, 5}));
  EXPECT_EQ(targets(d.train, 0, 6), (Ids{4, 5, 1, 0, 5, 1}));
  EXPECT_EQ(inputs(d.test, 0, 4), (Ids{0, 7, 7, 1}));
  EXPECT_EQ(targets(d.test, 0, 4), (Ids{7, 7, 1, 0}));
  EXPECT_EQ(std::count(d.train.y.begin(), d.train.y.end(), kIgnoredTarget), 0);
}

TEST(TextData, FewerThanTenDocumentsAreCutIntoTenths) {
  TempDir dir;
  // 20 characters: tenths of 2, "st" held out. "xyz": tenths [j*3/10, (j+1)*3/10): x is part 3, y part 6, z
  // part 9 (held out); the empty parts give nothing.
  const std::string a = dir.write("a.txt", "abcdefghijklmnopqrst"), b = dir.write("b.txt", "xyz");
  const DataSplits d = load_text({a, b}, 2, 0, 0);
  EXPECT_EQ(d.description, "20/3 sequences of 2 tokens (vocabulary 22, 2 documents)");
  ASSERT_EQ(d.train.vocabulary.size(), 22u);
  EXPECT_EQ(d.train.vocabulary[1], "a");
  EXPECT_EQ(d.train.vocabulary[18], "r");
  EXPECT_EQ(d.train.vocabulary[19], "x");
  EXPECT_EQ(d.train.vocabulary[20], "y");
  EXPECT_EQ(d.train.vocabulary[21], "<|unk|>");
  ASSERT_EQ(d.train.n, 20);
  EXPECT_EQ(inputs(d.train, 0, 4), (Ids{0, 1, 2, 0, 0, 3, 4, 0}));  // "ab", "cd"
  EXPECT_EQ(targets(d.train, 0, 4), (Ids{1, 2, 0, -1, 3, 4, 0, -1}));
  EXPECT_EQ(inputs(d.train, 16, 4), (Ids{0, 17, 18, 0, 0, 19, 0, 20}));  // "qr", "x", "y"
  EXPECT_EQ(targets(d.train, 16, 4), (Ids{17, 18, 0, -1, 19, 0, 20, 0}));
  ASSERT_EQ(d.test.n, 3);
  EXPECT_EQ(inputs(d.test, 0, 3), (Ids{0, 21, 21, 0, 0, 21}));  // "st", "z"
  EXPECT_EQ(targets(d.test, 0, 3), (Ids{21, 21, 0, -1, 21, 0}));

  // Two characters: the first tenths are empty, part 4 is "a", part 9 "b".
  const DataSplits two = load_text({dir.write("two.txt", "ab")}, 8, 0, 0);
  EXPECT_EQ(two.train.vocabulary, (std::vector<std::string>{"<|doc|>", "a", "<|unk|>"}));
  EXPECT_EQ(inputs(two.train, 0, 1), (Ids{0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(inputs(two.test, 0, 1), (Ids{0, 2, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(targets(two.test, 0, 1), (Ids{2, 0, -1, -1, -1, -1, -1, -1}));
}

TEST(TextData, DecodesEveryUtf8LengthIntoCodePointOrder) {
  TempDir dir;
  // U+10FFFF, U+1F600, U+FFFF, U+D7FF (below the surrogates), U+20AC, U+00E9, U+0080, U+0000, repeated
  // ten times as documents so that one copy is held out.
  const std::string chars("\xF4\x8F\xBF\xBF\xF0\x9F\x98\x80\xEF\xBF\xBF\xED\x9F\xBF\xE2\x82\xAC\xC3\xA9\xC2\x80\x00", 22);
  std::string text;
  for (int k = 0; k < 10; ++k) text += chars + "\n%\n";
  const DataSplits d = load_text({dir.write("u.txt", text)}, 16, 0, 0);
  EXPECT_EQ(d.train.vocabulary,
            (std::vector<std::string>{"<|doc|>", std::string(1, '\0'), "\n", "\xC2\x80", "\xC3\xA9", "\xE2\x82\xAC",
                                      "\xED\x9F\xBF", "\xEF\xBF\xBF", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF",
                                      "<|unk|>"}));
  ASSERT_EQ(d.test.n, 1);
  EXPECT_EQ(inputs(d.test, 0, 1), (Ids{0, 9, 8, 7, 6, 5, 4, 3, 1, 2, 0, 0, 0, 0, 0, 0}));
}

TEST(TextData, SizeCutsKeepTheFirstSequences) {
  const TwelveDocs fx;
  const DataSplits all = load_text({fx.f1, fx.f2}, 4, 0, 0);
  const DataSplits cut = load_text({fx.f1, fx.f2}, 4, 2, 1);
  EXPECT_EQ(cut.description, "2/1 sequences of 4 tokens (vocabulary 8, 12 documents)");
  ASSERT_EQ(cut.train.n, 2);
  EXPECT_EQ(cut.train.x, std::vector<float>(all.train.x.begin(), all.train.x.begin() + 8));
  EXPECT_EQ(cut.train.y, std::vector<std::int32_t>(all.train.y.begin(), all.train.y.begin() + 8));
  EXPECT_EQ(cut.test.y, all.test.y);
  EXPECT_EQ(load_text({fx.f1, fx.f2}, 4, 13, 0).train.y, all.train.y);

  expect_invalid([&] { load_text({fx.f1, fx.f2}, 4, 14, 0); }, {"data.train_size = 14", "13 training sequences"});
  expect_invalid([&] { load_text({fx.f1, fx.f2}, 4, 0, 2); }, {"data.test_size = 2", "1 held-out sequences"});
  expect_invalid([&] { load_text({fx.f1, fx.f2}, 4, -1, 0); }, {"data.train_size = -1"});
  expect_invalid([&] { load_text({fx.f1, fx.f2}, 0, 0, 0); }, {"model.block_size = 0"});
  expect_invalid([&] { load_text({fx.f1, fx.f2}, -3, 0, 0); }, {"model.block_size = -3"});
}

TEST(TextData, RefusesUnreadableFilesByName) {
  TempDir dir;
  const std::string good = dir.write("good.txt", "some text\n");
  const std::string missing = dir.write("x", "") + "-missing";
  expect_data_error([&] { load_text({good, missing}, 8, 0, 0); }, missing, "cannot open: No such file or directory");
  const std::string folder = (fs::path(good).parent_path() / "folder").string();
  fs::create_directory(folder);
  expect_data_error([&] { load_text({folder}, 8, 0, 0); }, folder, "cannot open: is a folder, not a file");
  const std::string empty = dir.write("empty.txt", "");
  expect_data_error([&] { load_text({good, empty}, 8, 0, 0); }, empty,
                    "holds no text: no character outside the \"%\" separator lines");
  const std::string separators = dir.write("seps.txt", "%\n%\r\n%");
  expect_data_error([&] { load_text({separators}, 8, 0, 0); }, separators,
                    "holds no text: no character outside the \"%\" separator lines");
  const std::string one = dir.write("one.txt", "%\na");
  expect_data_error([&] { load_text({one}, 8, 0, 0); }, one,
                    "too short: every document is one character, held out as the last tenth of itself, which "
                    "leaves the training split none");
}

TEST(TextData, RefusesInvalidUtf8AtItsByte) {
  TempDir dir;
  const std::string good = dir.write("good.txt", "fine\n");
  const std::vector<std::pair<std::string, int>> cases{
      {"ab\x80", 2},                  // a continuation byte without a lead
      {"a\xC0\x80", 1},               // overlong NUL
      {"a\xC1\xBF", 1},               // overlong U+007F
      {"a\xE0\x9F\xBF", 1},           // overlong U+07FF
      {"\xF0\x8F\xBF\xBF", 0},        // overlong U+FFFF
      {"ab\xED\xA0\x80", 2},          // surrogate U+D800
      {"x\xED\xBF\xBF", 1},           // surrogate U+DFFF
      {"\xF4\x90\x80\x80", 0},        // U+110000
      {"\xF5\x80\x80\x80", 0},        // a lead byte beyond U+10FFFF
      {"\xFF", 0},
      {"abc\xE2\x82", 3},             // cut by the end of the file
      {"abc\xF0\x9F\x98", 3},
      {"abc\xE2\x82x", 3},            // cut by a byte that is no continuation
      {"\xC3\xA9\xC3", 2},
  };
  for (const auto& [bytes, at] : cases) {
    const std::string bad = dir.write("bad.txt", bytes);
    expect_data_error([&] { load_text({good, bad}, 8, 0, 0); }, bad, "invalid UTF-8 at byte " + std::to_string(at));
  }
}

TEST(TextData, LoadDataNamesTheSource) {
  const TwelveDocs fx;
  DataSection cfg;
  cfg.source = DataSource::text;
  cfg.path = fx.f2;
  cfg.train_size = 3;
  // f2 alone holds 9 documents: each is cut into tenths.
  EXPECT_EQ(load_data(cfg, 0, 4).description, "text " + fx.f2 + " 3/9 sequences of 4 tokens (vocabulary 8, 9 documents)");
}

// Debian 12's fortunes 1:1.99.1-7.3 (with fortunes-min): the numbers tests/python/test_text_data.py
// holds validation/text_data.py to.
TEST(TextData, RealFortunes) {
  if (!fs::is_directory("/usr/share/games/fortunes")) GTEST_SKIP() << "no fortunes (apt-get install fortunes)";
  const std::vector<std::string> files = fortune_files();
  ASSERT_FALSE(files.empty());
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  for (const std::string& f : files) {
    EXPECT_EQ(f.rfind("/usr/share/games/fortunes/", 0), 0u) << f;
    EXPECT_FALSE(fs::path(f).has_extension()) << f;
  }
  DataSection cfg;
  cfg.source = DataSource::fortunes;
  const DataSplits d = load_data(cfg, 0, 64);
  EXPECT_EQ(d.description, "fortunes 42646/4818 sequences of 64 tokens (vocabulary 114, 15217 documents)");
  EXPECT_EQ(checksum(d.train, false), 4592793277639);
  EXPECT_EQ(checksum(d.train, true), 4579059058443);
  EXPECT_EQ(checksum(d.test, false), 499887951129);
  EXPECT_EQ(checksum(d.test, true), 498400364349);
  const auto& voc = d.train.vocabulary;
  const auto v = static_cast<std::int32_t>(voc.size());
  EXPECT_EQ(d.train.classes, v);
  EXPECT_NE(std::find(voc.begin(), voc.end(), "a"), voc.end());
  EXPECT_NE(std::find(voc.begin(), voc.end(), "\n"), voc.end());
  EXPECT_EQ(voc.front(), "<|doc|>");
  EXPECT_EQ(voc.back(), "<|unk|>");
  for (const Dataset* ds : {&d.train, &d.test}) {
    for (std::int64_t i = 0; i < ds->n; ++i) {
      const float* x = ds->row(i);
      const std::int32_t* y = ds->targets_of(i);
      for (std::int64_t p = 0; p < 64; ++p) {
        ASSERT_TRUE(y[p] == kIgnoredTarget || (y[p] >= 0 && y[p] < v)) << i << "," << p;
        ASSERT_TRUE(x[p] >= 0 && x[p] < static_cast<float>(v)) << i << "," << p;
        if (p + 1 < 64 && y[p] != kIgnoredTarget) {
          ASSERT_EQ(static_cast<float>(y[p]), x[p + 1]) << i << "," << p;
        }
      }
    }
  }
}
