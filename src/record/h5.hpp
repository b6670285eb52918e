#pragma once
// Thin HDF5 helpers: RAII owners for hid_t handles, check() that turns a negative HDF5 return into an
// IoError carrying HDF5's own error stack, and scalar/string attribute writers and readers.
//
// Deliberately not a C++ HDF5 binding: callers still make plain H5* calls, these helpers only make
// them leak- and error-safe. Strings in attributes are variable-length UTF-8 (h5py reads them as
// str); datasets of strings are the writer's business (parallel HDF5 needs fixed-length there).
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "record/io_error.hpp"

namespace divsim::h5 {

// Turn off HDF5's automatic printing of its error stack to stderr (for this thread); check() puts
// the stack into the exception message instead.
void silence_error_printing();

// Message of HDF5's current error stack (outermost call first), then clears it.
std::string take_error_stack();

// Returns `result` if non-negative, else throws IoError("<what>: <HDF5 error stack>").
// Works for hid_t, herr_t and htri_t returns.
template <class T>
T check(T result, std::string_view what) {
  if (result < 0) throw IoError(std::string(what) + ": " + take_error_stack());
  return result;
}

// Owner of one hid_t, closed with Close on destruction. Movable, not copyable. Converts implicitly to
// hid_t so that owned handles read like plain ones in H5* calls.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) noexcept : id_(id) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  operator hid_t() const noexcept { return id_; }  // NOLINT(google-explicit-constructor)
  explicit operator bool() const noexcept { return id_ >= 0; }

  // Gives up ownership without closing: the caller closes the returned handle.
  hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }

  // Close now, ignoring errors (destructor path).
  void reset() noexcept {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }
  // Close now and throw IoError if HDF5 reports a failure (e.g. the final H5Fclose of a file).
  void close(std::string_view what) {
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    if (id >= 0) check(Close(id), what);
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using Plist = Handle<H5Pclose>;
using Attribute = Handle<H5Aclose>;

// Fixed-length string type of `size` bytes (null-padded, UTF-8), as numpy's 'S<size>'.
Datatype fixed_string_type(std::size_t size);

// Attribute writers: create attribute `name` on object `obj` (file, group or dataset). Throws IoError
// naming the attribute if it exists already or HDF5 fails.
void write_string_attr(hid_t obj, const std::string& name, std::string_view value);
void write_strings_attr(hid_t obj, const std::string& name, const std::vector<std::string>& values);
void write_int64_attr(hid_t obj, const std::string& name, std::int64_t value);
void write_uint64_attr(hid_t obj, const std::string& name, std::uint64_t value);
void write_double_attr(hid_t obj, const std::string& name, double value);

// Attribute readers (string readers accept fixed- and variable-length strings). Throw IoError naming
// the attribute if it is missing or not of a convertible type.
std::string read_string_attr(hid_t obj, const std::string& name);
std::vector<std::string> read_strings_attr(hid_t obj, const std::string& name);
std::int64_t read_int64_attr(hid_t obj, const std::string& name);
std::uint64_t read_uint64_attr(hid_t obj, const std::string& name);
double read_double_attr(hid_t obj, const std::string& name);

}  // namespace divsim::h5
