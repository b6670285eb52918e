#include "train/run_output.hpp"

#include <ctime>
#include <filesystem>
#include <sstream>

#include "config/options.hpp"
#include "model/activation_stats.hpp"
#include "record/environment.hpp"
#include "record/io_error.hpp"
#include "record/json.hpp"
#include "record/recorded_run.hpp"

namespace divsim {
namespace {

// The HDF5 dims attribute of a parameter tensor in PyTorch's layout.
std::string tensor_dims(const ParamTensor& t) {
  switch (t.shape.size()) {
    case 1: return "feature";
    case 2: return "out,in";
    case 4: return "out,in,kh,kw";
    default: return "dim" + std::to_string(t.shape.size());
  }
}

// The state_dict key split at its last dot, module / parameter as PyTorch nests them
// (/init/transformer.wte/weight for a layer "transformer" with a tensor "wte.weight").
std::string init_path(const ParamTensor& t) {
  const std::string key = t.key();
  const std::size_t dot = key.rfind('.');
  return "/init/" + key.substr(0, dot) + "/" + key.substr(dot + 1);
}

void write_init(TrajectoryWriter& writer, const ParamTensor& t, std::span<const float> values) {
  writer.write_array(init_path(t), values, t.shape, tensor_dims(t),
                     "rank 0's initial " + t.key() + " (PyTorch layout), before step 0");
}

std::string iso_time_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

RootAttributes root_attributes(const OutputPlan& p) {
  RootAttributes attrs = environment_attributes(p.comm);
  attrs.config = to_ini(p.cfg);
  attrs.extra["model"] = p.model.to_json(p.cfg.model.type);
  attrs.extra["data"] = p.data.description;
  const std::vector<std::string>& vocabulary = p.data.train.vocabulary;
  if (!vocabulary.empty()) {
    std::string v = "[";
    for (std::size_t i = 0; i < vocabulary.size(); ++i) v += (i ? ", " : "") + json_string(vocabulary[i]);
    attrs.extra["vocabulary"] = v + "]";
  }
  return attrs;
}

std::string resume_source(const RunConfig& cfg) { return cfg.output_path() + ".resume-src"; }

// The rows of the interrupted run up to its checkpoint, appended in the order the run appended them.
void replay(const OutputPlan& p, TrajectoryWriter& writer) {
  const CheckpointManifest& m = *p.resume;
  const std::string source = resume_source(p.cfg);
  const RecordedRun old = read_recorded_run(source, p.layout, m.train_rows, m.layer_rows, m.eval_rows);
  const auto R = static_cast<std::size_t>(p.layout.rank_count), L = p.layout.layer_names.size();
  const auto B = static_cast<std::size_t>(p.layout.samples_per_step);
  auto slice = [](const auto& v, std::size_t row, std::size_t width) {
    return std::span(v.data() + row * width, width);
  };
  if (p.cfg.record.init_params)
    for (const ParamTensor& t : p.model.tensors()) write_init(writer, t, read_recorded_array(source, init_path(t), t.size));
  std::size_t e = 0, lrow = 0, erow = 0;
  for (std::size_t row = 0; row < static_cast<std::size_t>(old.rows); ++row) {
    const std::int64_t step = old.step[row];
    for (; e < old.events.size() && old.events[e].step == step; ++e)
      if (p.process == 0) writer.add_event(step, old.events[e].rank, old.events[e].kind, old.events[e].detail);
    writer.append_train(TrainRow{step, old.global_loss[row], slice(old.cols[0], row, R), slice(old.cols[1], row, R),
                                 slice(old.cols[2], row, R), slice(old.cols[3], row, R), slice(old.cols[4], row, R),
                                 slice(old.cols[5], row, R), slice(old.param_hash, row, R),
                                 p.layout.record_samples ? slice(old.samples, row, R * B) : std::span<const std::int64_t>()});
    if (lrow < old.layer_step.size() && old.layer_step[lrow] == step) {
      writer.append_layers(step, slice(old.forward, lrow, R * L * kStatCount), slice(old.backward, lrow, R * L * kStatCount),
                           slice(old.layer_grad_norm, lrow, R * L));
      ++lrow;
    }
    if (erow < old.eval_step.size() && old.eval_step[erow] == step) {
      writer.append_eval(step, slice(old.eval_loss, erow, R), slice(old.eval_accuracy, erow, R));
      ++erow;
    }
  }
}

}  // namespace

std::unique_ptr<TrajectoryWriter> open_output(const OutputPlan& p) {
  RootAttributes attrs = root_attributes(p);
  std::string created = p.process == 0 ? iso_time_utc() : std::string();
  created.resize(32);
  MPI_Bcast(created.data(), 32, MPI_CHAR, 0, p.comm);
  attrs.created = created.c_str();
  const std::string& out = p.cfg.output_path();
  if (!p.resume) return std::make_unique<TrajectoryWriter>(p.comm, out, p.cfg.run.overwrite, p.layout, attrs, p.faults);

  // Resume: the interrupted .partial becomes the replay source (unless an earlier resume already moved
  // it and was interrupted itself), its rows up to the checkpoint go through a new writer, then it goes.
  namespace fs = std::filesystem;
  const std::string source = resume_source(p.cfg);
  if (p.process == 0 && !fs::exists(source)) {
    std::error_code ec;
    fs::rename(out + ".partial", source, ec);
    if (ec) throw IoError("cannot resume: the trajectory '" + out + ".partial' is missing (" + ec.message() + ")");
  }
  MPI_Barrier(p.comm);
  attrs.created = read_recorded_run(source, p.layout, 0, 0, 0).created;
  auto writer = std::make_unique<TrajectoryWriter>(p.comm, out, p.cfg.run.overwrite, p.layout, attrs, p.faults);
  replay(p, *writer);
  writer->flush();
  if (p.process == 0) fs::remove(source);
  return writer;
}

void write_initial_parameters(TrajectoryWriter& writer, const Model& model, std::span<const float> params) {
  for (const ParamTensor& t : model.tensors()) write_init(writer, t, params.subspan(t.offset, t.size));
}

std::string config_identity(const RunConfig& cfg) {
  std::string ini = to_ini(cfg), out;
  std::istringstream in(ini);
  for (std::string line; std::getline(in, line);)
    if (!line.starts_with("resume =")) out += line + "\n";
  return out;
}

}  // namespace divsim
