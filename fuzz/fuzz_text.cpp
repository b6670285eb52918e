// libFuzzer target: the text loader (data.source=text / fortunes) on two files of arbitrary bytes, which
// exercises the strict UTF-8 decoder, the "%" document separators across files, the held-out split and
// the windows. Input: byte 0 picks model.block_size (1..16), bytes 1 and 2 data.train_size and
// data.test_size (0..3, 0 = all), byte 3 the length of the first file; the rest is the two files.
// Accepted: a DataError or std::invalid_argument, or splits whose every token is an id of the shared
// vocabulary, whose targets are the inputs shifted by one where not ignored, and whose training split
// never needs <|unk|>.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "data/text_data.hpp"
#include "fuzz_util.hpp"

using divsim::fuzz::require;

namespace {

void check_split(const divsim::Dataset& ds, std::int64_t block, std::int64_t v, bool training) {
  require(ds.n >= 1 && ds.dim == block && ds.targets == block && ds.classes == v, "shape is consistent");
  require(ds.x.size() == static_cast<std::size_t>(ds.n * block) && ds.y.size() == ds.x.size(),
          "buffers match the shape");
  const std::int32_t unk = static_cast<std::int32_t>(v - 1);
  for (std::int64_t i = 0; i < ds.n; ++i) {
    const float* x = ds.row(i);
    const std::int32_t* y = ds.targets_of(i);
    require(y[0] != divsim::kIgnoredTarget, "a window starts where a next token remains");
    for (std::int64_t p = 0; p < block; ++p) {
      const auto id = static_cast<std::int32_t>(x[p]);
      require(static_cast<float>(id) == x[p] && id >= 0 && id < v, "inputs are token ids");
      require(y[p] == divsim::kIgnoredTarget || (y[p] >= 0 && y[p] < v), "targets are token ids or ignored");
      require(!training || (id != unk && y[p] != unk), "the training split needs no <|unk|>");
      if (p + 1 < block && y[p] != divsim::kIgnoredTarget)
        require(y[p] == static_cast<std::int32_t>(x[p + 1]), "targets are the inputs shifted by one");
      if (p > 0 && y[p - 1] == divsim::kIgnoredTarget)
        require(y[p] == divsim::kIgnoredTarget && id == 0, "padding runs to the end of the window");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  const std::int64_t block = data[0] % 16 + 1, train_size = data[1] % 4, test_size = data[2] % 4;
  const std::size_t first = std::min<std::size_t>(size - 4, data[3]);
  const std::string a = divsim::fuzz::scratch_file("text-a", data + 4, first);
  const std::string b = divsim::fuzz::scratch_file("text-b", data + 4 + first, size - 4 - first);
  divsim::DataSplits d;
  try {
    d = divsim::load_text({a, b}, block, train_size, test_size);
  } catch (const divsim::DataError&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const auto v = static_cast<std::int64_t>(d.train.vocabulary.size());
  require(v >= 3 && d.train.vocabulary.front() == "<|doc|>" && d.train.vocabulary.back() == "<|unk|>",
          "the vocabulary holds a character and both specials");
  require(d.test.vocabulary == d.train.vocabulary, "both splits share the vocabulary");
  require(std::is_sorted(d.train.vocabulary.begin() + 1, d.train.vocabulary.end() - 1),
          "characters in code point order (UTF-8 byte order)");
  require(train_size == 0 || d.train.n == train_size, "data.train_size keeps that many sequences");
  require(test_size == 0 || d.test.n == test_size, "data.test_size keeps that many sequences");
  check_split(d.train, block, v, true);
  check_split(d.test, block, v, false);
  return 0;
}
