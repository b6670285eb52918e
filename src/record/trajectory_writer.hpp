#pragma once
// TrajectoryWriter: writes one run's per-rank trajectories to one HDF5 file (schema v1, the contract
// with the notebooks, declared in record/schema.hpp: every dataset's path, type, axes and `dims` and
// `description` attributes come from there), collectively from all processes with parallel HDF5.
//
// Rows are buffered in memory blocks allocated once and written every `flush_every` train steps with
// one collective write per dataset, each process selecting its own logical ranks. The file is written
// as "<final>.partial" and renamed only by finish(), so a final name always means a complete run.
// It does not decide what to record or when (the train loop does), and it reads back only its journal.
//
// Kill safety: before each flush writes to the HDF5 file, every process appends what it is about to
// write to "<final>.journal" (record/journal.hpp); the file creation and write_array() are journaled
// too. A job killed at any moment, even inside an HDF5 flush, leaves a journal from which recover()
// (tools/divsim-recover) rebuilds every row of every complete flush. finish() deletes the journal.
// A collective HDF5 write that fails (disk full, quota) ends the whole job with exit 3 rather than leave
// the other processes waiting inside HDF5.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "record/h5.hpp"
#include "record/io_error.hpp"
#include "record/journal.hpp"
#include "record/schema.hpp"

namespace divsim {

struct TrajectoryLayout {
  int world_size = 1;                    // logical ranks W
  int rank_begin = 0, rank_count = 1;    // this process's logical ranks
  std::int64_t samples_per_step = 0;     // B; used when record_samples
  bool record_samples = false;
  std::vector<std::string> layer_names;  // L
  std::int64_t chunk_steps = 256;        // chunk length along the step axis
  std::int64_t flush_every = 100;        // write buffered rows + H5Fflush every N appended train steps
  std::vector<double> schedule_lr;       // /schedule/lr: the configured learning rate of every step (T)
};

struct RootAttributes {  // written to / as attributes (all processes pass identical values)
  std::string divsim_version, git_sha, created /*ISO 8601 UTC*/, config /*effective INI*/, env /*multi-line text*/;
  std::map<std::string, std::string> extra;  // further string attributes the schema declares (e.g. slurm_job_id)
};

struct FaultRow {
  std::string name, ranks, spec;
  std::int64_t start, stop, every;
  double prob;
};

struct TrainRow {  // one optimizer step, this process's logical ranks (each span has rank_count entries)
  std::int64_t step;
  double global_loss;
  std::span<const double> loss, grad_norm_local, grad_norm, param_norm, lr, loss_scale;  // schema::kTrainColumns
  std::span<const std::uint64_t> param_hash;
  std::span<const std::int64_t> samples;  // rank_count * B (ignored unless record_samples)
};

class TrajectoryWriter {
 public:
  static constexpr std::size_t kEventKindSize = 32;     // bytes of /events kind (longer is truncated)
  static constexpr std::size_t kEventDetailSize = 224;  // bytes of /events detail (longer is truncated)

  // Collective over comm. Refuses an existing final path unless overwrite (IoError naming it, checked
  // before anything is created); creates missing parent folders and "<final_path>.partial" (MPI-IO
  // driver) with the root attributes, every dataset of the schema, /layers/names and /faults.
  // Throws std::invalid_argument for an inconsistent layout, std::logic_error for an extra attribute
  // the schema does not declare.
  TrajectoryWriter(MPI_Comm comm, const std::string& final_path, bool overwrite, const TrajectoryLayout& layout,
                   const RootAttributes& attrs, const std::vector<FaultRow>& faults);
  // Without finish(): closes the file and leaves the .partial holding every flushed row (never renames;
  // unflushed rows are dropped). Closing is collective; while an exception unwinds (perhaps on this
  // process alone) nothing is closed, so that it cannot hang: the catcher ends the job or finalizes.
  ~TrajectoryWriter();
  TrajectoryWriter(const TrajectoryWriter&) = delete;
  TrajectoryWriter& operator=(const TrajectoryWriter&) = delete;

  // Collective: every process calls it once per recorded step, in step order. When flush_every rows
  // are buffered, the next call flushes them first (with the layer, eval and event records added
  // since), so one flush holds whole steps.
  void append_train(const TrainRow& row);
  // Collective. forward/backward: rank_count*L*5 values (rank, layer, stat), grad_norm: rank_count*L.
  void append_layers(std::int64_t step, std::span<const double> forward, std::span<const double> backward,
                     std::span<const double> grad_norm);
  // Collective. rank_count values each.
  void append_eval(std::int64_t step, std::span<const double> loss, std::span<const double> accuracy);
  // Local (not collective): buffered and written, sorted by (step, rank), at the next flush.
  void add_event(std::int64_t step, int rank, const std::string& kind, const std::string& detail);
  // Collective: a float32 dataset of the given shape at the absolute `path` (intermediate groups are
  // created), one of the schema's /init/<layer>/<param> (std::logic_error otherwise); `dims` and
  // `description` are the tensor's own. Every process passes product(shape) values; process 0's are
  // written.
  void write_array(const std::string& path, std::span<const float> values, const std::vector<std::int64_t>& shape,
                   const std::string& dims, const std::string& description);
  // Collective: journal every buffered row and event, write them, then H5Fflush (the file on disk is
  // then readable and holds every appended step).
  void flush();
  // Collective: flush, close, rename .partial -> final path (process 0). Returns once the final file
  // exists; the writer accepts no further calls.
  void finish();
  std::string partial_path() const;

  struct Recovery {
    std::int64_t steps = 0;   // train rows recovered
    std::size_t flushes = 0;  // complete flushes found in the journal
    std::string stop;         // why reading the journal stopped
  };
  // Rebuilds a killed run's trajectory from its journal into `out_path` (via "<out_path>.partial",
  // replacing an existing out_path): the run's attributes, /faults, /init arrays and every row and
  // event of every complete flush, bit for bit, plus the root attribute `recovered`. Runs on the calling
  // process alone (MPI_COMM_SELF; MPI must be initialised). Throws IoError.
  static Recovery recover(const std::string& journal, const std::string& out_path);

 private:
  // One /events row; also the record gathered between processes at flush (trivially copyable).
  struct EventRecord {
    std::int64_t step;
    std::int32_t rank;
    std::array<char, kEventKindSize> kind;
    std::array<char, kEventDetailSize> detail;
  };
  // One dataset whose axis 0 is the step axis, plus this process's buffered rows for it.
  template <class T>
  struct Series {
    h5::Dataset dataset;
    std::string path;               // for error messages
    std::vector<hsize_t> row_dims;  // file dims after the step axis
    bool per_rank = true;           // axis 1 is the rank axis and each process writes its own slice
    std::size_t local_row = 0;      // values this process buffers per row
    std::vector<T> buffer;          // capacity rows * local_row, allocated once
  };
  // Rows of several series appended together (train, layers, eval).
  struct Block {
    hsize_t written = 0;  // rows on disk
    hsize_t pending = 0;  // rows buffered
  };

  struct RankSlice {
    std::int64_t begin, count;  // logical ranks of one process
  };
  TrajectoryWriter(MPI_Comm comm, const std::string& final_path, bool overwrite, const TrajectoryLayout& layout,
                   const RootAttributes& attrs, const std::vector<FaultRow>& faults, bool journal);
  template <class Fn>
  void for_each_series(Fn&& fn);
  std::vector<std::byte> header_payload(const RootAttributes& attrs, const std::vector<FaultRow>& faults) const;
  std::vector<std::byte> rows_payload();
  void replay_rows(const std::vector<std::vector<std::byte>>& payloads, const std::vector<RankSlice>& slices);
  // The size of an axis of the schema's `dims` in this writer's layout.
  hsize_t axis_size(std::string_view axis) const;
  // Creates a step-axis dataset as the schema declares it; T must be its type.
  template <class T>
  Series<T> make_series(schema::DatasetId id);
  template <class T>
  void put(Series<T>& s, const Block& b, std::span<const T> values);
  template <class T>
  void write_rows(Series<T>& s, const Block& b);
  void write_events();
  void require_open(const char* call) const;

  MPI_Comm comm_;
  int proc_ = 0;  // this process's index in comm
  std::string final_path_, partial_path_;
  TrajectoryLayout layout_;
  hsize_t capacity_ = 0;  // rows per buffered block (= flush_every)

  // Declared before every dataset: members are destroyed in reverse order, and the MPI-IO driver
  // refuses to close a file whose datasets are still open.
  h5::File file_;
  h5::Plist collective_;  // dataset transfer: collective MPI-IO
  h5::Datatype event_mem_type_, event_file_type_;

  Block train_, layers_, eval_;
  Series<std::int64_t> train_step_, layers_step_, eval_step_;
  Series<double> global_loss_;
  std::array<Series<double>, schema::kTrainColumns.size()> train_cols_;  // in kTrainColumns' order
  Series<std::uint64_t> param_hash_;
  Series<std::int64_t> samples_;  // only if record_samples
  Series<double> forward_, backward_, layer_grad_norm_;
  Series<double> eval_loss_, eval_accuracy_;
  h5::Dataset events_;
  hsize_t events_written_ = 0;
  std::vector<EventRecord> pending_events_;
  std::unique_ptr<JournalWriter> journal_;  // null in recover()'s own writer
  int uncaught_ = std::uncaught_exceptions();  // exceptions in flight when the writer was made
};

}  // namespace divsim
