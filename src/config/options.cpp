// Command line + INI files -> validated RunConfig, and RunConfig -> INI.
//
// One table (fields()) lists every key with its parser, printer and one-line meaning; the Boost option
// descriptions, the help text, the file/command-line appliers and to_ini() are all generated from it,
// so a new RunConfig member needs exactly one new row here. Boost tokenizes (files and argv); the
// layering, typed parsing and every error message are ours, so that each error names the key, the
// file and what is allowed. World-size dependent checks live in train/, fault semantics in faults/.
#include "config/options.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/option_grammar.hpp"
#include "divsim_version.hpp"
#include "faults/fault_spec.hpp"

namespace divsim {

ConfigError::ConfigError(std::string key, const std::string& problem)
    : std::runtime_error(key + ": " + problem), key_(std::move(key)) {}

namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

// The problem part of a ConfigError, to re-throw it with where the value came from.
std::string problem_of(const ConfigError& e) { return std::string(e.what()).substr(e.key().size() + 2); }

// Shortest text that parses back to the same double (std::to_chars' round-trip guarantee).
std::string format_double(double v) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::uint64_t parse_uint64(const std::string& key, std::string_view text) {
  const std::string_view t = trim(text);
  if (!t.empty() && t.front() == '-') throw ConfigError(key, in_quotes(text) + " is negative; expected an integer >= 0");
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw ConfigError(key, in_quotes(text) + " does not fit an unsigned 64-bit integer");
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size())
    throw ConfigError(key, in_quotes(text) + " is not an integer; expected a whole number >= 0 such as 42");
  return v;
}

std::vector<std::int64_t> parse_widths(const std::string& key, std::string_view text) {
  std::vector<std::int64_t> widths;
  std::string_view rest = trim(text);
  if (rest.empty()) return widths;  // no hidden layer: logistic regression
  while (true) {
    const auto comma = rest.find(',');
    try {
      widths.push_back(parse_int64(key, rest.substr(0, comma)));
    } catch (const ConfigError& e) {
      throw ConfigError(key, in_quotes(text) + " is not a comma-separated list of widths such as 256,128 (" +
                                 problem_of(e) + ")");
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return widths;
}

// How each member type is parsed from and printed to text.
template <class T>
struct Value;
template <>
struct Value<std::string> {
  static constexpr const char* kind = "TEXT";
  static std::string parse(const std::string&, const std::string& t) { return t; }
  static std::string print(const std::string& v) { return v; }
};
template <>
struct Value<bool> {
  static constexpr const char* kind = "BOOL";
  static bool parse(const std::string& k, const std::string& t) { return parse_bool(k, t); }
  static std::string print(bool v) { return v ? "true" : "false"; }
};
template <>
struct Value<double> {
  static constexpr const char* kind = "NUM";
  static double parse(const std::string& k, const std::string& t) { return parse_double(k, t); }
  static std::string print(double v) { return format_double(v); }
};
template <>
struct Value<std::int64_t> {
  static constexpr const char* kind = "INT";
  static std::int64_t parse(const std::string& k, const std::string& t) { return parse_int64(k, t); }
  static std::string print(std::int64_t v) { return std::to_string(v); }
};
template <>
struct Value<std::uint64_t> {
  static constexpr const char* kind = "UINT";
  static std::uint64_t parse(const std::string& k, const std::string& t) { return parse_uint64(k, t); }
  static std::string print(std::uint64_t v) { return std::to_string(v); }
};
template <>
struct Value<std::vector<std::int64_t>> {
  static constexpr const char* kind = "W1,W2,..";
  static std::vector<std::int64_t> parse(const std::string& k, const std::string& t) { return parse_widths(k, t); }
  static std::string print(const std::vector<std::int64_t>& v) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(v[i]);
    }
    return out;
  }
};

template <class E>
  requires std::is_enum_v<E>
struct Value<E> {
  static constexpr const char* kind = "CHOICE";
  static E parse(const std::string& k, const std::string& t) {
    if (const std::optional<E> e = enum_from<E>(t)) return *e;
    std::string list;
    for (const auto& [value, name] : EnumNames<E>::values) list += (list.empty() ? "" : ", ") + std::string(name);
    throw ConfigError(k, in_quotes(t) + " is not one of: " + list);
  }
  static std::string print(E v) { return std::string(name_of(v)); }
};

struct Section {
  const char* name;
  const char* title;
};

// Section order of --help and to_ini().
constexpr Section kSections[] = {
    {"run", "run identity and output"},
    {"data", "dataset"},
    {"model", "model (mlp, resnet, vit, gpt)"},
    {"loss", "loss function"},
    {"optim", "optimizer"},
    {"schedule", "learning-rate schedule"},
    {"batch", "batch size and gradient accumulation"},
    {"train", "length and evaluation"},
    {"sampler", "data sampler (PyTorch DistributedSampler semantics)"},
    {"dist", "data-parallel synchronisation (PyTorch DDP vocabulary)"},
    {"precision", "arithmetic precision"},
    {"record", "HDF5 trajectory recording"},
};

struct Field {
  std::string section;
  std::string name;  // "section.key"
  const char* kind;
  const char* meaning;
  std::function<void(RunConfig&, const std::string&)> set;  // throws ConfigError(name, ...)
  std::function<std::string(const RunConfig&)> get;
};

template <class S, class T>
Field field(const char* section, const char* key, S RunConfig::*sec, T S::*member, const char* meaning) {
  const std::string name = std::string(section) + "." + key;
  return Field{section, name, Value<T>::kind, meaning,
               [name, sec, member](RunConfig& c, const std::string& text) {
                 (c.*sec).*member = Value<T>::parse(name, text);
               },
               [sec, member](const RunConfig& c) { return Value<T>::print((c.*sec).*member); }};
}

// Every key, grouped in kSections order. A RunConfig member without a row here cannot be configured.
const std::vector<Field>& fields() {
  using R = RunConfig;
  static const std::vector<Field> table = {
      field("run", "name", &R::run, &RunSection::name, "run name ([A-Za-z0-9._-]); default output outputs/<name>.h5"),
      field("run", "out", &R::run, &RunSection::out, "output HDF5 path; empty = outputs/<run.name>.h5"),
      field("run", "overwrite", &R::run, &RunSection::overwrite, "replace an existing output file"),
      field("run", "seed", &R::run, &RunSection::seed, "base key of every random stream"),
      field("run", "device", &R::run, &RunSection::device, "cpu | cuda (GPU build, one GPU per rank)"),
      field("run", "checkpoint_every", &R::run, &RunSection::checkpoint_every,
            "checkpoint every N steps into <out>.ckpt/ (0: only when SIGTERM arrives)"),
      field("run", "resume", &R::run, &RunSection::resume, "no | auto: continue from the newest checkpoint, if any"),
      field("data", "source", &R::data, &DataSection::source,
            "fashion-mnist | synthetic | hdf5 | fortunes (Debian's fortunes, characters) | text (data.path, characters)"),
      field("data", "root", &R::data, &DataSection::root, "folder of the Fashion-MNIST IDX files"),
      field("data", "path", &R::data, &DataSection::path,
            "hdf5: the data file, with /train/x, /train/y, /test/x, /test/y; text: a UTF-8 text file"),
      field("data", "train_size", &R::data, &DataSection::train_size, "first N training samples; 0 = all"),
      field("data", "test_size", &R::data, &DataSection::test_size, "first N test samples; 0 = all"),
      field("data", "augment", &R::data, &DataSection::augment, "random horizontal flip + shift by <= 2 pixels"),
      field("data", "synthetic_train", &R::data, &DataSection::synthetic_train, "synthetic: training samples"),
      field("data", "synthetic_test", &R::data, &DataSection::synthetic_test, "synthetic: test samples"),
      field("data", "synthetic_features", &R::data, &DataSection::synthetic_features, "synthetic: input features"),
      field("data", "synthetic_classes", &R::data, &DataSection::synthetic_classes, "synthetic: classes (>= 2)"),
      field("data", "synthetic_teacher_hidden", &R::data, &DataSection::synthetic_teacher_hidden,
            "synthetic: hidden width of the teacher network"),
      field("model", "type", &R::model, &ModelSection::type, "the model (docs/models.md): mlp | resnet | vit | gpt"),
      field("model", "hidden", &R::model, &ModelSection::hidden, "hidden widths, e.g. 256,128; empty = logistic regression"),
      field("model", "batchnorm", &R::model, &ModelSection::batchnorm, "BatchNorm1d after each hidden Linear"),
      field("model", "dropout", &R::model, &ModelSection::dropout,
            "drop probability, [0,1): mlp after each hidden ReLU; vit, gpt after the attention and MLP projections"),
      field("model", "bn_momentum", &R::model, &ModelSection::bn_momentum, "running = (1-m)*running + m*batch, [0,1]"),
      field("model", "bn_eps", &R::model, &ModelSection::bn_eps, "BatchNorm epsilon, > 0"),
      field("model", "channels", &R::model, &ModelSection::channels, "resnet: channels per stage, e.g. 16,32,64"),
      field("model", "blocks", &R::model, &ModelSection::blocks, "resnet: basic blocks per stage"),
      field("model", "patch", &R::model, &ModelSection::patch, "vit: patch side in pixels; must divide the image side"),
      field("model", "dim", &R::model, &ModelSection::dim, "vit, gpt: token width"),
      field("model", "heads", &R::model, &ModelSection::heads, "vit, gpt: attention heads; must divide model.dim"),
      field("model", "depth", &R::model, &ModelSection::depth, "vit, gpt: transformer blocks"),
      field("model", "mlp_ratio", &R::model, &ModelSection::mlp_ratio, "vit, gpt: MLP hidden width as a multiple of model.dim"),
      field("model", "block_size", &R::model, &ModelSection::block_size, "gpt: tokens per sequence (context length)"),
      field("loss", "type", &R::loss, &LossSection::type, "cross_entropy | asl (asymmetric loss, multi-label one-hot)"),
      field("loss", "label_smoothing", &R::loss, &LossSection::label_smoothing, "PyTorch label_smoothing, [0,1)"),
      field("loss", "gamma_pos", &R::loss, &LossSection::gamma_pos, "asl: positive focusing exponent, >= 0"),
      field("loss", "gamma_neg", &R::loss, &LossSection::gamma_neg, "asl: negative focusing exponent, >= 0"),
      field("loss", "margin", &R::loss, &LossSection::margin, "asl: probability margin on negatives, [0,1)"),
      field("optim", "type", &R::optim, &OptimSection::type, "sgd | adamw"),
      field("optim", "lr", &R::optim, &OptimSection::lr, "peak learning rate, > 0"),
      field("optim", "momentum", &R::optim, &OptimSection::momentum, "sgd momentum, [0,1)"),
      field("optim", "nesterov", &R::optim, &OptimSection::nesterov, "sgd Nesterov momentum (needs momentum > 0)"),
      field("optim", "weight_decay", &R::optim, &OptimSection::weight_decay, "L2 (sgd) or decoupled (adamw) decay, >= 0"),
      field("optim", "beta1", &R::optim, &OptimSection::beta1, "adamw beta1, [0,1)"),
      field("optim", "beta2", &R::optim, &OptimSection::beta2, "adamw beta2, [0,1)"),
      field("optim", "eps", &R::optim, &OptimSection::eps, "adamw epsilon, > 0"),
      field("optim", "clip_norm", &R::optim, &OptimSection::clip_norm, "clip the global gradient L2 norm; 0 = off"),
      field("schedule", "type", &R::schedule, &ScheduleSection::type, "constant | step | cosine"),
      field("schedule", "warmup_steps", &R::schedule, &ScheduleSection::warmup_steps, "linear warm-up steps"),
      field("schedule", "step_size", &R::schedule, &ScheduleSection::step_size, "step: decay every N steps, >= 1"),
      field("schedule", "gamma", &R::schedule, &ScheduleSection::gamma, "step: decay factor, (0,1]"),
      field("schedule", "min_lr", &R::schedule, &ScheduleSection::min_lr, "cosine: floor, in [0, optim.lr]"),
      field("batch", "global", &R::batch, &BatchSection::global, "global batch per optimizer step, >= 1"),
      field("batch", "per_rank", &R::batch, &BatchSection::per_rank, "if > 0: fixed per-rank micro-batch instead"),
      field("batch", "accum_steps", &R::batch, &BatchSection::accum_steps, "micro-batches per optimizer step, >= 1"),
      field("batch", "max_micro", &R::batch, &BatchSection::max_micro,
            "if > 0: largest per-rank micro-batch; accum_steps is raised per world size to fit (0 = off)"),
      field("batch", "drop_last", &R::batch, &BatchSection::drop_last, "drop the epoch tail instead of wrapping around"),
      field("batch", "lr_scaling", &R::batch, &BatchSection::lr_scaling, "none | linear: lr *= global / base_global"),
      field("batch", "base_global", &R::batch, &BatchSection::base_global, "global batch optim.lr was tuned for, >= 1"),
      field("train", "steps", &R::train, &TrainSection::steps, "optimizer steps; 0 = from train.epochs"),
      field("train", "epochs", &R::train, &TrainSection::epochs, "epochs when train.steps = 0"),
      field("train", "eval_every", &R::train, &TrainSection::eval_every, "evaluate every N steps; 0 = only at the end"),
      field("train", "on_nonfinite", &R::train, &TrainSection::on_nonfinite,
            "NaN/Inf in loss or gradients: stop (exit 4) | skip (the update) | record (only /events)"),
      field("sampler", "mode", &R::sampler, &SamplerSection::mode, "distributed | global_batch"),
      field("sampler", "shuffle", &R::sampler, &SamplerSection::shuffle, "reshuffle every epoch"),
      field("sampler", "seed", &R::sampler, &SamplerSection::seed, "sampler seed (shuffled with seed + epoch)"),
      field("dist", "reduce", &R::dist, &DistSection::reduce, "gradient reduction: mpi | ring | deterministic"),
      field("dist", "backend", &R::dist, &DistSection::backend, "mpi | nccl (needs run.device=cuda)"),
      field("dist", "bucket_cap_mb", &R::dist, &DistSection::bucket_cap_mb, "gradient bucket size in MiB, > 0"),
      field("dist", "broadcast_buffers", &R::dist, &DistSection::broadcast_buffers, "broadcast rank 0's buffers each step"),
      field("dist", "sync_bn", &R::dist, &DistSection::sync_bn, "SyncBatchNorm: batch statistics over all ranks"),
      field("dist", "broadcast_init", &R::dist, &DistSection::broadcast_init, "broadcast rank 0's initial parameters"),
      field("dist", "world_size", &R::dist, &DistSection::world_size,
            "logical ranks W; 0 = one per MPI process, else a multiple of it"),
      field("dist", "det_chunk", &R::dist, &DistSection::det_chunk, "deterministic reduce: samples per chunk; 0 = auto"),
      field("dist", "timeout_s", &R::dist, &DistSection::timeout_s,
            "seconds a step-loop collective may wait for the other ranks before the job is ended; 0 = never"),
      field("dist", "shared_memory", &R::dist, &DistSection::shared_memory,
            "deterministic tree: processes on one node read each other's gradients from shared memory"),
      field("dist", "reduce_dtype", &R::dist, &DistSection::reduce_dtype,
            "fp32 | bf16 | fp16: the gradient is sent and summed in it, as NCCL sums"),
      field("dist", "divide", &R::dist, &DistSection::divide,
            "after | before | sqrt: divide by W after the sum, before it (DDP), or split as FSDP does"),
      field("precision", "matmul", &R::precision, &PrecisionSection::matmul, "fp32 | tf32 | bf16 | fp16"),
      field("precision", "amp", &R::precision, &PrecisionSection::amp, "none | fp16 (dynamic loss scaling)"),
      field("precision", "loss_scale_init", &R::precision, &PrecisionSection::loss_scale_init,
            "amp: initial loss scale, > 0"),
      field("precision", "loss_scale_growth_interval", &R::precision, &PrecisionSection::loss_scale_growth_interval,
            "amp: good steps before the scale doubles, >= 1"),
      field("record", "layers_every", &R::record, &RecordSection::layers_every, "per-layer statistics every N steps; 0 = never"),
      field("record", "samples", &R::record, &RecordSection::samples, "record /train/samples"),
      field("record", "init_params", &R::record, &RecordSection::init_params,
            "record rank 0's initial parameters under /init/<layer>/<param>"),
      field("record", "flush_every", &R::record, &RecordSection::flush_every, "H5Fflush every N steps, >= 1"),
      field("record", "chunk_steps", &R::record, &RecordSection::chunk_steps, "HDF5 chunk length along the step axis"),
  };
  return table;
}

const Field* find_field(std::string_view name) {
  for (const Field& f : fields())
    if (f.name == name) return &f;
  return nullptr;
}

bool is_section(std::string_view name) {
  return std::any_of(std::begin(kSections), std::end(kSections), [&](const Section& s) { return name == s.name; });
}

std::string section_list() {
  std::string out;
  for (const Section& s : kSections) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// The closest candidate within a few typos, else one with the same key in another section; "" if none.
std::string closest(std::string_view given, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, given.size() / 4) + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(given, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  if (!best.empty()) return best;
  const std::string_view tail = given.substr(given.find('.') + 1);
  for (const std::string& c : candidates)
    if (c.find('.') != std::string::npos && std::string_view(c).substr(c.find('.') + 1) == tail) return c;
  return "";
}

std::vector<std::string> key_names() {
  std::vector<std::string> names;
  for (const Field& f : fields()) names.push_back(f.name);
  return names;
}

// Names every command-line option can be matched against, for suggestions.
const char* const kGeneralOptions[] = {"config", "out", "quiet", "fault", "print-config", "help", "version"};

struct Assignment {
  std::string key;
  std::string value;
};

// Applies one layer (one file, or the command line) over cfg; a key may appear once per layer.
void apply(RunConfig& cfg, const std::vector<Assignment>& layer, const std::string& where) {
  std::set<std::string> seen;
  for (const Assignment& a : layer) {
    if (!seen.insert(a.key).second) throw ConfigError(a.key, "given twice " + where);
    try {
      find_field(a.key)->set(cfg, a.value);
    } catch (const ConfigError& e) {
      throw ConfigError(e.key(), problem_of(e) + " (" + where + ")");
    }
  }
}

void add_fault(RunConfig& cfg, const std::string& spec, const std::string& where) {
  try {
    parse_fault_spec(spec);
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), problem_of(e) + " (" + where + ")");
  }
  cfg.faults.push_back(spec);
}

// Boost's config-file syntax: '#' starts a comment, "[name]" opens a section. Boost accepts any section
// name, so an unknown (possibly empty) section is caught here.
void check_sections(const std::string& text, const std::string& path) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string_view s = trim(std::string_view(line).substr(0, line.find('#')));
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') continue;
    const std::string name(trim(s.substr(1, s.size() - 2)));
    if (is_section(name)) continue;
    std::vector<std::string> sections;
    for (const Section& sec : kSections) sections.emplace_back(sec.name);
    const std::string guess = closest(name, sections);
    throw ConfigError(name, "unknown section [" + name + "] in file " + in_quotes(path) +
                                (guess.empty() ? "; sections are " + section_list() : "; did you mean [" + guess + "]?"));
  }
}

std::string read_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found)
    throw ConfigError("config", "file " + in_quotes(path) + " does not exist");
  if (ec) throw ConfigError("config", "cannot access file " + in_quotes(path) + ": " + ec.message());
  if (fs::is_directory(status)) throw ConfigError("config", in_quotes(path) + " is a directory, not an INI file");
  // A FIFO or device would block or never end; only a regular file is a configuration.
  if (!fs::is_regular_file(status))
    throw ConfigError("config", in_quotes(path) + " is not a regular file (a pipe, device or socket)");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) throw ConfigError("config", "cannot open file " + in_quotes(path) + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("config", "cannot read file " + in_quotes(path) + ": " + std::strerror(errno));
  return text.str();
}

OptionGrammar file_options() {
  OptionGrammar g;
  g.value("fault", "", "");
  for (const Field& f : fields()) g.value(f.name, "", "");
  return g;
}

// Reads one INI file: its key assignments (in order) and its fault lines (appended to cfg.faults).
std::vector<Assignment> read_config_file(const std::string& path, RunConfig& cfg) {
  const std::string text = read_file(path);
  check_sections(text, path);
  const std::string where = "in file " + in_quotes(path);
  std::vector<Assignment> layer;
  file_options().tokenize_ini(text, path, [&](const std::string& key, const std::string& value, bool known) {
    if (key == "fault") {
      add_fault(cfg, value, where);
    } else if (!known) {
      if (std::string_view(key).ends_with(".fault"))
        throw ConfigError(key, "fault lines go at the top of the file, before any [section] (" + where + ")");
      const std::string guess = closest(key, key_names());
      throw ConfigError(key, "unknown key " + where +
                                 (guess.empty() ? "; sections are " + section_list() + " (see --help)"
                                                : "; did you mean " + guess + "?"));
    } else {
      layer.push_back({key, value});
    }
  });
  return layer;
}

constexpr unsigned kHelpWidth = 100;
constexpr unsigned kHelpDescriptionWidth = 54;

// One grammar serves both argv parsing and --help, so the help cannot drift from what parses.
OptionGrammar command_line_options() {
  OptionGrammar g(kHelpWidth, kHelpDescriptionWidth);
  g.group("General options");
  g.value("config", "FILE", "INI file: [section] then key = value; fault = SPEC lines at the top. Repeatable: later files win");
  g.value("out", "PATH", "alias of --run.out");
  g.value("fault", "SPEC",
          "inject a fault NAME[:key=value,...]; common keys ranks (all, N, A-B, A+B), start, stop, every, prob; "
          "repeatable");
  g.flag("quiet", "no progress line");
  g.flag("print-config", "print the effective configuration as INI and exit");
  g.flag("help", "print this help and exit");
  g.flag("version", "print the version and exit");
  const RunConfig defaults;
  for (const Section& s : kSections) {
    g.group(std::string("[") + s.name + "] " + s.title);
    for (const Field& f : fields())
      if (f.section == s.name) g.value(f.name, f.kind, f.meaning, f.get(defaults));
  }
  return g;
}

[[noreturn]] void unknown_option(const std::string& key) {
  std::vector<std::string> names = key_names();
  names.insert(names.end(), std::begin(kGeneralOptions), std::end(kGeneralOptions));
  const std::string guess = closest(key, names);
  throw ConfigError(key, "unknown option --" + key + " on the command line" +
                             (guess.empty() ? " (see --help)" : "; did you mean --" + guess + "?"));
}

std::string version_text() { return std::string("divsim ") + kVersion + " (git " + kGitSha + ")\n"; }

// Validation helpers: the message says what is allowed and what was given.
void require(bool ok, const char* key, const std::string& rule, const std::string& got) {
  if (!ok) throw ConfigError(key, "must be " + rule + ", got " + got);
}

void require_double(const char* key, double v, bool in_range, const std::string& rule) {
  require(std::isfinite(v) && in_range, key, "finite and " + rule, format_double(v));
}

void require_int(const char* key, std::int64_t v, bool in_range, const std::string& rule) {
  require(in_range, key, rule, std::to_string(v));
}

// Boost's INI reader trims values and cuts at '#', and a line break ends a value: such text could not
// survive --print-config and the config attribute of the output file.
void require_ini_text(const char* key, const std::string& v) {
  const bool ok = v.find_first_of("#\n\r") == std::string::npos && trim(v).size() == v.size();
  if (!ok)
    throw ConfigError(key, in_quotes(v) + " cannot be written to an INI file: no '#', line breaks, or leading/trailing blanks");
}

}  // namespace

double parse_double(const std::string& key, std::string_view text) {
  const std::string_view t = trim(text);
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec == std::errc::invalid_argument || ptr != t.data() + t.size())
    throw ConfigError(key, in_quotes(text) + " is not a number; expected a decimal such as 0.05 or 1e-4");
  if (ec == std::errc::result_out_of_range)
    throw ConfigError(key, in_quotes(text) + " is outside the range of a double");
  if (!std::isfinite(v)) throw ConfigError(key, in_quotes(text) + " is not allowed; numbers must be finite");
  return v;
}

std::int64_t parse_int64(const std::string& key, std::string_view text) {
  std::string_view t = trim(text);
  if (t.size() > 1 && t.front() == '+' && t[1] != '-') t.remove_prefix(1);  // "+1" as users write offsets
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) throw ConfigError(key, in_quotes(text) + " does not fit a 64-bit integer");
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size()) {
    const bool fraction = ec == std::errc() && std::string_view(".eE").find(*ptr) != std::string_view::npos;
    throw ConfigError(key, in_quotes(text) + " is not an integer" + (fraction ? " (no fractions or exponents)" : "") +
                               "; expected a whole number such as 100");
  }
  return v;
}

bool parse_bool(const std::string& key, std::string_view text) {
  std::string t(trim(text));
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw ConfigError(key, in_quotes(text) + " is not a boolean; expected true/false, 1/0, yes/no or on/off");
}

CliResult parse_command_line(int argc, const char* const* argv) {
  const OptionGrammar grammar = command_line_options();
  CliResult result;
  bool help = false, version = false, print_config = false;
  std::vector<std::string> files, cli_faults;
  std::vector<Assignment> cli;
  grammar.tokenize_argv(argc, argv, [&](const std::string& key, const std::string& value, bool known) {
    if (key.empty())
      throw ConfigError(value.empty() ? "command line" : value, "unexpected argument " + in_quotes(value) +
                                   "; settings are given as --section.key=VALUE (see --help)");
    if (!known) unknown_option(key);
    if (key == "help") help = true;
    else if (key == "version") version = true;
    else if (key == "print-config") print_config = true;
    else if (key == "quiet") result.config.quiet = true;
    else if (key == "config") files.push_back(value);
    else if (key == "fault") cli_faults.push_back(value);
    else if (key == "out") cli.push_back({"run.out", value});
    else cli.push_back({key, value});
  });
  if (help) {
    std::ostringstream text;
    const std::string banner = version_text();
    text << banner.substr(0, banner.size() - 1) << ": MPI simulator of data-parallel training divergence\n\n"
         << "Usage: mpiexec -n W divsim [--config FILE]... [--section.key=VALUE]... [--fault SPEC]...\n"
         << "       divsim recover RUN [OUT]   rebuild a killed run's trajectory from RUN.journal\n"
         << "       divsim diagnose RUN [--reference REF] ...   name the likely fault (divsim diagnose --help)\n"
         << "       divsim evaluate ...        score diagnose on generated fault scenarios\n" << grammar.help();
    result.action = CliAction::help;
    result.text = text.str();
    return result;
  }
  if (version) {
    result.action = CliAction::version;
    result.text = version_text();
    return result;
  }

  RunConfig& cfg = result.config;
  for (const std::string& path : files) apply(cfg, read_config_file(path, cfg), "in file " + in_quotes(path));
  apply(cfg, cli, "on the command line");
  for (const std::string& spec : cli_faults) add_fault(cfg, spec, "on the command line");
  validate(cfg);
  if (print_config) {
    result.action = CliAction::print_config;
    result.text = to_ini(cfg);
  }
  return result;
}

void validate(const RunConfig& c) {
  const std::string& name = c.run.name;
  const bool name_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char ch) {
    return std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
  });
  require(name_ok, "run.name", "non-empty and only A-Z a-z 0-9 . _ -", in_quotes(name));
  require_ini_text("run.out", c.run.out);

  require_ini_text("data.root", c.data.root);
  require_ini_text("data.path", c.data.path);
  require(c.data.source != DataSource::hdf5 || !c.data.path.empty(), "data.path", "set to the HDF5 data file when data.source = hdf5",
          "empty");
  require(c.data.source != DataSource::text || !c.data.path.empty(), "data.path", "set to the UTF-8 text file when data.source = text",
          "empty");
  require_int("data.train_size", c.data.train_size, c.data.train_size >= 0, ">= 0 (0 = all)");
  require_int("data.test_size", c.data.test_size, c.data.test_size >= 0, ">= 0 (0 = all)");
  // Sample indices are one 32-bit word of the keyed streams.
  constexpr std::int64_t kMaxSamples = std::int64_t{1} << 32;
  require_int("data.synthetic_train", c.data.synthetic_train,
              c.data.synthetic_train > 0 && c.data.synthetic_train <= kMaxSamples, "in [1, 2^32]");
  require_int("data.synthetic_test", c.data.synthetic_test,
              c.data.synthetic_test > 0 && c.data.synthetic_test <= kMaxSamples, "in [1, 2^32]");
  require_int("data.synthetic_features", c.data.synthetic_features, c.data.synthetic_features > 0, "> 0");
  require_int("data.synthetic_classes", c.data.synthetic_classes, c.data.synthetic_classes >= 2, ">= 2");
  require_int("data.synthetic_teacher_hidden", c.data.synthetic_teacher_hidden, c.data.synthetic_teacher_hidden > 0,
              "> 0");

  require_int("model.channels", static_cast<std::int64_t>(c.model.channels.size()), !c.model.channels.empty(),
              "at least one stage");
  for (const std::int64_t w : c.model.channels) require_int("model.channels", w, w >= 1 && w <= 4096, "channels in [1, 4096]");
  require_int("model.blocks", c.model.blocks, c.model.blocks >= 1 && c.model.blocks <= 64, "in [1, 64]");
  require_int("model.patch", c.model.patch, c.model.patch >= 1, ">= 1");
  require_int("model.dim", c.model.dim, c.model.dim >= 1 && c.model.dim <= 65536, "in [1, 65536]");
  require_int("model.heads", c.model.heads, c.model.heads >= 1 && c.model.dim % c.model.heads == 0,
              ">= 1 and a divisor of model.dim (" + std::to_string(c.model.dim) + ")");
  require_int("model.depth", c.model.depth, c.model.depth >= 1 && c.model.depth <= 256, "in [1, 256]");
  require_int("model.mlp_ratio", c.model.mlp_ratio, c.model.mlp_ratio >= 1 && c.model.mlp_ratio <= 64, "in [1, 64]");
  require_int("model.block_size", c.model.block_size, c.model.block_size >= 1 && c.model.block_size <= 4096, "in [1, 4096]");
  for (const std::int64_t w : c.model.hidden) require_int("model.hidden", w, w >= 1 && w <= 65536, "widths in [1, 65536]");
  require_double("model.dropout", c.model.dropout, c.model.dropout >= 0 && c.model.dropout < 1, "in [0,1)");
  require_double("model.bn_momentum", c.model.bn_momentum, c.model.bn_momentum >= 0 && c.model.bn_momentum <= 1,
                 "in [0,1]");
  require_double("model.bn_eps", c.model.bn_eps, c.model.bn_eps > 0, "> 0");

  require_double("loss.gamma_pos", c.loss.gamma_pos, c.loss.gamma_pos >= 0, ">= 0");
  require_double("loss.gamma_neg", c.loss.gamma_neg, c.loss.gamma_neg >= 0, ">= 0");
  require_double("loss.margin", c.loss.margin, c.loss.margin >= 0 && c.loss.margin < 1, "in [0, 1)");
  require_int("batch.max_micro", c.batch.max_micro, c.batch.max_micro >= 0, ">= 0");
  if (c.batch.max_micro > 0 && c.batch.per_rank > 0)
    throw ConfigError("batch.max_micro", "applies to a fixed batch.global; it contradicts batch.per_rank > 0");
  require_int("batch.base_global", c.batch.base_global, c.batch.base_global >= 1, ">= 1");
  require_double("precision.loss_scale_init", c.precision.loss_scale_init, c.precision.loss_scale_init > 0, "> 0");
  require_int("precision.loss_scale_growth_interval", c.precision.loss_scale_growth_interval,
              c.precision.loss_scale_growth_interval >= 1, ">= 1");
  require_double("loss.label_smoothing", c.loss.label_smoothing,
                 c.loss.label_smoothing >= 0 && c.loss.label_smoothing < 1, "in [0,1)");

  const OptimSection& o = c.optim;
  require_double("optim.lr", o.lr, o.lr > 0, "> 0");
  require_double("optim.momentum", o.momentum, o.momentum >= 0 && o.momentum < 1, "in [0,1)");
  if (o.nesterov && !(o.momentum > 0))
    throw ConfigError("optim.nesterov", "needs optim.momentum > 0 (PyTorch SGD), but momentum is " + format_double(o.momentum));
  require_double("optim.weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0");
  require_double("optim.beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0,1)");
  require_double("optim.beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0,1)");
  require_double("optim.eps", o.eps, o.eps > 0, "> 0");
  require_double("optim.clip_norm", o.clip_norm, o.clip_norm >= 0, ">= 0 (0 = no clipping)");

  const ScheduleSection& s = c.schedule;
  require_int("schedule.warmup_steps", s.warmup_steps, s.warmup_steps >= 0, ">= 0");
  require_int("schedule.step_size", s.step_size, s.step_size >= 1, ">= 1");
  require_double("schedule.gamma", s.gamma, s.gamma > 0 && s.gamma <= 1, "in (0,1]");
  require_double("schedule.min_lr", s.min_lr, s.min_lr >= 0 && s.min_lr <= o.lr,
                 "in [0, optim.lr = " + format_double(o.lr) + "]");

  const BatchSection& b = c.batch;
  require_int("batch.global", b.global, b.global >= 1, ">= 1");
  require_int("batch.per_rank", b.per_rank, b.per_rank >= 0, ">= 0 (0 = derive from batch.global)");
  require_int("batch.accum_steps", b.accum_steps, b.accum_steps >= 1, ">= 1");
  if (b.per_rank == 0 && b.global % b.accum_steps != 0)
    throw ConfigError("batch.global", "must be divisible by batch.accum_steps (" + std::to_string(b.accum_steps) +
                                          ") when batch.per_rank = 0, got " + std::to_string(b.global));

  require_int("train.steps", c.train.steps, c.train.steps >= 0, ">= 0 (0 = from train.epochs)");
  if (c.train.steps == 0)
    require_int("train.epochs", c.train.epochs, c.train.epochs >= 1, ">= 1 when train.steps = 0");
  require_int("train.eval_every", c.train.eval_every, c.train.eval_every >= 0, ">= 0 (0 = only at the end)");

  require_int("run.checkpoint_every", c.run.checkpoint_every, c.run.checkpoint_every >= 0, ">= 0");
  if (c.dist.backend == CommBackend::nccl && c.run.device != Device::cuda)
    throw ConfigError("dist.backend", "nccl reduces GPU buffers: it needs run.device=cuda");
  if (c.dist.backend == CommBackend::nccl && c.dist.reduce != ReduceMode::mpi)
    throw ConfigError("dist.backend", "nccl performs the allreduce itself: it needs dist.reduce=mpi");
  // The deterministic sum is exact, which is what makes its bits the same at every world size; a sum
  // rounded at every add, or divided before, depends on the order again.
  for (const auto& [key, plain] : {std::pair{"dist.reduce_dtype", c.dist.reduce_dtype == ReduceDtype::fp32},
                                   std::pair{"dist.divide", c.dist.divide == DivideMode::after}}) {
    if (plain) continue;
    if (c.dist.reduce == ReduceMode::deterministic)
      throw ConfigError(key, "dist.reduce=deterministic sums exactly in fixed point and divides once at the end (the "
                             "same bits at every world size); a 16-bit or pre-divided sum needs dist.reduce=mpi or ring");
    if (c.dist.backend == CommBackend::nccl)
      throw ConfigError(key, "the NCCL backend reduces float32 gradients divided after the sum; use dist.backend=mpi");
  }
  require_double("dist.bucket_cap_mb", c.dist.bucket_cap_mb, c.dist.bucket_cap_mb > 0, "> 0");
  // That world_size is a multiple of the process count is checked once MPI is up.
  require_int("dist.world_size", c.dist.world_size, c.dist.world_size >= 0, ">= 0 (0 = one rank per process)");
  require_int("dist.det_chunk", c.dist.det_chunk, c.dist.det_chunk >= 0, ">= 0 (0 = auto)");
  require_double("dist.timeout_s", c.dist.timeout_s, c.dist.timeout_s >= 0, ">= 0 (0 = wait forever)");

  const RecordSection& r = c.record;
  require_int("record.layers_every", r.layers_every, r.layers_every >= 0, ">= 0 (0 = never)");
  require_int("record.flush_every", r.flush_every, r.flush_every >= 1, ">= 1");
  require_int("record.chunk_steps", r.chunk_steps, r.chunk_steps >= 1, ">= 1");

  for (const std::string& spec : c.faults) {
    require_ini_text("fault", spec);
    parse_fault_spec(spec);
  }
}

std::string to_ini(const RunConfig& cfg) {
  std::string out = std::string("# divsim ") + kVersion + " effective configuration\n";
  for (const std::string& spec : cfg.faults) out += "fault = " + spec + "\n";
  std::string section;
  for (const Field& f : fields()) {
    if (f.section != section) {
      section = f.section;
      out += "\n[" + section + "]\n";
    }
    const std::string value = f.get(cfg);
    out += f.name.substr(section.size() + 1) + (value.empty() ? " =\n" : " = " + value + "\n");
  }
  return out;
}

}  // namespace divsim
