// HDF5 helpers: error-stack capture, attribute writers and readers (see h5.hpp).
#include "record/h5.hpp"

#include <array>

namespace divsim::h5 {

void silence_error_printing() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {

herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* out) {
  auto& msg = *static_cast<std::string*>(out);
  if (!msg.empty()) msg += "; ";
  msg += err->func_name ? std::string(err->func_name) + "(): " : std::string();
  const std::size_t from = msg.size();
  msg += err->desc ? err->desc : "(no description)";
  // Some descriptions (MPI error strings, timestamps) span lines: keep the message on one line.
  for (std::size_t i = from; i < msg.size(); ++i)
    if (msg[i] == '\n') msg[i] = ' ';
  return 0;
}

Dataspace scalar_space() { return Dataspace(check(H5Screate(H5S_SCALAR), "H5Screate(scalar)")); }

Datatype vlen_string_type() {
  Datatype t(check(H5Tcopy(H5T_C_S1), "H5Tcopy(string)"));
  check(H5Tset_size(t, H5T_VARIABLE), "H5Tset_size(variable)");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset(utf8)");
  return t;
}

void write_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, hid_t space,
                const void* data) {
  const Attribute attr(check(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                             "creating attribute '" + name + "'"));
  check(H5Awrite(attr, mem_type, data), "writing attribute '" + name + "'");
}

Attribute open_attr(hid_t obj, const std::string& name) {
  return Attribute(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "opening attribute '" + name + "'"));
}

template <class T>
T read_scalar_attr(hid_t obj, const std::string& name, hid_t mem_type) {
  const Attribute attr = open_attr(obj, name);
  const Dataspace space(check(H5Aget_space(attr), "H5Aget_space '" + name + "'"));
  if (H5Sget_simple_extent_npoints(space) != 1) throw IoError("attribute '" + name + "' is not a scalar");
  T value{};
  check(H5Aread(attr, mem_type, &value), "reading attribute '" + name + "'");
  return value;
}

// Reads every string of a string attribute (scalar or 1-d), fixed- or variable-length.
std::vector<std::string> read_string_values(hid_t obj, const std::string& name) {
  const Attribute attr = open_attr(obj, name);
  const Datatype type(check(H5Aget_type(attr), "H5Aget_type '" + name + "'"));
  if (H5Tget_class(type) != H5T_STRING) throw IoError("attribute '" + name + "' is not a string");
  const Dataspace space(check(H5Aget_space(attr), "H5Aget_space '" + name + "'"));
  const auto n = static_cast<std::size_t>(check(H5Sget_simple_extent_npoints(space), "npoints '" + name + "'"));
  std::vector<std::string> out;
  out.reserve(n);
  if (check(H5Tis_variable_str(type), "H5Tis_variable_str '" + name + "'") > 0) {
    const Datatype mem = vlen_string_type();
    std::vector<char*> ptrs(n, nullptr);
    check(H5Aread(attr, mem, ptrs.data()), "reading attribute '" + name + "'");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data());
  } else {
    const std::size_t size = H5Tget_size(type);
    const Datatype mem = fixed_string_type(size);
    std::vector<char> buf(n * size);
    check(H5Aread(attr, mem, buf.data()), "reading attribute '" + name + "'");
    for (std::size_t i = 0; i < n; ++i) {
      const std::string_view s(buf.data() + i * size, size);
      out.emplace_back(s.substr(0, s.find('\0')));
    }
  }
  return out;
}

}  // namespace

std::string take_error_stack() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "HDF5 call failed (no error stack)" : msg;
}

Datatype fixed_string_type(std::size_t size) {
  Datatype t(check(H5Tcopy(H5T_C_S1), "H5Tcopy(string)"));
  check(H5Tset_size(t, size), "H5Tset_size(fixed string)");
  check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset(utf8)");
  return t;
}

void write_string_attr(hid_t obj, const std::string& name, std::string_view value) {
  const std::string owned(value);  // HDF5 needs a terminated C string
  const char* p = owned.c_str();
  const Datatype t = vlen_string_type();
  write_attr(obj, name, t, t, scalar_space(), &p);
}

void write_strings_attr(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  const std::array<hsize_t, 1> dims{values.size()};
  const Dataspace space(check(H5Screate_simple(1, dims.data(), nullptr), "H5Screate_simple"));
  const Datatype t = vlen_string_type();
  write_attr(obj, name, t, t, space, ptrs.data());
}

void write_int64_attr(hid_t obj, const std::string& name, std::int64_t value) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, scalar_space(), &value);
}

void write_uint64_attr(hid_t obj, const std::string& name, std::uint64_t value) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, scalar_space(), &value);
}

void write_double_attr(hid_t obj, const std::string& name, double value) {
  write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, scalar_space(), &value);
}

std::string read_string_attr(hid_t obj, const std::string& name) {
  auto values = read_string_values(obj, name);
  if (values.size() != 1) throw IoError("attribute '" + name + "' is not a single string");
  return std::move(values.front());
}

std::vector<std::string> read_strings_attr(hid_t obj, const std::string& name) {
  return read_string_values(obj, name);
}

std::int64_t read_int64_attr(hid_t obj, const std::string& name) {
  return read_scalar_attr<std::int64_t>(obj, name, H5T_NATIVE_INT64);
}

std::uint64_t read_uint64_attr(hid_t obj, const std::string& name) {
  return read_scalar_attr<std::uint64_t>(obj, name, H5T_NATIVE_UINT64);
}

double read_double_attr(hid_t obj, const std::string& name) {
  return read_scalar_attr<double>(obj, name, H5T_NATIVE_DOUBLE);
}

}  // namespace divsim::h5
