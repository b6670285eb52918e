// libFuzzer target: the HDF5 data reader (data.source=hdf5) on files it builds from the input. The input
// is a recipe, not file bytes: for each split it decides whether /x and /y exist (or are groups), their
// ranks, extents, element types (bytes, other integers, floats, strings, compounds, enums) and
// storage, the values (raw bytes from the input: NaN, Inf and out-of-range labels included), the
// `classes` attribute and data.train_size / data.test_size; the file is written through libhdf5 into
// memory (core driver) and handed to read_h5_splits. Accepted: a DataError, or splits whose shapes,
// values and labels keep every promise of h5_dataset.hpp.
//
// Why a recipe: libhdf5's own parser of corrupt files is not divsim's code (h5_dataset.hpp), and raw
// byte mutations would spend the time there; the recipe reaches every check of the reader instead.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "data/h5_dataset.hpp"
#include "fuzz_util.hpp"

using divsim::fuzz::require;

namespace {

// A file type for the recipe's choice; element size in bytes through *size. Closed by the caller if it
// is not a predefined type (H5Tclose refuses those: `owned` says which).
hid_t element_type(FuzzedDataProvider& in, std::size_t* size, bool* owned) {
  static const hid_t predefined[] = {H5T_NATIVE_UINT8,  H5T_NATIVE_INT8,   H5T_NATIVE_UINT16, H5T_NATIVE_INT32,
                                     H5T_NATIVE_UINT64, H5T_NATIVE_INT64,  H5T_NATIVE_FLOAT,  H5T_NATIVE_DOUBLE,
                                     H5T_IEEE_F32BE,    H5T_STD_U8BE,      H5T_STD_I64BE};
  const unsigned pick = in.ConsumeIntegralInRange<unsigned>(0, std::size(predefined) + 2);
  *owned = pick >= std::size(predefined);
  if (!*owned) {
    *size = H5Tget_size(predefined[pick]);
    return predefined[pick];
  }
  hid_t t = -1;
  if (pick == std::size(predefined)) {  // fixed-length strings
    t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 3);
  } else if (pick == std::size(predefined) + 1) {  // a compound of one float
    t = H5Tcreate(H5T_COMPOUND, sizeof(float));
    H5Tinsert(t, "v", 0, H5T_NATIVE_FLOAT);
  } else {  // an enum of bytes
    t = H5Tenum_create(H5T_NATIVE_UINT8);
    for (std::uint8_t v = 0; v < 3; ++v) {
      const char name[2] = {static_cast<char>('a' + v), 0};
      H5Tenum_insert(t, name, &v);
    }
  }
  *size = H5Tget_size(t);
  return t;
}

// One dataset (or a group in its place, or nothing) at `path`, of the recipe's shape, type and values.
void make_dataset(FuzzedDataProvider& in, hid_t file, const char* path, bool labels) {
  const unsigned what = in.ConsumeIntegralInRange<unsigned>(0, 15);
  if (what == 0) return;  // missing
  if (what == 1) {        // a group where a dataset belongs
    H5Gclose(H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    return;
  }
  const int rank = labels ? in.ConsumeIntegralInRange<int>(0, 2) : in.ConsumeIntegralInRange<int>(0, 4);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  std::size_t elements = 1;
  for (int k = 0; k < rank; ++k) {
    dims[static_cast<std::size_t>(k)] = in.ConsumeIntegralInRange<hsize_t>(0, k == 0 ? 40 : 7);
    elements *= dims[static_cast<std::size_t>(k)];
  }
  std::size_t size = 1;
  bool owned = false;
  const hid_t type = labels && in.ConsumeBool() ? H5T_NATIVE_INT64 : element_type(in, &size, &owned);
  if (type == H5T_NATIVE_INT64) size = 8;
  const hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (rank > 0 && elements > 0 && in.ConsumeBool()) {  // chunked storage, chunks of the first dimension
    std::vector<hsize_t> chunk(dims);
    chunk[0] = in.ConsumeIntegralInRange<hsize_t>(1, dims[0]);
    H5Pset_chunk(dcpl, rank, chunk.data());
  }
  const hid_t d = H5Dcreate2(file, path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (rank == 0) elements = 1;
  if (d >= 0 && in.ConsumeBool()) {  // else the fill value (zeros) is what a reader gets
    std::vector<std::uint8_t> values = in.ConsumeBytes<std::uint8_t>(elements * size);
    values.resize(elements * size);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  if (labels && d >= 0 && in.ConsumeIntegralInRange<unsigned>(0, 3) == 0) {  // the `classes` attribute
    const bool wide = in.ConsumeBool();
    const hsize_t n = wide ? 2 : 1;
    const hid_t aspace = H5Screate_simple(1, &n, nullptr);
    const hid_t atype = in.ConsumeBool() ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    const hid_t a = H5Acreate2(d, "classes", atype, aspace, H5P_DEFAULT, H5P_DEFAULT);
    const std::int64_t vi[2] = {in.ConsumeIntegralInRange<std::int64_t>(-2, 40), 3};
    const double vd[2] = {in.ConsumeFloatingPoint<double>(), 3.0};
    H5Awrite(a, atype, atype == H5T_NATIVE_INT64 ? static_cast<const void*>(vi) : static_cast<const void*>(vd));
    H5Aclose(a);
    H5Sclose(aspace);
  }
  if (d >= 0) H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  if (owned) H5Tclose(type);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // recipes that HDF5 itself refuses are not errors here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, 0);  // in memory only
  const hid_t file = H5Fcreate("divsim-fuzz.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) return 0;
  for (const char* split : {"/train", "/test"}) {
    if (in.ConsumeIntegralInRange<unsigned>(0, 15) != 0) H5Gclose(H5Gcreate2(file, split, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    make_dataset(in, file, (std::string(split) + "/x").c_str(), false);
    make_dataset(in, file, (std::string(split) + "/y").c_str(), true);
  }
  const std::int64_t train_size = in.ConsumeIntegralInRange<std::int64_t>(-1, 45);
  const std::int64_t test_size = in.ConsumeIntegralInRange<std::int64_t>(-1, 45);
  divsim::DataSplits s;
  bool ok = true;
  try {
    s = divsim::read_h5_splits(file, "fuzz.h5", train_size, test_size);
  } catch (const divsim::DataError&) {
    ok = false;
  }
  H5Fclose(file);
  if (!ok) return 0;
  require(s.train.classes >= 2 && s.train.classes == s.test.classes, "at least 2 classes, the same in both splits");
  require(s.train.dim > 0 && s.train.dim == s.test.dim, "one positive feature count in both splits");
  for (const divsim::Dataset* ds : {&s.train, &s.test}) {
    require(ds->n > 0 && ds->x.size() == static_cast<std::size_t>(ds->n * ds->dim) &&
                ds->y.size() == static_cast<std::size_t>(ds->n),
            "buffers match the shape");
    require(ds->height == 0 || (std::int64_t{ds->height} * ds->width == ds->dim &&
                                ds->background.size() == static_cast<std::size_t>(ds->dim)),
            "images have a height x width shape and a background");
    for (float v : ds->x) require(std::isfinite(v), "features are finite");
    for (auto y : ds->y) require(y >= 0 && y < ds->classes, "labels in [0, classes)");
  }
  require(train_size <= 0 || s.train.n == train_size, "data.train_size rows of the training split");
  require(test_size <= 0 || s.test.n == test_size, "data.test_size rows of the test split");
  return 0;
}
