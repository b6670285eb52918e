#pragma once
// data.source = hdf5: a user's own data set in one HDF5 file (docs/user-guide.md, "Your own data"):
//   /train/x  [N, F] or [N, H, W]  uint8 (scaled to [0,1] and standardised per feature with the training
//                                  split's statistics, exactly as Fashion-MNIST) or floating point (used
//                                  as stored, converted to float32)
//   /train/y  [N]                  integer labels in [0, classes)
//   /test/x, /test/y               the test split: the same element kind and the same F or H x W
//   classes                        optional integer attribute (>= 2) of /train/y; default: largest
//                                  label + 1
// Only [N, H, W] uint8 images can be augmented (data.augment). Every problem is a DataError naming the
// file and the dataset; nothing is read beyond the first data.train_size / data.test_size rows.
//
// Deliberately not here: compound or string types, chunked reading of sets larger than memory, and
// robustness against a corrupt file's internal structures, which is libhdf5's (a corrupt file fails
// in libhdf5 with its error stack, reported as a DataError).
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "data/dataset.hpp"

namespace divsim {

// `train_size` / `test_size`: the first N rows of each split; 0 = all.
DataSplits read_h5_splits(const std::string& path, std::int64_t train_size, std::int64_t test_size);
// The same from an open file; `name` is what messages call it (the fuzz target builds files in memory).
DataSplits read_h5_splits(hid_t file, const std::string& name, std::int64_t train_size, std::int64_t test_size);

// Bytes the loaded splits will hold (float32 features and int32 labels), from the file's shapes alone:
// checked against the memory budget before anything is read.
std::uint64_t h5_splits_bytes(const std::string& path, std::int64_t train_size, std::int64_t test_size);

}  // namespace divsim
