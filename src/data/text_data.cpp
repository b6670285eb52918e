// Character sequences (text_data.hpp): the files' bytes decoded as strict UTF-8, split into documents at
// the fortune format's "%" lines, held out every 10th document, mapped to token ids and cut into windows.
//
// All files are decoded into one array of code points and documents are ranges of it, so nothing is
// copied per document. The vocabulary is a table indexed by code point, up to the largest one in the text
// (at most 4.4 MB): a lookup per character keeps the load of Debian's 2.6 MB of fortunes far below a
// second, which every start-up pays, and small texts (the fuzz target's) cost no more than their size.
#include "data/text_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "data/raw_images.hpp"

namespace divsim {

namespace {

constexpr const char* kFortuneFolder = "/usr/share/games/fortunes";
constexpr std::int32_t kBoundary = 0;       // <|doc|>: before and after every document, and input padding
constexpr std::size_t kParts = 10;          // every kParts-th document is held out

// A document: code points [begin, end) of the decoded text.
struct Doc {
  std::size_t begin = 0, end = 0;
  bool held_out = false;
  std::size_t size() const { return end - begin; }
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string read_bytes(const std::string& path) {
  require_regular_file(path);  // a folder reads as nothing and a FIFO would block
  errno = 0;
  const std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw DataError(path, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes;
  std::error_code ec;
  const auto size_hint = std::filesystem::file_size(path, ec);
  if (!ec) bytes.reserve(static_cast<std::size_t>(size_hint));
  char buf[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f.get())) > 0) bytes.append(buf, got);
  if (std::ferror(f.get())) throw DataError(path, std::string("read error: ") + std::strerror(errno));
  return bytes;
}

[[noreturn]] void invalid_utf8(const std::string& path, std::size_t at) {
  throw DataError(path, "invalid UTF-8 at byte " + std::to_string(at));
}

// Appends the code points of `bytes` to `out`. Only what RFC 3629 allows: no overlong forms, no
// surrogates, nothing above U+10FFFF, no sequence cut by the end of the file. Errors name the offset of
// the first byte of the offending sequence.
void decode_utf8(const std::string& bytes, const std::string& path, std::vector<char32_t>& out) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned lead = b[i];
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    // The second byte's range is what excludes overlong forms (E0, F0), surrogates (ED) and code points
    // above U+10FFFF (F4); C0, C1 and F5..FF never start a sequence.
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    char32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      len = 2;
      cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      len = 3;
      cp = lead & 0x0Fu;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      len = 4;
      cp = lead & 0x07u;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      invalid_utf8(path, i);
    }
    if (n - i < len) invalid_utf8(path, i);
    for (std::size_t k = 1; k < len; ++k) {
      const unsigned c = b[i + k];
      if (c < (k == 1 ? lo : 0x80u) || c > (k == 1 ? hi : 0xBFu)) invalid_utf8(path, i);
      cp = (cp << 6) | (c & 0x3Fu);
    }
    out.push_back(cp);
    i += len;
  }
}

// Appends the documents of text[begin, end) (one file) to `docs`.
void split_documents(const std::vector<char32_t>& text, std::size_t begin, std::size_t end, std::vector<Doc>& docs) {
  const char32_t* at = text.data();
  std::size_t doc = begin, line = begin;
  while (line < end) {
    const auto eol = static_cast<std::size_t>(std::find(at + line, at + end, U'\n') - at);
    const std::size_t len = eol - line;
    const bool separator = text[line] == U'%' && (len == 1 || (len == 2 && text[line + 1] == U'\r'));
    const std::size_t next = eol < end ? eol + 1 : end;
    if (separator) {
      if (line > doc) docs.push_back({doc, line});
      doc = next;
    }
    line = next;
  }
  if (end > doc) docs.push_back({doc, end});
}

// Holds out document k when k % 10 == 9, or, with fewer than 10 documents, the last of 10 parts of each.
std::vector<Doc> assign_splits(const std::vector<Doc>& docs) {
  std::vector<Doc> out;
  if (docs.size() >= kParts) {
    out = docs;
    for (std::size_t k = 0; k < out.size(); ++k) out[k].held_out = k % kParts == kParts - 1;
    return out;
  }
  for (const Doc& d : docs) {
    for (std::size_t j = 0; j < kParts; ++j) {
      const Doc part{d.begin + j * d.size() / kParts, d.begin + (j + 1) * d.size() / kParts, j == kParts - 1};
      if (part.size() > 0) out.push_back(part);
    }
  }
  return out;
}

// Windows of a document of `chars` characters: [0, c_1 .. c_L, 0] has L + 1 next tokens.
std::int64_t windows_of(std::size_t chars, std::int64_t block) {
  return (static_cast<std::int64_t>(chars) + block) / block;
}

std::int64_t kept_samples(std::int64_t available, std::int64_t wanted, const char* key, const char* split) {
  if (wanted < 0) throw std::invalid_argument(std::string(key) + " = " + std::to_string(wanted) + " must be >= 0");
  if (wanted > available) {
    throw std::invalid_argument(std::string(key) + " = " + std::to_string(wanted) + " exceeds the " +
                                std::to_string(available) + " " + split + " sequences");
  }
  return wanted == 0 ? available : wanted;
}

// The first n windows of the documents of one split, token ids from `ids` (indexed by code point).
Dataset make_split(const std::vector<char32_t>& text, const std::vector<Doc>& docs, bool held_out, std::int64_t n,
                   std::int64_t block, const std::vector<std::int32_t>& ids, std::int64_t vocabulary) {
  Dataset ds;
  ds.n = n;
  ds.dim = block;
  ds.targets = block;
  ds.classes = vocabulary;
  ds.x.resize(static_cast<std::size_t>(n * block));
  ds.y.resize(static_cast<std::size_t>(n * block));
  const auto b = static_cast<std::size_t>(block);
  std::vector<std::int32_t> seq;
  std::size_t row = 0;
  for (const Doc& d : docs) {
    if (d.held_out != held_out) continue;
    if (row == static_cast<std::size_t>(n)) break;
    seq.assign(1, kBoundary);
    for (std::size_t i = d.begin; i < d.end; ++i) seq.push_back(ids[text[i]]);
    seq.push_back(kBoundary);
    for (std::size_t start = 0; start + 1 < seq.size() && row < static_cast<std::size_t>(n); start += b, ++row) {
      float* x = ds.x.data() + row * b;
      std::int32_t* y = ds.y.data() + row * b;
      for (std::size_t p = 0; p < b; ++p) {
        const std::size_t at = start + p;
        x[p] = static_cast<float>(at < seq.size() ? seq[at] : kBoundary);
        y[p] = at + 1 < seq.size() ? seq[at + 1] : kIgnoredTarget;
      }
    }
  }
  return ds;
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

std::vector<std::string> fortune_files() {
  namespace fs = std::filesystem;
  const std::string hint = " (Debian: apt-get install fortunes)";
  std::error_code ec;
  if (!fs::is_directory(kFortuneFolder, ec)) throw DataError(kFortuneFolder, "no such folder" + hint);
  std::vector<std::string> files;
  for (fs::directory_iterator it(kFortuneFolder, ec), end; !ec && it != end; it.increment(ec)) {
    // symlink_status: the .u8 names are links to the files themselves.
    if (it->symlink_status(ec).type() == fs::file_type::regular && !it->path().has_extension())
      files.push_back(it->path().string());
  }
  if (ec) throw DataError(kFortuneFolder, "cannot list: " + ec.message());
  if (files.empty()) throw DataError(kFortuneFolder, "holds no fortune files" + hint);
  std::sort(files.begin(), files.end());
  return files;
}

DataSplits load_text(const std::vector<std::string>& files, std::int64_t block_size, std::int64_t train_size,
                     std::int64_t test_size) {
  if (block_size < 1)
    throw std::invalid_argument("model.block_size = " + std::to_string(block_size) + " must be >= 1");
  if (files.empty()) throw std::invalid_argument("load_text: no text files given");

  std::vector<char32_t> text;
  std::vector<Doc> docs;
  for (const std::string& path : files) {
    const std::size_t begin = text.size(), docs_before = docs.size();
    const std::string bytes = read_bytes(path);
    decode_utf8(bytes, path, text);
    split_documents(text, begin, text.size(), docs);
    if (docs.size() == docs_before) throw DataError(path, "holds no text: no character outside the \"%\" separator lines");
  }
  const std::vector<Doc> parts = assign_splits(docs);

  // Every code point of the training split gets an id in code point order; the rest map to <|unk|>.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(*std::max_element(text.begin(), text.end())) + 1, 0);
  for (const Doc& d : parts) {
    if (d.held_out) continue;
    for (std::size_t i = d.begin; i < d.end; ++i) ids[text[i]] = 1;
  }
  std::vector<std::string> vocabulary{"<|doc|>"};
  for (char32_t cp = 0; cp < ids.size(); ++cp) {
    if (ids[cp] == 0) continue;
    ids[cp] = static_cast<std::int32_t>(vocabulary.size());
    vocabulary.push_back(utf8(cp));
  }
  if (vocabulary.size() == 1) {
    throw DataError(files.front(), "too short: every document is one character, held out as the last tenth of "
                                   "itself, which leaves the training split none");
  }
  const auto unknown = static_cast<std::int32_t>(vocabulary.size());
  vocabulary.push_back("<|unk|>");
  for (std::int32_t& id : ids) {
    if (id == 0) id = unknown;
  }

  std::int64_t train_windows = 0, test_windows = 0;
  for (const Doc& d : parts) (d.held_out ? test_windows : train_windows) += windows_of(d.size(), block_size);
  const std::int64_t n_train = kept_samples(train_windows, train_size, "data.train_size", "training");
  const std::int64_t n_test = kept_samples(test_windows, test_size, "data.test_size", "held-out");

  const auto v = static_cast<std::int64_t>(vocabulary.size());
  DataSplits out{make_split(text, parts, false, n_train, block_size, ids, v),
                 make_split(text, parts, true, n_test, block_size, ids, v), ""};
  out.train.vocabulary = vocabulary;
  out.test.vocabulary = std::move(vocabulary);
  out.description = std::to_string(n_train) + "/" + std::to_string(n_test) + " sequences of " +
                    std::to_string(block_size) + " tokens (vocabulary " + std::to_string(v) + ", " +
                    std::to_string(docs.size()) + " documents)";
  return out;
}

}  // namespace divsim
