#pragma once
// Character sequences for the gpt model: Debian's fortunes package (data.source=fortunes) or a user's UTF-8
// text file (data.source=text, data.path).
//
// Documents: a file's text split at lines holding only "%" (the fortune format, also "%" + CR for files
// with CRLF line ends; a file without such lines is one document). A separator line and its line end
// belong to no document; a document keeps everything else between separators, its line ends included.
// Empty documents (before the first or after the last "%") are not documents. Document k (counted over
// all files in order) is held out for evaluation when k % 10 == 9; with fewer than 10 documents in all,
// each document of L characters is first cut into 10 parts of equal length, part j holding characters
// [j*L/10, (j+1)*L/10) (integer division; the held-out part 9 is never empty), so that both splits exist.
// Vocabulary: id 0 is the document boundary "<|doc|>"; ids 1..V-2 are the distinct characters (Unicode
// code points) of the training split in code point order; id V-1 "<|unk|>" stands for a held-out
// character the training split lacks.
// Samples: each document becomes [0, c_1, ..., c_L, 0] and is cut into windows of block_size inputs
// starting at 0, B, 2B, ... while a next token remains; a window's targets are its inputs shifted by one.
// The last window of a document is padded: inputs with 0, targets with kIgnoredTarget, which the loss
// skips. Sample order is document order, then window order; train_size / test_size keep the first N.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace divsim {

// The fortune files of Debian's fortunes / fortunes-min packages, in name order: the regular files of
// /usr/share/games/fortunes without an extension (not the .dat indexes, not the .u8 links). DataError
// naming the folder when it is missing or holds none (install the fortunes package).
std::vector<std::string> fortune_files();

// description: "<train>/<test> sequences of <block_size> tokens (vocabulary V, D documents)"; load_data
// puts the source in front. Throws DataError naming the file for an unreadable file, invalid UTF-8 (with
// the byte offset of the sequence, "invalid UTF-8 at byte N"), a file without a character outside the
// separator lines, or text too short to leave the training split a character; std::invalid_argument
// naming model.block_size or data.train_size / test_size for settings that cannot work.
DataSplits load_text(const std::vector<std::string>& files, std::int64_t block_size, std::int64_t train_size,
                     std::int64_t test_size);

}  // namespace divsim
