// The HDF5 data reader (layout in h5_dataset.hpp). Each split is opened, its shapes and element types
// checked, then only the rows it uses are read; byte data goes through the same standardisation as
// Fashion-MNIST (raw_images.hpp).
#include "data/h5_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "data/raw_images.hpp"
#include "record/h5.hpp"

namespace divsim {
namespace {

constexpr std::uint64_t kMaxSamples = std::uint64_t{1} << 32;    // a sample index is one 32-bit stream word
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 36;   // 256 GiB of float32: far past any budget
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 24;

// One split's datasets, opened and checked.
struct Split {
  std::string x_path, y_path;
  h5::Dataset x, y;
  std::vector<hsize_t> x_dims;  // [N, F] or [N, H, W]
  bool bytes = false;           // uint8 (else floating point)
  std::uint64_t n = 0;          // rows used
  std::uint64_t features = 0;
};

class Reader {
 public:
  Reader(hid_t file, std::string name) : file_(file), name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& problem) const { throw DataError(name_, problem); }

  // The object at `path` as a dataset, or a message saying what is there instead.
  h5::Dataset open_dataset(const std::string& path) const {
    const std::string group = path.substr(0, path.rfind('/'));
    if (H5Lexists(file_, group.c_str(), H5P_DEFAULT) <= 0 || H5Lexists(file_, path.c_str(), H5P_DEFAULT) <= 0)
      fail("no dataset " + path + " (a data file holds /train/x, /train/y, /test/x and /test/y)");
    h5::Handle<H5Oclose> object(H5Oopen(file_, path.c_str(), H5P_DEFAULT));
    if (!object) fail("cannot open " + path + ": " + h5::take_error_stack());
    if (H5Iget_type(object) != H5I_DATASET) fail(path + " is not a dataset (a group or a named type)");
    h5::Dataset d(H5Dopen2(file_, path.c_str(), H5P_DEFAULT));
    if (!d) fail("cannot open " + path + ": " + h5::take_error_stack());
    return d;
  }

  std::vector<hsize_t> dims_of(hid_t d, const std::string& path) const {
    const h5::Dataspace space(H5Dget_space(d));
    if (!space) fail("cannot read the shape of " + path + ": " + h5::take_error_stack());
    if (H5Sget_simple_extent_type(space) != H5S_SIMPLE) fail(path + " is a scalar or empty dataspace, not an array");
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0) fail("cannot read the shape of " + path + ": " + h5::take_error_stack());
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    return dims;
  }

  Split open_split(const std::string& split, std::int64_t use, const char* key) const {
    Split s;
    s.x_path = "/" + split + "/x";
    s.y_path = "/" + split + "/y";
    s.x = open_dataset(s.x_path);
    s.y = open_dataset(s.y_path);
    s.x_dims = dims_of(s.x, s.x_path);
    if (s.x_dims.size() != 2 && s.x_dims.size() != 3)
      fail(s.x_path + " has " + std::to_string(s.x_dims.size()) + " dimensions; expected [N, features] or [N, height, width]");
    s.features = 1;
    for (std::size_t k = 1; k < s.x_dims.size(); ++k) {
      if (s.x_dims[k] == 0 || s.x_dims[k] > kMaxElements / s.features) fail(s.x_path + " has " + shape_text(s.x_dims) + ": no features per sample, or implausibly many");
      s.features *= s.x_dims[k];
    }
    const std::uint64_t rows = s.x_dims[0];
    if (rows == 0) fail(s.x_path + " has no samples (" + shape_text(s.x_dims) + ")");
    if (rows > kMaxSamples) fail(s.x_path + " has " + std::to_string(rows) + " samples; at most 2^32 can be indexed");
    const std::vector<hsize_t> y_dims = dims_of(s.y, s.y_path);
    if (y_dims.size() != 1) fail(s.y_path + " has shape " + shape_text(y_dims) + "; expected [N], one label per sample");
    if (y_dims[0] != rows)
      fail(s.y_path + " has " + std::to_string(y_dims[0]) + " labels but " + s.x_path + " has " + std::to_string(rows) + " samples");
    if (use < 0) fail(std::string(key) + " = " + std::to_string(use) + " must be >= 0");
    if (static_cast<std::uint64_t>(use) > rows)
      fail(std::string(key) + " = " + std::to_string(use) + " exceeds the " + std::to_string(rows) + " samples of " + s.x_path);
    s.n = use == 0 ? rows : static_cast<std::uint64_t>(use);
    if (s.n > kMaxElements / s.features) fail(s.x_path + ": " + std::to_string(s.n) + " samples of " + std::to_string(s.features) + " features are implausibly many");

    const h5::Datatype xt(H5Dget_type(s.x));
    const H5T_class_t xc = H5Tget_class(xt);
    if (xc == H5T_INTEGER && H5Tget_size(xt) == 1 && H5Tget_sign(xt) == H5T_SGN_NONE)
      s.bytes = true;
    else if (xc != H5T_FLOAT)
      fail(s.x_path + " holds " + type_text(xt) + "; expected uint8 (bytes) or floating point");
    const h5::Datatype yt(H5Dget_type(s.y));
    if (H5Tget_class(yt) != H5T_INTEGER) fail(s.y_path + " holds " + type_text(yt) + "; expected integer labels");
    return s;
  }

  // The first s.n rows of a dataset with `cols` values per row, converted by HDF5 to `mem_type`.
  template <class T>
  std::vector<T> read_rows(hid_t d, const std::string& path, std::uint64_t n, std::uint64_t cols, std::size_t rank,
                           hid_t mem_type) const {
    std::vector<T> out(static_cast<std::size_t>(n * cols));
    const h5::Dataspace file_space(H5Dget_space(d));
    std::vector<hsize_t> start(rank, 0), count(rank);
    H5Sget_simple_extent_dims(file_space, count.data(), nullptr);
    count[0] = n;
    const hsize_t mem_dims[1] = {n * cols};
    const h5::Dataspace mem_space(H5Screate_simple(1, mem_dims, nullptr));
    if (!file_space || !mem_space ||
        H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dread(d, mem_type, mem_space, file_space, H5P_DEFAULT, out.data()) < 0)
      fail("cannot read " + path + ": " + h5::take_error_stack());
    return out;
  }

  std::vector<std::int32_t> read_labels(const Split& s) const {
    const auto wide = read_rows<std::int64_t>(s.y, s.y_path, s.n, 1, 1, H5T_NATIVE_INT64);
    std::vector<std::int32_t> labels(wide.size());
    for (std::size_t i = 0; i < wide.size(); ++i) {
      if (wide[i] < 0 || wide[i] >= kMaxClasses)
        fail(s.y_path + "[" + std::to_string(i) + "] = " + std::to_string(wide[i]) + " is not a label in [0, 2^24)");
      labels[i] = static_cast<std::int32_t>(wide[i]);
    }
    return labels;
  }

  // The `classes` attribute of /train/y, or 0 when it has none.
  std::int64_t declared_classes(const Split& train) const {
    const htri_t has = H5Aexists(train.y, "classes");
    if (has < 0) fail("cannot read the attributes of " + train.y_path + ": " + h5::take_error_stack());
    if (has == 0) return 0;
    const h5::Attribute a(H5Aopen(train.y, "classes", H5P_DEFAULT));
    const h5::Datatype t(a ? H5Aget_type(a) : H5I_INVALID_HID);
    const h5::Dataspace space(a ? H5Aget_space(a) : H5I_INVALID_HID);
    std::int64_t classes = 0;
    if (!t || !space || H5Tget_class(t) != H5T_INTEGER || H5Sget_simple_extent_npoints(space) != 1 ||
        H5Aread(a, H5T_NATIVE_INT64, &classes) < 0)
      fail(train.y_path + " attribute 'classes' must be one integer");
    if (classes < 2 || classes > kMaxClasses)
      fail(train.y_path + " attribute 'classes' = " + std::to_string(classes) + " is not in [2, 2^24]");
    return classes;
  }

  Dataset floats(const Split& s, std::int64_t classes, std::vector<std::int32_t> labels) const {
    Dataset ds;
    ds.n = static_cast<std::int64_t>(s.n);
    ds.dim = static_cast<std::int64_t>(s.features);
    ds.classes = classes;
    ds.x = read_rows<float>(s.x, s.x_path, s.n, s.features, s.x_dims.size(), H5T_NATIVE_FLOAT);
    const auto bad = std::find_if(ds.x.begin(), ds.x.end(), [](float v) { return !std::isfinite(v); });
    if (bad != ds.x.end()) {
      const auto at = static_cast<std::uint64_t>(bad - ds.x.begin());
      fail(s.x_path + " value " + std::to_string(*bad) + " of sample " + std::to_string(at / s.features) +
           " is not finite (or does not fit float32)");
    }
    ds.y = std::move(labels);
    return ds;
  }

  RawImages bytes(const Split& s, std::int64_t classes, std::vector<std::int32_t> labels) const {
    RawImages raw;
    raw.n = static_cast<std::int64_t>(s.n);
    raw.images = s.x_dims.size() == 3;
    raw.height = raw.images ? static_cast<int>(s.x_dims[1]) : 1;
    raw.width = static_cast<int>(raw.images ? s.x_dims[2] : s.x_dims[1]);
    raw.classes = classes;
    raw.pixels = read_rows<std::uint8_t>(s.x, s.x_path, s.n, s.features, s.x_dims.size(), H5T_NATIVE_UINT8);
    raw.labels = std::move(labels);
    return raw;
  }

  DataSplits read(std::int64_t train_size, std::int64_t test_size) const {
    const Split train = open_split("train", train_size, "data.train_size");
    const Split test = open_split("test", test_size, "data.test_size");
    if (std::vector<hsize_t>(test.x_dims.begin() + 1, test.x_dims.end()) !=
        std::vector<hsize_t>(train.x_dims.begin() + 1, train.x_dims.end()))
      fail(test.x_path + " has " + shape_text(test.x_dims) + " but " + train.x_path + " has " +
           shape_text(train.x_dims) + ": samples of both splits must have one shape");
    if (train.bytes != test.bytes) fail(train.x_path + " and " + test.x_path + " must both hold uint8 or both floating point");
    if (train.bytes && train.features > std::numeric_limits<int>::max())
      fail(train.x_path + " has " + shape_text(train.x_dims) + ": too many features");

    std::vector<std::int32_t> train_y = read_labels(train), test_y = read_labels(test);
    std::int64_t classes = declared_classes(train);
    const std::int64_t largest = std::max(*std::max_element(train_y.begin(), train_y.end()),
                                          *std::max_element(test_y.begin(), test_y.end()));
    if (classes == 0) {
      classes = largest + 1;
      if (classes < 2) fail("every label is 0: a classifier needs at least 2 classes (or set the attribute 'classes' of " + train.y_path + ")");
    } else if (largest >= classes) {
      fail("a label is " + std::to_string(largest) + " but " + train.y_path + " attribute 'classes' = " + std::to_string(classes));
    }

    DataSplits out;
    if (train.bytes) {
      const RawImages raw_train = bytes(train, classes, std::move(train_y));
      const PixelStats st = pixel_stats(raw_train);
      out.train = standardise(raw_train, st);
      out.test = standardise(bytes(test, classes, std::move(test_y)), st);
    } else {
      out.train = floats(train, classes, std::move(train_y));
      out.test = floats(test, classes, std::move(test_y));
    }
    out.description = "hdf5 " + name_ + " " + std::to_string(out.train.n) + "/" + std::to_string(out.test.n) + " (" +
                      std::to_string(out.train.dim) + (train.bytes ? " byte" : " float") + " features, " +
                      std::to_string(classes) + " classes)";
    return out;
  }

  std::uint64_t bytes_needed(std::int64_t train_size, std::int64_t test_size) const {
    const Split train = open_split("train", train_size, "data.train_size");
    const Split test = open_split("test", test_size, "data.test_size");
    return (train.n + test.n) * (train.features * sizeof(float) + sizeof(std::int32_t));
  }

 private:
  static std::string shape_text(const std::vector<hsize_t>& dims) {
    std::string s = "[";
    for (std::size_t k = 0; k < dims.size(); ++k) s += (k ? ", " : "") + std::to_string(dims[k]);
    return s + "]";
  }
  static std::string type_text(hid_t t) {
    switch (H5Tget_class(t)) {
      case H5T_INTEGER:
        return std::to_string(H5Tget_size(t)) + "-byte " + (H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned" : "signed") + " integers";
      case H5T_FLOAT: return "floating point";
      case H5T_STRING: return "strings";
      case H5T_COMPOUND: return "a compound type";
      case H5T_ENUM: return "an enum type";
      default: return "a type of class " + std::to_string(static_cast<int>(H5Tget_class(t)));
    }
  }

  hid_t file_;
  std::string name_;
};

h5::File open_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw DataError(path, "cannot open: no such file");
  require_regular_file(path);
  h5::silence_error_printing();
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0) throw DataError(path, "not an HDF5 file");
  h5::File f(is_h5 > 0 ? H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID);
  if (!f) throw DataError(path, "cannot open as HDF5: " + h5::take_error_stack());
  return f;
}

}  // namespace

DataSplits read_h5_splits(hid_t file, const std::string& name, std::int64_t train_size, std::int64_t test_size) {
  h5::silence_error_printing();
  return Reader(file, name).read(train_size, test_size);
}

DataSplits read_h5_splits(const std::string& path, std::int64_t train_size, std::int64_t test_size) {
  const h5::File f = open_file(path);
  return read_h5_splits(f, path, train_size, test_size);
}

std::uint64_t h5_splits_bytes(const std::string& path, std::int64_t train_size, std::int64_t test_size) {
  const h5::File f = open_file(path);
  return Reader(f, path).bytes_needed(train_size, test_size);
}

}  // namespace divsim
