#include "record/recorded_run.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstring>

#include "record/h5.hpp"
#include "record/schema.hpp"

namespace divsim {
namespace {

template <class T>
hid_t mem_type();
template <>
hid_t mem_type<double>() { return H5T_NATIVE_DOUBLE; }
template <>
hid_t mem_type<std::int64_t>() { return H5T_NATIVE_INT64; }
template <>
hid_t mem_type<std::uint64_t>() { return H5T_NATIVE_UINT64; }

// rows x [rank_begin, rank_begin+rank_count) x (the rest) of a dataset; one that is not per rank: [rows].
template <class T>
std::vector<T> read_rows(hid_t file, schema::DatasetId id, std::int64_t rows, const TrajectoryLayout& layout) {
  const schema::DatasetSchema& declared = schema::dataset(id);
  const std::string path(declared.path);
  const h5::Dataset d(h5::check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "opening " + path));
  const h5::Dataspace space(h5::check(H5Dget_space(d), "H5Dget_space " + path));
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  if (dims[0] < static_cast<hsize_t>(rows))
    throw IoError(path + " holds " + std::to_string(dims[0]) + " rows, the checkpoint needs " + std::to_string(rows));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  count[0] = static_cast<hsize_t>(rows);
  if (declared.per_rank()) {
    start[1] = static_cast<hsize_t>(layout.rank_begin);
    count[1] = static_cast<hsize_t>(layout.rank_count);
  }
  hsize_t total = 1;
  for (hsize_t c : count) total *= c;
  std::vector<T> out(total);
  if (total == 0) return out;
  h5::check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), "select " + path);
  const h5::Dataspace mem(h5::check(H5Screate_simple(1, &total, nullptr), "memory space"));
  h5::check(H5Dread(d, mem_type<T>(), mem, space, H5P_DEFAULT, out.data()), "reading " + path);
  return out;
}

}  // namespace

RecordedRun read_recorded_run(const std::string& path, const TrajectoryLayout& layout, std::int64_t rows,
                              std::int64_t layer_rows, std::int64_t eval_rows) {
  h5::silence_error_printing();
  const h5::File f(h5::check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening '" + path + "' to resume"));
  RecordedRun r;
  r.rows = rows;
  r.layer_rows = layer_rows;
  r.eval_rows = eval_rows;
  r.created = h5::read_string_attr(f, std::string(schema::attribute(schema::AttributeId::created).name));
  using D = schema::DatasetId;
  r.step = read_rows<std::int64_t>(f, D::train_step, rows, layout);
  r.global_loss = read_rows<double>(f, D::train_global_loss, rows, layout);
  for (std::size_t i = 0; i < r.cols.size(); ++i)
    r.cols[i] = read_rows<double>(f, schema::kTrainColumns[i], rows, layout);
  r.param_hash = read_rows<std::uint64_t>(f, D::train_param_hash, rows, layout);
  if (layout.record_samples) r.samples = read_rows<std::int64_t>(f, D::train_samples, rows, layout);
  r.layer_step = read_rows<std::int64_t>(f, D::layers_step, layer_rows, layout);
  r.forward = read_rows<double>(f, D::layers_forward, layer_rows, layout);
  r.backward = read_rows<double>(f, D::layers_backward, layer_rows, layout);
  r.layer_grad_norm = read_rows<double>(f, D::layers_grad_norm, layer_rows, layout);
  r.eval_step = read_rows<std::int64_t>(f, D::eval_step, eval_rows, layout);
  r.eval_loss = read_rows<double>(f, D::eval_loss, eval_rows, layout);
  r.eval_accuracy = read_rows<double>(f, D::eval_accuracy, eval_rows, layout);

  // Events: the compound table, read whole (it is small) and cut at the checkpoint's step.
  const std::string events(schema::dataset(D::events).path);
  const h5::Dataset ev(h5::check(H5Dopen2(f, events.c_str(), H5P_DEFAULT), "opening " + events));
  const h5::Dataspace space(h5::check(H5Dget_space(ev), "H5Dget_space " + events));
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  struct Row {
    std::int64_t step;
    std::int32_t rank;
    char kind[TrajectoryWriter::kEventKindSize];
    char detail[TrajectoryWriter::kEventDetailSize];
  };
  const h5::Datatype t(h5::check(H5Tcreate(H5T_COMPOUND, sizeof(Row)), "H5Tcreate"));
  const h5::Datatype kind_t = h5::fixed_string_type(TrajectoryWriter::kEventKindSize);
  const h5::Datatype detail_t = h5::fixed_string_type(TrajectoryWriter::kEventDetailSize);
  H5Tinsert(t, "step", offsetof(Row, step), H5T_NATIVE_INT64);
  H5Tinsert(t, "rank", offsetof(Row, rank), H5T_NATIVE_INT32);
  H5Tinsert(t, "kind", offsetof(Row, kind), kind_t);
  H5Tinsert(t, "detail", offsetof(Row, detail), detail_t);
  std::vector<Row> rows_in(n);
  if (n > 0) h5::check(H5Dread(ev, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows_in.data()), "reading " + events);
  for (const Row& e : rows_in)
    if (e.step < rows)
      r.events.push_back({e.step, e.rank, std::string(e.kind, strnlen(e.kind, sizeof e.kind)),
                          std::string(e.detail, strnlen(e.detail, sizeof e.detail))});
  return r;
}

std::vector<float> read_recorded_array(const std::string& path, const std::string& dataset, std::size_t size) {
  h5::silence_error_printing();
  const h5::File f(h5::check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening '" + path + "' to resume"));
  const h5::Dataset d(h5::check(H5Dopen2(f, dataset.c_str(), H5P_DEFAULT), "opening " + dataset));
  const h5::Dataspace space(h5::check(H5Dget_space(d), "H5Dget_space " + dataset));
  if (static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)) != size)
    throw IoError(dataset + " in '" + path + "' does not have " + std::to_string(size) + " values");
  std::vector<float> out(size);
  h5::check(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "reading " + dataset);
  return out;
}

}  // namespace divsim
