// TrajectoryWriter: schema v1 datasets, buffered rows and their collective writes (see the header).
#include "record/trajectory_writer.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "comm/abort_job.hpp"
#include "record/schema.hpp"

namespace divsim {

namespace {

namespace fs = std::filesystem;

constexpr hsize_t kMaxChunkBytes = hsize_t{16} << 20;  // readers fetch whole chunks: keep them modest
constexpr hsize_t kEventChunkRows = 256;
constexpr const char* kStats[] = {"mean", "std", "min", "max", "l2"};
constexpr std::uint32_t kJournalFormat = 2;  // bump when the journal payloads change
constexpr hsize_t kNumStats = std::size(kStats);

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, double>) {
    return H5T_NATIVE_DOUBLE;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return H5T_NATIVE_INT64;
  } else {
    static_assert(std::is_same_v<T, std::uint64_t>);
    return H5T_NATIVE_UINT64;
  }
}

template <class T>
constexpr schema::Type schema_type() {
  if constexpr (std::is_same_v<T, double>) {
    return schema::Type::float64;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return schema::Type::int64;
  } else {
    static_assert(std::is_same_v<T, std::uint64_t>);
    return schema::Type::uint64;
  }
}

// The file type of a numeric schema type (little-endian, whatever the machine).
hid_t file_type(const schema::DatasetSchema& d) {
  switch (d.type) {
    case schema::Type::int64: return H5T_STD_I64LE;
    case schema::Type::uint64: return H5T_STD_U64LE;
    case schema::Type::float64: return H5T_IEEE_F64LE;
    case schema::Type::float32: return H5T_IEEE_F32LE;
    default: throw std::logic_error("TrajectoryWriter: " + std::string(d.path) + " is not a numeric dataset");
  }
}

std::string attribute_name(schema::AttributeId id) { return std::string(schema::attribute(id).name); }

void validate(const TrajectoryLayout& l) {
  const auto fail = [](const std::string& msg) { throw std::invalid_argument("trajectory layout: " + msg); };
  if (l.world_size < 1) fail("world_size must be >= 1, got " + std::to_string(l.world_size));
  if (l.rank_count < 1 || l.rank_begin < 0 || l.rank_begin + l.rank_count > l.world_size)
    fail("logical ranks [" + std::to_string(l.rank_begin) + ", " + std::to_string(l.rank_begin + l.rank_count) +
         ") are not a non-empty part of [0, " + std::to_string(l.world_size) + ")");
  if (l.flush_every < 1) fail("flush_every must be >= 1, got " + std::to_string(l.flush_every));
  if (l.chunk_steps < 1) fail("chunk_steps must be >= 1, got " + std::to_string(l.chunk_steps));
  if (l.record_samples && l.samples_per_step < 1)
    fail("samples_per_step must be >= 1 when recording samples, got " + std::to_string(l.samples_per_step));
}

// Process 0's view of the output path: an error message, or empty if the run may write there.
std::string prepare_output(const std::string& final_path, bool overwrite) {
  std::error_code ec;
  const fs::path path(final_path);
  if (fs::is_directory(path, ec)) return "output path '" + final_path + "' is a folder";
  if (fs::exists(path, ec) && !overwrite)
    return "output file '" + final_path + "' exists already (run.overwrite = true replaces it)";
  if (path.has_parent_path() && !fs::exists(path.parent_path(), ec)) {
    fs::create_directories(path.parent_path(), ec);
    if (ec) return "cannot create output folder '" + path.parent_path().string() + "': " + ec.message();
  }
  return {};
}

// A collective HDF5 write can fail on some processes only (disk full or quota hit on the MPI-IO
// aggregators), and HDF5's error paths then skip collective steps that the other processes wait in: no
// exception could bring the processes back to a point where they agree, and the job would hang. So
// with more than one process, the failing one reports and ends the job (exit 3); alone, it throws.
void check_collective(MPI_Comm comm, herr_t result, std::string_view what) {
  if (result >= 0) return;
  const std::string message = std::string(what) + ": " + h5::take_error_stack();
  int procs = 1;
  MPI_Comm_size(comm, &procs);
  if (procs == 1) throw IoError(message);
  abort_job(comm, 3, message);
}

// Every process returns process 0's string (used to fail on all processes together).
std::string broadcast_string(MPI_Comm comm, std::string s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  s.resize(static_cast<std::size_t>(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, comm);
  return s;
}

// Copies at most out.size() bytes, cut back to a UTF-8 character boundary; the rest stays zero.
template <std::size_t N>
void copy_truncated(const std::string& s, std::array<char, N>& out) {
  std::size_t n = std::min(s.size(), N);
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0u) == 0x80u) --n;
  std::memcpy(out.data(), s.data(), n);
}

hsize_t product(const std::vector<hsize_t>& dims, std::size_t from = 0) {
  hsize_t p = 1;
  for (std::size_t i = from; i < dims.size(); ++i) p *= dims[i];
  return p;
}

void write_dataset_attrs(hid_t dset, std::string_view dims, std::string_view description) {
  h5::write_string_attr(dset, attribute_name(schema::AttributeId::dims), dims);
  h5::write_string_attr(dset, attribute_name(schema::AttributeId::description), description);
}

// A fixed-size (contiguous) dataset at an absolute path, intermediate groups created.
h5::Dataset create_fixed(hid_t file, const std::string& path, hid_t file_type, const std::vector<hsize_t>& shape,
                         std::string_view dims, std::string_view description) {
  const h5::Dataspace space(
      h5::check(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), "dataspace of " + path));
  const h5::Plist lcpl(h5::check(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate(link)"));
  h5::check(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group");
  h5::Dataset dset(h5::check(H5Dcreate2(file, path.c_str(), file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                             "creating dataset '" + path + "'"));
  write_dataset_attrs(dset, dims, description);
  return dset;
}

// Collective write of a whole fixed-size dataset from process 0's buffer of n values (others select
// nothing but take part).
void write_from_root(MPI_Comm comm, hid_t dset, hid_t mem_type, const void* data, hsize_t n, int proc, hid_t dxpl,
                     const std::string& path, const std::string& file) {
  if (n == 0) return;  // same n on every process
  const h5::Dataspace file_space(h5::check(H5Dget_space(dset), "H5Dget_space " + path));
  const h5::Dataspace mem_space(h5::check(H5Screate_simple(1, &n, nullptr), "memory space of " + path));
  if (proc != 0) {
    h5::check(H5Sselect_none(file_space), "H5Sselect_none");
    h5::check(H5Sselect_none(mem_space), "H5Sselect_none");
  }
  check_collective(comm, H5Dwrite(dset, mem_type, mem_space, file_space, dxpl, data),
                   "writing " + path + " to '" + file + "'");
}

void insert_member(hid_t compound, const char* name, std::size_t offset, hid_t type) {
  h5::check(H5Tinsert(compound, name, offset, type), std::string("H5Tinsert ") + name);
}

}  // namespace

TrajectoryWriter::TrajectoryWriter(MPI_Comm comm, const std::string& final_path, bool overwrite,
                                   const TrajectoryLayout& layout, const RootAttributes& attrs,
                                   const std::vector<FaultRow>& faults)
    : TrajectoryWriter(comm, final_path, overwrite, layout, attrs, faults, true) {}

TrajectoryWriter::TrajectoryWriter(MPI_Comm comm, const std::string& final_path, bool overwrite,
                                   const TrajectoryLayout& layout, const RootAttributes& attrs,
                                   const std::vector<FaultRow>& faults, bool journal)
    : comm_(comm), final_path_(final_path), partial_path_(final_path + ".partial"), layout_(layout) {
  validate(layout_);
  for (const auto& extra : attrs.extra) schema::root_attribute(extra.first);  // refuses undeclared ones
  capacity_ = static_cast<hsize_t>(layout_.flush_every);
  MPI_Comm_rank(comm_, &proc_);
  h5::silence_error_printing();

  const std::string problem = broadcast_string(comm_, proc_ == 0 ? prepare_output(final_path_, overwrite) : "");
  if (!problem.empty()) throw IoError(problem);

  const h5::Plist fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate(file access)"));
  h5::check(H5Pset_fapl_mpio(fapl, comm_, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  // Metadata is written by all processes together in large collective writes; every process makes
  // every metadata call below with identical arguments, which these settings require.
  h5::check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write");
  h5::check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops");
  // Small metadata allocations are aggregated into 64 KiB blocks; large chunks start on 1 MiB
  // (typical parallel file system stripe) boundaries.
  h5::check(H5Pset_meta_block_size(fapl, 64 << 10), "H5Pset_meta_block_size");
  h5::check(H5Pset_alignment(fapl, 1 << 20, 1 << 20), "H5Pset_alignment");
  file_ = h5::File(h5::check(H5Fcreate(partial_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
                             "creating HDF5 file '" + partial_path_ + "'"));

  collective_ = h5::Plist(h5::check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate(transfer)"));
  h5::check(H5Pset_dxpl_mpio(collective_, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");

  using enum schema::AttributeId;
  h5::write_int64_attr(file_, attribute_name(schema_version), schema::kVersion);
  h5::write_int64_attr(file_, attribute_name(world_size), layout_.world_size);
  h5::write_string_attr(file_, attribute_name(divsim_version), attrs.divsim_version);
  h5::write_string_attr(file_, attribute_name(git_sha), attrs.git_sha);
  h5::write_string_attr(file_, attribute_name(created), attrs.created);
  h5::write_string_attr(file_, attribute_name(config), attrs.config);
  h5::write_string_attr(file_, attribute_name(env), attrs.env);
  for (const auto& [key, value] : attrs.extra) h5::write_string_attr(file_, key, value);

  for (const char* group : {"/train", "/layers", "/eval"})
    h5::Group(h5::check(H5Gcreate2(file_, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        std::string("creating group ") + group));

  using D = schema::DatasetId;  // `using enum` would clash with the parameter `faults`
  train_step_ = make_series<std::int64_t>(D::train_step);
  global_loss_ = make_series<double>(D::train_global_loss);
  for (std::size_t i = 0; i < train_cols_.size(); ++i) train_cols_[i] = make_series<double>(schema::kTrainColumns[i]);
  param_hash_ = make_series<std::uint64_t>(D::train_param_hash);
  if (layout_.record_samples) samples_ = make_series<std::int64_t>(D::train_samples);

  layers_step_ = make_series<std::int64_t>(D::layers_step);
  forward_ = make_series<double>(D::layers_forward);
  backward_ = make_series<double>(D::layers_backward);
  const std::vector<std::string> stat_names(std::begin(kStats), std::end(kStats));
  h5::write_strings_attr(forward_.dataset, attribute_name(stats), stat_names);
  h5::write_strings_attr(backward_.dataset, attribute_name(stats), stat_names);
  layer_grad_norm_ = make_series<double>(D::layers_grad_norm);

  eval_step_ = make_series<std::int64_t>(D::eval_step);
  eval_loss_ = make_series<double>(D::eval_loss);
  eval_accuracy_ = make_series<double>(D::eval_accuracy);

  // /layers/names: fixed-length strings as wide as the longest name.
  const auto L = static_cast<hsize_t>(layout_.layer_names.size());
  std::size_t width = 1;
  for (const auto& n : layout_.layer_names) width = std::max(width, n.size());
  std::vector<char> names(L * width, '\0');
  for (std::size_t i = 0; i < L; ++i)
    std::memcpy(names.data() + i * width, layout_.layer_names[i].data(), layout_.layer_names[i].size());
  const h5::Datatype name_type = h5::fixed_string_type(width);
  const schema::DatasetSchema& names_schema = schema::dataset(D::layers_names);
  const std::string names_path(names_schema.path);
  const h5::Dataset names_dset =
      create_fixed(file_, names_path, name_type, {L}, names_schema.dims, names_schema.description);
  write_from_root(comm_, names_dset, name_type, names.data(), L, proc_, collective_, names_path, partial_path_);

  const schema::DatasetSchema& lr_schema = schema::dataset(D::schedule_lr);
  const std::string lr_path(lr_schema.path);
  const hsize_t T = layout_.schedule_lr.size();
  const h5::Dataset lr_dset = create_fixed(file_, lr_path, file_type(lr_schema), {T}, lr_schema.dims, lr_schema.description);
  write_from_root(comm_, lr_dset, H5T_NATIVE_DOUBLE, layout_.schedule_lr.data(), T, proc_, collective_, lr_path,
                  partial_path_);

  // /events: packed compound in the file; EventRecord (with padding) in memory.
  const h5::Datatype kind_type = h5::fixed_string_type(kEventKindSize);
  const h5::Datatype detail_type = h5::fixed_string_type(kEventDetailSize);
  event_mem_type_ = h5::Datatype(h5::check(H5Tcreate(H5T_COMPOUND, sizeof(EventRecord)), "H5Tcreate(event)"));
  insert_member(event_mem_type_, "step", offsetof(EventRecord, step), H5T_NATIVE_INT64);
  insert_member(event_mem_type_, "rank", offsetof(EventRecord, rank), H5T_NATIVE_INT32);
  insert_member(event_mem_type_, "kind", offsetof(EventRecord, kind), kind_type);
  insert_member(event_mem_type_, "detail", offsetof(EventRecord, detail), detail_type);
  event_file_type_ = h5::Datatype(
      h5::check(H5Tcreate(H5T_COMPOUND, 8 + 4 + kEventKindSize + kEventDetailSize), "H5Tcreate(event)"));
  insert_member(event_file_type_, "step", 0, H5T_STD_I64LE);
  insert_member(event_file_type_, "rank", 8, H5T_STD_I32LE);
  insert_member(event_file_type_, "kind", 12, kind_type);
  insert_member(event_file_type_, "detail", 12 + kEventKindSize, detail_type);
  {
    const schema::DatasetSchema& e = schema::dataset(D::events);
    const std::string path(e.path);
    const hsize_t zero = 0, unlimited = H5S_UNLIMITED;
    const h5::Dataspace space(h5::check(H5Screate_simple(1, &zero, &unlimited), "dataspace of " + path));
    const h5::Plist dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate(dataset)"));
    h5::check(H5Pset_chunk(dcpl, 1, &kEventChunkRows), "H5Pset_chunk " + path);
    h5::check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
    events_ = h5::Dataset(h5::check(
        H5Dcreate2(file_, path.c_str(), event_file_type_, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "creating " + path));
    write_dataset_attrs(events_, e.dims, e.description);
  }

  // /faults: packed compound, strings as wide as the longest value; memory rows use the same offsets.
  std::size_t w_name = 1, w_ranks = 1, w_spec = 1;
  for (const auto& f : faults) {
    w_name = std::max(w_name, f.name.size());
    w_ranks = std::max(w_ranks, f.ranks.size());
    w_spec = std::max(w_spec, f.spec.size());
  }
  const std::size_t o_ranks = w_name, o_spec = o_ranks + w_ranks, o_start = o_spec + w_spec;
  const std::size_t o_stop = o_start + 8, o_every = o_stop + 8, o_prob = o_every + 8, row_size = o_prob + 8;
  const h5::Datatype name_t = h5::fixed_string_type(w_name), ranks_t = h5::fixed_string_type(w_ranks),
                     spec_t = h5::fixed_string_type(w_spec);
  const auto fault_type = [&](hid_t i64, hid_t f64) {
    h5::Datatype t(h5::check(H5Tcreate(H5T_COMPOUND, row_size), "H5Tcreate(fault)"));
    insert_member(t, "name", 0, name_t);
    insert_member(t, "ranks", o_ranks, ranks_t);
    insert_member(t, "spec", o_spec, spec_t);
    insert_member(t, "start", o_start, i64);
    insert_member(t, "stop", o_stop, i64);
    insert_member(t, "every", o_every, i64);
    insert_member(t, "prob", o_prob, f64);
    return t;
  };
  std::vector<char> rows(faults.size() * row_size, '\0');
  for (std::size_t i = 0; i < faults.size(); ++i) {
    char* r = rows.data() + i * row_size;
    const FaultRow& f = faults[i];
    std::memcpy(r, f.name.data(), f.name.size());
    std::memcpy(r + o_ranks, f.ranks.data(), f.ranks.size());
    std::memcpy(r + o_spec, f.spec.data(), f.spec.size());
    std::memcpy(r + o_start, &f.start, 8);
    std::memcpy(r + o_stop, &f.stop, 8);
    std::memcpy(r + o_every, &f.every, 8);
    std::memcpy(r + o_prob, &f.prob, 8);
  }
  const schema::DatasetSchema& faults_schema = schema::dataset(D::faults);
  const std::string faults_path(faults_schema.path);
  const h5::Dataset faults_dset = create_fixed(file_, faults_path, fault_type(H5T_STD_I64LE, H5T_IEEE_F64LE),
                                               {faults.size()}, faults_schema.dims, faults_schema.description);
  write_from_root(comm_, faults_dset, fault_type(H5T_NATIVE_INT64, H5T_NATIVE_DOUBLE), rows.data(), faults.size(),
                  proc_, collective_, faults_path, partial_path_);

  check_collective(comm_, H5Fflush(file_, H5F_SCOPE_GLOBAL), "flushing '" + partial_path_ + "'");
  if (journal) {
    journal_ = std::make_unique<JournalWriter>(comm_, journal_path(final_path_));
    journal_->append(JournalKind::header, header_payload(attrs, faults));
  }
}

TrajectoryWriter::~TrajectoryWriter() {
  if (std::uncaught_exceptions() <= uncaught_) return;  // members close themselves, collectively
  // Unwinding from an exception that may be this process's alone while the others wait in a collective
  // of the step loop: closing datasets, the file and the journal is collective and would wait for them
  // forever. Leave them open: on disk they hold every flushed row. Whoever catches the exception ends
  // the job (MPI_Abort), or, if every process failed together, MPI_Finalize closes them.
  for_each_series([](const Block&, auto& s) { s.dataset.release(); });
  events_.release();
  file_.release();
  if (journal_) journal_->abandon();
}

std::string TrajectoryWriter::partial_path() const { return partial_path_; }

hsize_t TrajectoryWriter::axis_size(std::string_view axis) const {
  if (axis == "rank") return static_cast<hsize_t>(layout_.world_size);
  if (axis == "layer") return layout_.layer_names.size();
  if (axis == "stat") return kNumStats;
  if (axis == "sample") return static_cast<hsize_t>(layout_.samples_per_step);
  throw std::logic_error("TrajectoryWriter: no size for the axis '" + std::string(axis) + "'");
}

template <class T>
TrajectoryWriter::Series<T> TrajectoryWriter::make_series(schema::DatasetId id) {
  const schema::DatasetSchema& d = schema::dataset(id);
  Series<T> s;
  s.path = d.path;
  if (d.type != schema_type<T>())
    throw std::logic_error("TrajectoryWriter: " + s.path + " is " + std::string(schema::type_name(d.type)) +
                           ", not " + std::string(schema::type_name(schema_type<T>())));
  const std::vector<std::string_view> axes = d.axes();
  if (axes.empty() || axes.front() != "step")
    throw std::logic_error("TrajectoryWriter: " + s.path + " has no step axis to append rows along");
  for (std::size_t i = 1; i < axes.size(); ++i) s.row_dims.push_back(axis_size(axes[i]));
  s.per_rank = d.per_rank();
  const std::size_t rank = 1 + s.row_dims.size();
  std::vector<hsize_t> cur(rank, 0), max(rank, H5S_UNLIMITED), chunk(rank, 1);
  for (std::size_t i = 1; i < rank; ++i) {
    cur[i] = s.row_dims[i - 1];
    // HDF5 wants 1 <= chunk <= max on fixed axes; an empty axis (no layers) gets room for one.
    max[i] = chunk[i] = std::max<hsize_t>(cur[i], 1);
  }
  const hsize_t row_bytes = product(chunk) * sizeof(T);
  chunk[0] = std::clamp<hsize_t>(kMaxChunkBytes / row_bytes, 1, static_cast<hsize_t>(layout_.chunk_steps));

  const h5::Dataspace space(h5::check(H5Screate_simple(static_cast<int>(rank), cur.data(), max.data()),
                                      "dataspace of " + s.path));
  const h5::Plist dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate(dataset)"));
  h5::check(H5Pset_chunk(dcpl, static_cast<int>(rank), chunk.data()), "H5Pset_chunk " + s.path);
  // Rows are always written before the extent covers them: filling chunks first would only cost I/O.
  h5::check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  s.dataset = h5::Dataset(h5::check(
      H5Dcreate2(file_, s.path.c_str(), file_type(d), space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
      "creating dataset '" + s.path + "'"));
  write_dataset_attrs(s.dataset, d.dims, d.description);

  s.local_row = static_cast<std::size_t>(s.per_rank ? product(s.row_dims, 1) * static_cast<hsize_t>(layout_.rank_count)
                                                    : product(s.row_dims));
  s.buffer.assign(static_cast<std::size_t>(capacity_) * s.local_row, T{});
  return s;
}

template <class T>
void TrajectoryWriter::put(Series<T>& s, const Block& b, std::span<const T> values) {
  if (values.size() != s.local_row)
    throw std::invalid_argument("TrajectoryWriter: " + s.path + " expects " + std::to_string(s.local_row) +
                                " values per step from this process, got " + std::to_string(values.size()));
  std::copy(values.begin(), values.end(), s.buffer.begin() + static_cast<std::ptrdiff_t>(b.pending * s.local_row));
}

template <class T>
void TrajectoryWriter::write_rows(Series<T>& s, const Block& b) {
  const std::size_t rank = 1 + s.row_dims.size();
  std::array<hsize_t, 4> dims{}, start{}, count{};  // at most [step, rank, layer, stat]
  dims[0] = b.written + b.pending;
  start[0] = b.written;
  count[0] = b.pending;
  for (std::size_t i = 1; i < rank; ++i) dims[i] = count[i] = s.row_dims[i - 1];
  check_collective(comm_, H5Dset_extent(s.dataset, dims.data()), "extending " + s.path);
  if (s.local_row == 0) return;  // an empty layer axis: nothing to write, on every process

  if (s.per_rank) {
    start[1] = static_cast<hsize_t>(layout_.rank_begin);
    count[1] = static_cast<hsize_t>(layout_.rank_count);
  }
  const hsize_t n = b.pending * s.local_row;
  const h5::Dataspace file_space(h5::check(H5Dget_space(s.dataset), "H5Dget_space " + s.path));
  const h5::Dataspace mem_space(h5::check(H5Screate_simple(1, &n, nullptr), "memory space of " + s.path));
  if (s.per_rank || proc_ == 0) {
    h5::check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
              "selecting rows of " + s.path);
  } else {  // rank-independent rows: process 0 writes them, the others take part with nothing
    h5::check(H5Sselect_none(file_space), "H5Sselect_none");
    h5::check(H5Sselect_none(mem_space), "H5Sselect_none");
  }
  check_collective(comm_, H5Dwrite(s.dataset, native_type<T>(), mem_space, file_space, collective_, s.buffer.data()),
                   "writing " + s.path + " to '" + partial_path_ + "'");
}

void TrajectoryWriter::require_open(const char* call) const {
  if (!file_) throw std::logic_error(std::string("TrajectoryWriter::") + call + " called after finish()");
}

void TrajectoryWriter::append_train(const TrainRow& row) {
  require_open("append_train");
  // A full block is written when the next step begins, so that the layer, eval and event records the
  // caller adds after a step's train row land in the same flush as that row.
  if (train_.pending == capacity_) flush();
  put(train_step_, train_, std::span<const std::int64_t>(&row.step, 1));
  put(global_loss_, train_, std::span<const double>(&row.global_loss, 1));
  const std::array<std::span<const double>, schema::kTrainColumns.size()> cols{
      row.loss, row.grad_norm_local, row.grad_norm, row.param_norm, row.lr, row.loss_scale};
  for (std::size_t i = 0; i < cols.size(); ++i) put(train_cols_[i], train_, cols[i]);
  put(param_hash_, train_, row.param_hash);
  if (layout_.record_samples) put(samples_, train_, row.samples);
  ++train_.pending;
}

void TrajectoryWriter::append_layers(std::int64_t step, std::span<const double> forward,
                                     std::span<const double> backward, std::span<const double> grad_norm) {
  require_open("append_layers");
  if (layers_.pending == capacity_) flush();  // only if called more often than once per train step
  put(layers_step_, layers_, std::span<const std::int64_t>(&step, 1));
  put(forward_, layers_, forward);
  put(backward_, layers_, backward);
  put(layer_grad_norm_, layers_, grad_norm);
  ++layers_.pending;
}

void TrajectoryWriter::append_eval(std::int64_t step, std::span<const double> loss,
                                   std::span<const double> accuracy) {
  require_open("append_eval");
  if (eval_.pending == capacity_) flush();  // only if called more often than once per train step
  put(eval_step_, eval_, std::span<const std::int64_t>(&step, 1));
  put(eval_loss_, eval_, loss);
  put(eval_accuracy_, eval_, accuracy);
  ++eval_.pending;
}

void TrajectoryWriter::add_event(std::int64_t step, int rank, const std::string& kind, const std::string& detail) {
  require_open("add_event");
  EventRecord e{};
  e.step = step;
  e.rank = rank;
  copy_truncated(kind, e.kind);
  copy_truncated(detail, e.detail);
  pending_events_.push_back(e);
}

void TrajectoryWriter::write_events() {
  int procs = 1;
  MPI_Comm_size(comm_, &procs);
  // Events are rare (fault activations, overflows): far below 2^31 bytes per flush.
  const int local_bytes = static_cast<int>(pending_events_.size() * sizeof(EventRecord));
  std::vector<int> bytes(proc_ == 0 ? static_cast<std::size_t>(procs) : 0), displs(bytes.size());
  MPI_Gather(&local_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, 0, comm_);
  std::vector<EventRecord> all;
  if (proc_ == 0) {
    int total = 0;
    for (std::size_t p = 0; p < bytes.size(); ++p) {
      displs[p] = total;
      total += bytes[p];
    }
    all.resize(static_cast<std::size_t>(total) / sizeof(EventRecord));
  }
  MPI_Gatherv(pending_events_.data(), local_bytes, MPI_BYTE, all.data(), bytes.data(), displs.data(), MPI_BYTE, 0,
              comm_);
  pending_events_.clear();
  std::stable_sort(all.begin(), all.end(), [](const EventRecord& a, const EventRecord& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });

  unsigned long long count = all.size();
  MPI_Bcast(&count, 1, MPI_UNSIGNED_LONG_LONG, 0, comm_);
  if (count == 0) return;
  const hsize_t first = events_written_, n = count, extent = first + n;
  check_collective(comm_, H5Dset_extent(events_, &extent), "extending /events");
  const h5::Dataspace file_space(h5::check(H5Dget_space(events_), "H5Dget_space /events"));
  const h5::Dataspace mem_space(h5::check(H5Screate_simple(1, &n, nullptr), "memory space of /events"));
  if (proc_ == 0) {
    h5::check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &first, nullptr, &n, nullptr), "selecting /events");
  } else {
    h5::check(H5Sselect_none(file_space), "H5Sselect_none");
    h5::check(H5Sselect_none(mem_space), "H5Sselect_none");
  }
  check_collective(comm_, H5Dwrite(events_, event_mem_type_, mem_space, file_space, collective_, all.data()),
                   "writing /events to '" + partial_path_ + "'");
  events_written_ = extent;
}

void TrajectoryWriter::write_array(const std::string& path, std::span<const float> values,
                                   const std::vector<std::int64_t>& shape, const std::string& dims,
                                   const std::string& description) {
  require_open("write_array");
  const schema::DatasetSchema& declared = schema::dataset(path);
  if (declared.id != schema::DatasetId::init)
    throw std::logic_error("TrajectoryWriter::write_array writes " +
                           std::string(schema::dataset(schema::DatasetId::init).path) + " arrays, not " + path);
  std::vector<hsize_t> file_shape;
  for (const auto d : shape) {
    if (d < 0) throw std::invalid_argument("TrajectoryWriter::write_array " + path + ": negative dimension");
    file_shape.push_back(static_cast<hsize_t>(d));
  }
  const hsize_t n = product(file_shape);
  if (values.size() != n)
    throw std::invalid_argument("TrajectoryWriter::write_array " + path + ": shape holds " + std::to_string(n) +
                                " values, got " + std::to_string(values.size()));
  if (journal_) {
    BytePacker a;
    if (proc_ == 0) {
      a.put_string(path);
      a.put_span(std::span<const std::int64_t>(shape));
      a.put_string(dims);
      a.put_string(description);
      a.put_span(values);
    }
    journal_->append(JournalKind::array, a.bytes());
  }
  const h5::Dataset dset = create_fixed(file_, path, file_type(declared), file_shape, dims, description);
  write_from_root(comm_, dset, H5T_NATIVE_FLOAT, values.data(), n, proc_, collective_, path, partial_path_);
}

// Every step-axis series with its block, in one fixed order: flush() writes them in it, the journal
// stores them in it, and recover() reads them back in it.
template <class Fn>
void TrajectoryWriter::for_each_series(Fn&& fn) {
  fn(train_, train_step_);
  fn(train_, global_loss_);
  for (auto& c : train_cols_) fn(train_, c);
  fn(train_, param_hash_);
  if (layout_.record_samples) fn(train_, samples_);
  fn(layers_, layers_step_);
  fn(layers_, forward_);
  fn(layers_, backward_);
  fn(layers_, layer_grad_norm_);
  fn(eval_, eval_step_);
  fn(eval_, eval_loss_);
  fn(eval_, eval_accuracy_);
}

void TrajectoryWriter::flush() {
  require_open("flush");
  // The journal first: a kill inside the HDF5 writes below then loses nothing of this flush.
  if (journal_) journal_->append(JournalKind::rows, rows_payload());
  for_each_series([this](const Block& b, auto& s) {
    if (b.pending > 0) write_rows(s, b);
  });
  for (Block* b : {&train_, &layers_, &eval_}) b->written += std::exchange(b->pending, 0);
  write_events();
  check_collective(comm_, H5Fflush(file_, H5F_SCOPE_GLOBAL), "flushing '" + partial_path_ + "'");
}

// Journal payloads. header: every process its rank slice; process 0 then the format version, the layout,
// the root attributes, the fault rows and /schedule/lr. rows: every process its pending row counts, its buffered rows of
// every series (for_each_series order) and its pending events.
std::vector<std::byte> TrajectoryWriter::header_payload(const RootAttributes& attrs,
                                                        const std::vector<FaultRow>& faults) const {
  BytePacker h;
  h.put<std::int64_t>(layout_.rank_begin);
  h.put<std::int64_t>(layout_.rank_count);
  if (proc_ != 0) return h.bytes();
  h.put(kJournalFormat);
  h.put<std::int64_t>(layout_.world_size);
  h.put(layout_.samples_per_step);
  h.put<std::uint8_t>(layout_.record_samples ? 1 : 0);
  h.put(layout_.chunk_steps);
  h.put(layout_.flush_every);
  h.put<std::uint64_t>(layout_.layer_names.size());
  for (const auto& n : layout_.layer_names) h.put_string(n);
  for (const std::string* s : {&attrs.divsim_version, &attrs.git_sha, &attrs.created, &attrs.config, &attrs.env})
    h.put_string(*s);
  h.put<std::uint64_t>(attrs.extra.size());
  for (const auto& [key, value] : attrs.extra) {
    h.put_string(key);
    h.put_string(value);
  }
  h.put<std::uint64_t>(faults.size());
  for (const FaultRow& f : faults) {
    for (const std::string* s : {&f.name, &f.ranks, &f.spec}) h.put_string(*s);
    h.put(f.start);
    h.put(f.stop);
    h.put(f.every);
    h.put(f.prob);
  }
  // The schedule goes last, into a payload sized once: train.steps, its length, must not change how
  // often the header allocates (mpi.step_allocations compares runs of two lengths).
  const std::span<const double> schedule(layout_.schedule_lr);
  BytePacker out;
  out.reserve(h.bytes().size() + sizeof(std::uint64_t) + schedule.size_bytes());
  out.put_bytes(h.bytes());
  out.put_span(schedule);
  return out.bytes();
}

std::vector<std::byte> TrajectoryWriter::rows_payload() {
  // Sized first: one allocation per flush however many rows it holds (growing by doubling would make the
  // count depend on the rows, which mpi.step_allocations reads as allocations in the step loop).
  std::size_t size = 5 * sizeof(std::uint64_t) + pending_events_.size() * sizeof(EventRecord);
  for_each_series([&size](const Block& b, auto& s) {
    size += sizeof(std::uint64_t) + static_cast<std::size_t>(b.pending) * s.local_row * sizeof(s.buffer[0]);
  });
  BytePacker r;
  r.reserve(size);
  for (const Block* b : {&train_, &layers_, &eval_}) r.put<std::uint64_t>(b->pending);
  for_each_series([&r](const Block& b, auto& s) {
    r.put_span(std::span(s.buffer.data(), static_cast<std::size_t>(b.pending) * s.local_row));
  });
  r.put_span(std::span<const EventRecord>(pending_events_));
  return r.bytes();
}

// Merges one journaled flush of every process into this (whole-world, single-process) writer's buffers,
// exactly as the processes' collective writes would have placed them, then flushes.
void TrajectoryWriter::replay_rows(const std::vector<std::vector<std::byte>>& payloads,
                                   const std::vector<RankSlice>& slices) {
  std::vector<ByteUnpacker> parts;
  for (std::size_t p = 0; p < payloads.size(); ++p)
    parts.emplace_back(payloads[p], "journal rows of process " + std::to_string(p));
  std::array<hsize_t, 3> pending{};
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (hsize_t& n : pending) {
      const auto v = parts[p].get<std::uint64_t>();
      if (p > 0 && v != n) throw IoError("journal: the processes disagree on the rows of a flush");
      if (v > capacity_) throw IoError("journal: a flush holds more rows than record.flush_every");
      n = v;
    }
  train_.pending = pending[0];
  layers_.pending = pending[1];
  eval_.pending = pending[2];
  const auto W = static_cast<std::size_t>(layout_.world_size);
  for_each_series([&](const Block& b, auto& s) {
    using T = typename decltype(s.buffer)::value_type;
    const std::size_t unit = s.per_rank ? s.local_row / W : s.local_row;  // values per rank (per row if not per rank)
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const std::size_t width = s.per_rank ? unit * static_cast<std::size_t>(slices[p].count) : s.local_row;
      const std::vector<T> v = parts[p].template get_vector<T>();
      if (v.size() != b.pending * width) throw IoError("journal: " + s.path + " has the wrong number of values");
      if (!s.per_rank && p > 0) continue;  // rank-independent rows: every process holds the same
      const std::size_t at = s.per_rank ? unit * static_cast<std::size_t>(slices[p].begin) : 0;
      for (std::size_t row = 0; row < b.pending; ++row)
        std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(row * width), width,
                    s.buffer.begin() + static_cast<std::ptrdiff_t>(row * s.local_row + at));
    }
  });
  for (auto& part : parts) {
    const std::vector<EventRecord> events = part.get_vector<EventRecord>();
    pending_events_.insert(pending_events_.end(), events.begin(), events.end());
    if (!part.done()) throw IoError("journal: a rows record holds more than this divsim version reads");
  }
  flush();
}

TrajectoryWriter::Recovery TrajectoryWriter::recover(const std::string& journal, const std::string& out_path) {
  const JournalContents j = read_journal(journal);
  if (j.groups.empty() || j.groups.front().kind != JournalKind::header)
    throw IoError("the journal '" + journal + "' holds no complete header (" + j.stop + "): nothing to recover");
  const auto& head = j.groups.front().payloads;
  std::vector<RankSlice> slices;
  std::int64_t next_rank = 0;
  for (std::size_t p = 0; p < head.size(); ++p) {
    ByteUnpacker h(head[p], "journal header of process " + std::to_string(p));
    const RankSlice s{h.get<std::int64_t>(), h.get<std::int64_t>()};
    if (s.begin != next_rank || s.count < 1) throw IoError("journal: the processes' rank slices do not tile the world");
    next_rank += s.count;
    slices.push_back(s);
  }
  ByteUnpacker h(head.front(), "journal header");
  h.get<std::int64_t>();
  h.get<std::int64_t>();
  if (const auto format = h.get<std::uint32_t>(); format != kJournalFormat)
    throw IoError("the journal '" + journal + "' has format " + std::to_string(format) + "; this divsim reads format " +
                  std::to_string(kJournalFormat));
  TrajectoryLayout layout;
  layout.world_size = static_cast<int>(h.get<std::int64_t>());
  if (layout.world_size != next_rank) throw IoError("journal: the rank slices do not add up to the world size");
  layout.rank_begin = 0;
  layout.rank_count = layout.world_size;
  layout.samples_per_step = h.get<std::int64_t>();
  layout.record_samples = h.get<std::uint8_t>() != 0;
  layout.chunk_steps = h.get<std::int64_t>();
  layout.flush_every = h.get<std::int64_t>();
  layout.layer_names.resize(h.get<std::uint64_t>());
  for (auto& n : layout.layer_names) n = h.get_string();
  RootAttributes attrs;
  for (std::string* s : {&attrs.divsim_version, &attrs.git_sha, &attrs.created, &attrs.config, &attrs.env})
    *s = h.get_string();
  for (auto n = h.get<std::uint64_t>(); n > 0; --n) {
    std::string key = h.get_string();
    attrs.extra[key] = h.get_string();
  }
  std::vector<FaultRow> faults(h.get<std::uint64_t>());
  for (FaultRow& f : faults) {
    for (std::string* s : {&f.name, &f.ranks, &f.spec}) *s = h.get_string();
    f.start = h.get<std::int64_t>();
    f.stop = h.get<std::int64_t>();
    f.every = h.get<std::int64_t>();
    f.prob = h.get<double>();
  }
  layout.schedule_lr = h.get_vector<double>();

  Recovery r;
  r.stop = j.stop;
  for (const JournalGroup& g : j.groups)
    if (g.kind == JournalKind::rows) {
      ++r.flushes;
      r.steps += static_cast<std::int64_t>(ByteUnpacker(g.payloads.front(), "journal rows").get<std::uint64_t>());
    }
  attrs.extra[attribute_name(schema::AttributeId::recovered)] =
      "rebuilt by divsim recover (an unfinished run) from '" + journal + "': " + std::to_string(r.steps) +
      " steps in " + std::to_string(r.flushes) + " complete flushes (journal: " + j.stop + ")";
  TrajectoryWriter w(MPI_COMM_SELF, out_path, true, layout, attrs, faults, false);
  for (std::size_t i = 1; i < j.groups.size(); ++i) {
    const JournalGroup& g = j.groups[i];
    if (g.kind == JournalKind::rows) {
      w.replay_rows(g.payloads, slices);
    } else if (g.kind == JournalKind::array) {
      ByteUnpacker a(g.payloads.front(), "journal array");
      const std::string path = a.get_string();
      const std::vector<std::int64_t> shape = a.get_vector<std::int64_t>();
      const std::string dims = a.get_string(), description = a.get_string();
      w.write_array(path, a.get_vector<float>(), shape, dims, description);
    } else {
      throw IoError("journal: a second header at group " + std::to_string(i));
    }
  }
  w.finish();
  return r;
}

void TrajectoryWriter::finish() {
  require_open("finish");
  flush();
  // The MPI-IO driver closes a file only once nothing in it is open.
  for_each_series([](const Block&, auto& s) { s.dataset.reset(); });
  events_.reset();
  check_collective(comm_, H5Fclose(file_.release()), "closing '" + partial_path_ + "'");
  // Nothing HDF5 stays held, so a finished writer may even outlive MPI_Finalize (which closes HDF5).
  collective_.reset();
  event_mem_type_.reset();
  event_file_type_.reset();

  std::string problem;
  if (proc_ == 0) {
    std::error_code ec;
    fs::rename(partial_path_, final_path_, ec);
    if (ec) problem = "cannot rename '" + partial_path_ + "' to '" + final_path_ + "': " + ec.message();
  }
  // Process 0 renames before it broadcasts: when this returns, the final file exists on every process.
  problem = broadcast_string(comm_, problem);
  if (!problem.empty()) throw IoError(problem);
  if (journal_) {
    journal_->remove();
    journal_.reset();
  }
}

}  // namespace divsim
