// The configuration front end: layering (defaults < files < command line), every error class, the
// validate() ranges, --help/--version, and the --print-config round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/options.hpp"
#include "divsim_version.hpp"
#include "temp_dir.hpp"

using namespace divsim;
using divsim::test::TempDir;
namespace fs = std::filesystem;

namespace {


CliResult parse(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"divsim"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

// Runs `body`, which must throw ConfigError with this key and a message containing every fragment.
void expect_error(const std::function<void()>& body, const std::string& key, const std::vector<std::string>& fragments) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one for key " << key;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), key) << e.what();
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with(key + ": ")) << what;
    for (const std::string& f : fragments) EXPECT_TRUE(contains(what, f)) << "'" << f << "' not in: " << what;
  }
}

void expect_cli_error(const std::vector<std::string>& args, const std::string& key,
                      const std::vector<std::string>& fragments) {
  expect_error([&] { parse(args); }, key, fragments);
}

// Every member compared one by one, so the round-trip test does not trust to_ini() to compare itself.
void expect_same(const RunConfig& a, const RunConfig& b) {
  EXPECT_EQ(a.run.name, b.run.name);
  EXPECT_EQ(a.run.out, b.run.out);
  EXPECT_EQ(a.run.overwrite, b.run.overwrite);
  EXPECT_EQ(a.run.seed, b.run.seed);
  EXPECT_EQ(a.data.source, b.data.source);
  EXPECT_EQ(a.data.root, b.data.root);
  EXPECT_EQ(a.data.train_size, b.data.train_size);
  EXPECT_EQ(a.data.test_size, b.data.test_size);
  EXPECT_EQ(a.data.augment, b.data.augment);
  EXPECT_EQ(a.data.synthetic_train, b.data.synthetic_train);
  EXPECT_EQ(a.data.synthetic_test, b.data.synthetic_test);
  EXPECT_EQ(a.data.synthetic_features, b.data.synthetic_features);
  EXPECT_EQ(a.data.synthetic_classes, b.data.synthetic_classes);
  EXPECT_EQ(a.data.synthetic_teacher_hidden, b.data.synthetic_teacher_hidden);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.batchnorm, b.model.batchnorm);
  EXPECT_EQ(a.model.dropout, b.model.dropout);
  EXPECT_EQ(a.model.bn_momentum, b.model.bn_momentum);
  EXPECT_EQ(a.model.bn_eps, b.model.bn_eps);
  EXPECT_EQ(a.loss.type, b.loss.type);
  EXPECT_EQ(a.loss.label_smoothing, b.loss.label_smoothing);
  EXPECT_EQ(a.optim.type, b.optim.type);
  EXPECT_EQ(a.optim.lr, b.optim.lr);
  EXPECT_EQ(a.optim.momentum, b.optim.momentum);
  EXPECT_EQ(a.optim.nesterov, b.optim.nesterov);
  EXPECT_EQ(a.optim.weight_decay, b.optim.weight_decay);
  EXPECT_EQ(a.optim.beta1, b.optim.beta1);
  EXPECT_EQ(a.optim.beta2, b.optim.beta2);
  EXPECT_EQ(a.optim.eps, b.optim.eps);
  EXPECT_EQ(a.optim.clip_norm, b.optim.clip_norm);
  EXPECT_EQ(a.schedule.type, b.schedule.type);
  EXPECT_EQ(a.schedule.warmup_steps, b.schedule.warmup_steps);
  EXPECT_EQ(a.schedule.step_size, b.schedule.step_size);
  EXPECT_EQ(a.schedule.gamma, b.schedule.gamma);
  EXPECT_EQ(a.schedule.min_lr, b.schedule.min_lr);
  EXPECT_EQ(a.batch.global, b.batch.global);
  EXPECT_EQ(a.batch.per_rank, b.batch.per_rank);
  EXPECT_EQ(a.batch.accum_steps, b.batch.accum_steps);
  EXPECT_EQ(a.batch.drop_last, b.batch.drop_last);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.epochs, b.train.epochs);
  EXPECT_EQ(a.train.eval_every, b.train.eval_every);
  EXPECT_EQ(a.sampler.mode, b.sampler.mode);
  EXPECT_EQ(a.sampler.shuffle, b.sampler.shuffle);
  EXPECT_EQ(a.sampler.seed, b.sampler.seed);
  EXPECT_EQ(a.dist.reduce, b.dist.reduce);
  EXPECT_EQ(a.dist.bucket_cap_mb, b.dist.bucket_cap_mb);
  EXPECT_EQ(a.dist.broadcast_buffers, b.dist.broadcast_buffers);
  EXPECT_EQ(a.dist.sync_bn, b.dist.sync_bn);
  EXPECT_EQ(a.dist.broadcast_init, b.dist.broadcast_init);
  EXPECT_EQ(a.dist.world_size, b.dist.world_size);
  EXPECT_EQ(a.dist.det_chunk, b.dist.det_chunk);
  EXPECT_EQ(a.dist.shared_memory, b.dist.shared_memory);
  EXPECT_EQ(a.dist.reduce_dtype, b.dist.reduce_dtype);
  EXPECT_EQ(a.dist.divide, b.dist.divide);
  EXPECT_EQ(a.precision.matmul, b.precision.matmul);
  EXPECT_EQ(a.record.layers_every, b.record.layers_every);
  EXPECT_EQ(a.record.samples, b.record.samples);
  EXPECT_EQ(a.record.flush_every, b.record.flush_every);
  EXPECT_EQ(a.record.chunk_steps, b.record.chunk_steps);
  EXPECT_EQ(a.faults, b.faults);
}

// A configuration that differs from the defaults in every member, built without the parser.
RunConfig everything_changed() {
  RunConfig c;
  c.run = {"sweep-7.b_2", "/scratch/out dir/r.h5", true, 18446744073709551615ull};
  c.data.source = DataSource::synthetic;
  c.data.root = "/data/fmnist";
  c.data.train_size = 1000;
  c.data.test_size = 500;
  c.data.augment = true;
  c.data.synthetic_train = 4096;
  c.data.synthetic_test = 1024;
  c.data.synthetic_features = 32;
  c.data.synthetic_classes = 3;
  c.data.synthetic_teacher_hidden = 16;
  c.model.hidden = {512, 64, 1};
  c.model.batchnorm = true;
  c.model.dropout = 0.1;
  c.model.bn_momentum = 1.0 / 3.0;
  c.model.bn_eps = 1e-7;
  c.loss.label_smoothing = 0.30000000000000004;  // 0.1 + 0.2
  c.optim.type = OptimizerType::adamw;
  c.optim.lr = 3.0000000000000004;  // nextafter(3, 4)
  c.optim.momentum = 0.5;
  c.optim.nesterov = true;
  c.optim.weight_decay = 5e-324;  // smallest subnormal
  c.optim.beta1 = 0.85;
  c.optim.beta2 = 0.9999999999999999;
  c.optim.eps = 1e-12;
  c.optim.clip_norm = 1.5;
  c.schedule = {ScheduleType::step, 100, 250, 0.5, 2.5e-5};
  c.batch.global = 1000;
  c.batch.per_rank = 16;
  c.batch.accum_steps = 4;
  c.batch.drop_last = false;
  c.batch.lr_scaling = LrScaling::linear;
  c.batch.base_global = 512;
  c.train.steps = 1234;
  c.train.epochs = 3;
  c.train.eval_every = 50;
  c.train.on_nonfinite = NonFinitePolicy::skip;
  c.sampler = {SamplerMode::global_batch, false, 99};
  c.dist.reduce = ReduceMode::deterministic;
  c.dist.backend = CommBackend::mpi;  // nccl needs dist.reduce=mpi; the string round trip is the same
  c.dist.bucket_cap_mb = 0.0001;
  c.dist.broadcast_buffers = false;
  c.dist.sync_bn = true;
  c.dist.broadcast_init = false;
  c.dist.world_size = 8;
  c.dist.det_chunk = 64;
  c.dist.shared_memory = false;
  c.run.device = Device::cuda;
  c.precision.matmul = MatmulFormat::bf16;
  c.record.layers_every = 0;
  c.record.samples = true;
  c.record.init_params = true;
  c.record.flush_every = 7;
  c.record.chunk_steps = 32;
  c.run.checkpoint_every = 500;
  c.run.resume = ResumeMode::automatic;
  c.loss.type = LossType::asl;
  c.loss.gamma_pos = 1.5;
  c.loss.gamma_neg = 3.0;
  c.loss.margin = 0.2;
  c.precision.amp = AmpMode::fp16;
  c.precision.loss_scale_init = 1024.0;
  c.precision.loss_scale_growth_interval = 100;
  c.faults = {"bitflip:ranks=1,start=10,bit=30", "skip_rank:ranks=0+2-3,prob=0.1"};
  return c;
}

}  // namespace

TEST(Config, DefaultsWithoutArguments) {
  const CliResult r = parse({});
  EXPECT_EQ(r.action, CliAction::run);
  EXPECT_TRUE(r.text.empty());
  expect_same(r.config, RunConfig{});
  EXPECT_FALSE(r.config.quiet);
  EXPECT_NO_THROW(validate(RunConfig{}));
  EXPECT_EQ(r.config.output_path(), "outputs/default.h5");
}

TEST(Config, CommandLineOverridesFile) {
  TempDir dir;
  const std::string file = dir.write("a.ini",
                                     "# a comment\n"
                                     "[run]\nname = from_file\nseed = 11\n"
                                     "[optim]\nlr = 0.1   # trailing comment\nnesterov = yes\n"
                                     "[model]\nhidden = 64\n");
  const CliResult r = parse({"--config", file, "--optim.lr=0.2", "--batch.global", "128", "--out", "x.h5", "--quiet"});
  EXPECT_EQ(r.config.run.name, "from_file");
  EXPECT_EQ(r.config.run.seed, 11u);
  EXPECT_EQ(r.config.optim.lr, 0.2);
  EXPECT_TRUE(r.config.optim.nesterov);
  EXPECT_EQ(r.config.model.hidden, (std::vector<std::int64_t>{64}));
  EXPECT_EQ(r.config.batch.global, 128);
  EXPECT_EQ(r.config.run.out, "x.h5");
  EXPECT_TRUE(r.config.quiet);
  EXPECT_EQ(r.config.optim.momentum, RunConfig{}.optim.momentum);  // untouched keys keep their defaults
}

TEST(Config, LaterFileOverridesEarlierAndFaultsKeepOrder) {
  TempDir dir;
  const std::string a = dir.write("a.ini", "fault = skip_rank:ranks=1\n[optim]\nlr = 0.1\n[run]\nseed = 5\n");
  const std::string b = dir.write("b.ini", "fault = bitflip:bit=3\n\n[optim]\nlr = 0.3\n");
  const CliResult r = parse({"--fault", "loss_skew:margin=0.1", "--config", a, "--config", b});
  EXPECT_EQ(r.config.optim.lr, 0.3);
  EXPECT_EQ(r.config.run.seed, 5u);
  EXPECT_EQ(r.config.faults,
            (std::vector<std::string>{"skip_rank:ranks=1", "bitflip:bit=3", "loss_skew:margin=0.1"}));
}

TEST(Config, NegativeValueAfterKeyIsTheValue) {
  // "--optim.lr -1" must reach validate() as lr = -1, not be taken for another option.
  expect_cli_error({"--optim.lr", "-1"}, "optim.lr", {"must be finite and > 0, got -1"});
}

TEST(Config, EmptyHiddenIsLogisticRegression) {
  EXPECT_TRUE(parse({"--model.hidden="}).config.model.hidden.empty());
  EXPECT_TRUE(parse({"--model.hidden", ""}).config.model.hidden.empty());
  EXPECT_EQ(parse({"--run.out=", "--run.name=x"}).config.output_path(), "outputs/x.h5");
  EXPECT_EQ(parse({"--model.hidden= 256 , 128,7"}).config.model.hidden, (std::vector<std::int64_t>{256, 128, 7}));
}

TEST(Config, BooleanSpellings) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"true", true}, {"false", false}, {"1", true}, {"0", false}, {"yes", true},
      {"no", false},  {"on", true},     {"off", false}, {"TRUE", true}, {"Off", false}};
  for (const auto& [text, value] : cases) EXPECT_EQ(parse({"--run.overwrite=" + text}).config.run.overwrite, value) << text;
}

TEST(Config, HelpVersionAndHelpReadsNoFile) {
  const CliResult help = parse({"--config", "/nonexistent/x.ini", "--help"});
  EXPECT_EQ(help.action, CliAction::help);
  for (const char* section : {"[run]", "[data]", "[model]", "[loss]", "[optim]", "[schedule]", "[batch]", "[train]",
                              "[sampler]", "[dist]", "[precision]", "[record]"})
    EXPECT_TRUE(contains(help.text, section)) << section;
  for (const char* fragment : {"--optim.lr", "(=0.05)", "peak learning rate", "--model.hidden", "(=256,128)",
                               "--config", "--fault", "--print-config", "--quiet", "--out", "--version"})
    EXPECT_TRUE(contains(help.text, fragment)) << fragment;

  const CliResult version = parse({"--version"});
  EXPECT_EQ(version.action, CliAction::version);
  EXPECT_EQ(version.text, std::string("divsim ") + kVersion + " (git " + kGitSha + ")\n");
}

TEST(Config, PrintConfigRoundTripsEveryKey) {
  const RunConfig original = everything_changed();
  ASSERT_NO_THROW(validate(original));
  const std::string ini = to_ini(original);
  EXPECT_TRUE(ini.starts_with(std::string("# divsim ") + kVersion + " effective configuration\n")) << ini;
  // Faults come before the first section; doubles in their shortest exact form.
  EXPECT_LT(ini.find("fault = bitflip:ranks=1,start=10,bit=30\n"), ini.find("[run]"));
  for (const char* line : {"\nlr = 3.0000000000000004\n", "\ndropout = 0.1\n", "\nbn_eps = 1e-07\n",
                           "\nhidden = 512,64,1\n", "\nseed = 18446744073709551615\n", "\nnesterov = true\n",
                           "\nlabel_smoothing = 0.30000000000000004\n", "\nweight_decay = 5e-324\n"})
    EXPECT_TRUE(contains(ini, line)) << line << " not in:\n" << ini;
  EXPECT_FALSE(contains(ini, "quiet"));

  TempDir dir;
  const CliResult reread = parse({"--config", dir.write("effective.ini", ini), "--print-config", "--quiet"});
  EXPECT_EQ(reread.action, CliAction::print_config);
  expect_same(reread.config, original);
  EXPECT_EQ(reread.text, ini);
  EXPECT_EQ(reread.config.optim.lr, std::nextafter(3.0, 4.0));
}

TEST(Config, PrintConfigOfDefaultsAndEmptyValuesRoundTrips) {
  RunConfig c;
  c.model.hidden.clear();
  const std::string ini = to_ini(c);
  EXPECT_TRUE(contains(ini, "\nhidden =\n"));
  EXPECT_TRUE(contains(ini, "\nout =\n"));
  TempDir dir;
  const CliResult r = parse({"--config", dir.write("d.ini", ini)});
  expect_same(r.config, c);
  EXPECT_EQ(to_ini(r.config), ini);
}

TEST(Config, ReduceDtypeAndDivide) {
  const RunConfig c = parse({"--dist.reduce=ring", "--dist.reduce_dtype=fp16", "--dist.divide=sqrt"}).config;
  EXPECT_EQ(c.dist.reduce_dtype, ReduceDtype::fp16);
  EXPECT_EQ(c.dist.divide, DivideMode::sqrt);
  EXPECT_TRUE(contains(to_ini(c), "reduce_dtype = fp16\ndivide = sqrt\n"));
  expect_cli_error({"--dist.reduce_dtype=tf32"}, "dist.reduce_dtype", {"fp32", "bf16", "fp16"});
}

TEST(ConfigErrors, UnknownKeysAndSections) {
  TempDir dir;
  const std::string typo = dir.write("typo.ini", "[optim]\nlrr = 0.1\n");
  expect_cli_error({"--config", typo}, "optim.lrr", {"unknown key", typo, "did you mean optim.lr?"});
  const std::string section = dir.write("section.ini", "[optimm]\n");
  expect_cli_error({"--config", section}, "optimm", {"unknown section [optimm]", section, "did you mean [optim]?"});
  const std::string far = dir.write("far.ini", "[zzz]\nlr = 1\n");
  expect_cli_error({"--config", far}, "zzz", {"unknown section", "sections are run, data"});
  const std::string top = dir.write("top.ini", "name = x\n");
  expect_cli_error({"--config", top}, "name", {"unknown key", "did you mean run.name?"});
  const std::string fault_in_section = dir.write("fs.ini", "[run]\nfault = skip_rank\n");
  expect_cli_error({"--config", fault_in_section}, "run.fault", {"at the top of the file"});

  expect_cli_error({"--optim.lrr=1"}, "optim.lrr", {"unknown option --optim.lrr", "did you mean --optim.lr?"});
  expect_cli_error({"--trian.steps=1"}, "trian.steps", {"did you mean --train.steps?"});
  expect_cli_error({"--train.lr=1"}, "train.lr", {"did you mean --optim.lr?"});
  expect_cli_error({"--print-confg"}, "print-confg", {"did you mean --print-config?"});
  expect_cli_error({"--optim.l=1"}, "optim.l", {"unknown option"});  // no prefix guessing
  expect_cli_error({"stray"}, "stray", {"unexpected argument 'stray'"});
  expect_cli_error({"-h"}, "-h", {"unexpected argument"});
}

// Boost's error messages substitute the option's name into placeholders until none is left: a name that
// holds a placeholder itself must still give an error, not a hang.
TEST(ConfigErrors, PlaceholdersInOptionNames) {
  for (const std::string name : {"--option '%canonical_option%'=", "--%canonical_option%=", "--x%prefix%%value%="})
    EXPECT_THROW(parse({name}), ConfigError) << name;
}

TEST(ConfigErrors, WrongTypes) {
  expect_cli_error({"--optim.lr=abc"}, "optim.lr", {"'abc' is not a number", "on the command line"});
  expect_cli_error({"--optim.lr=nan"}, "optim.lr", {"must be finite"});
  expect_cli_error({"--optim.lr=inf"}, "optim.lr", {"must be finite"});
  expect_cli_error({"--optim.lr=-Infinity"}, "optim.lr", {"must be finite"});
  expect_cli_error({"--optim.lr=1e999"}, "optim.lr", {"outside the range of a double"});
  expect_cli_error({"--optim.lr=0.1x"}, "optim.lr", {"not a number"});
  expect_cli_error({"--train.steps=1.5"}, "train.steps", {"not an integer (no fractions"});
  expect_cli_error({"--train.steps=1e3"}, "train.steps", {"not an integer (no fractions"});
  expect_cli_error({"--train.steps=ten"}, "train.steps", {"not an integer"});
  expect_cli_error({"--train.steps=9223372036854775808"}, "train.steps", {"does not fit a 64-bit integer"});
  expect_cli_error({"--run.seed=-1"}, "run.seed", {"negative"});
  expect_cli_error({"--run.seed=18446744073709551616"}, "run.seed", {"does not fit"});
  expect_cli_error({"--run.overwrite=maybe"}, "run.overwrite", {"not a boolean", "yes/no"});
  expect_cli_error({"--model.hidden=256,x"}, "model.hidden", {"comma-separated list", "'x' is not an integer"});
  expect_cli_error({"--model.hidden=256,,128"}, "model.hidden", {"comma-separated list"});
  expect_cli_error({"--optim.lr"}, "optim.lr", {"missing"});
  TempDir dir;
  const std::string file = dir.write("t.ini", "[batch]\nglobal = 12.5\n");
  expect_cli_error({"--config", file}, "batch.global", {"not an integer", "in file '" + file + "'"});
}

TEST(ConfigErrors, DuplicatesFilesAndSyntax) {
  TempDir dir;
  const std::string dup = dir.write("dup.ini", "[optim]\nlr = 0.1\nmomentum = 0.5\nlr = 0.2\n");
  expect_cli_error({"--config", dup}, "optim.lr", {"given twice", dup});
  expect_cli_error({"--optim.lr=0.1", "--optim.lr=0.2"}, "optim.lr", {"given twice on the command line"});
  expect_cli_error({"--out=a.h5", "--run.out=b.h5"}, "run.out", {"given twice"});
  // The same key in two files is layering, not duplication.
  const std::string other = dir.write("other.ini", "[optim]\nlr = 0.3\n");
  const std::string single = dir.write("single.ini", "[optim]\nlr = 0.2\n");
  EXPECT_EQ(parse({"--config", single, "--config", other}).config.optim.lr, 0.3);

  expect_cli_error({"--config", dir.file("missing.ini")}, "config", {"does not exist", "missing.ini"});
  expect_cli_error({"--config", dir.file("")}, "config", {"is a directory"});
  expect_cli_error({"--config", dir.write("bad.ini", "[optim]\nlr 0.1\n")}, "config", {"bad.ini", "lr 0.1"});
}

TEST(ConfigErrors, UnreadableFile) {
  TempDir dir;
  const std::string locked = dir.write("locked.ini", "[optim]\nlr = 0.1\n");
  fs::permissions(locked, fs::perms::none);
  if (std::ifstream(locked).is_open()) GTEST_SKIP() << "running as a user who can read a mode-000 file (root)";
  expect_cli_error({"--config", locked}, "config", {"cannot open", "locked.ini"});
}

TEST(ConfigErrors, FaultSpecsAreCheckedWhileParsing) {
  expect_cli_error({"--fault", "Bad"}, "fault", {"'Bad'", "a-z", "on the command line"});
  TempDir dir;
  const std::string file = dir.write("f.ini", "fault = skip_rank:every=0\n");
  expect_cli_error({"--config", file}, "fault", {"every must be >= 1", file});
}

TEST(ConfigErrors, EnumsName) {
  expect_cli_error({"--optim.type=adam"}, "optim.type", {"'adam' is not one of: sgd, adamw"});
  expect_cli_error({"--data.source=mnist"}, "data.source", {"fashion-mnist, synthetic"});
  expect_cli_error({"--loss.type=mse"}, "loss.type", {"cross_entropy"});
  expect_cli_error({"--schedule.type=linear"}, "schedule.type", {"constant, step, cosine"});
  expect_cli_error({"--sampler.mode=random"}, "sampler.mode", {"distributed, global_batch"});
  expect_cli_error({"--dist.reduce=nccl"}, "dist.reduce", {"mpi, ring, deterministic"});
  expect_cli_error({"--precision.matmul=fp64"}, "precision.matmul", {"fp32, tf32, bf16, fp16"});
  expect_cli_error({"--run.name=a b"}, "run.name", {"A-Z a-z 0-9 . _ -"});
  expect_cli_error({"--run.name="}, "run.name", {"non-empty"});
}

TEST(ConfigErrors, ValidateRanges) {
  struct Case {
    std::function<void(RunConfig&)> change;
    std::string key;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {[](RunConfig& c) { c.run.out = "a#b.h5"; }, "run.out", "cannot be written to an INI file"},
      {[](RunConfig& c) { c.data.root = " /data"; }, "data.root", "leading/trailing blanks"},
      {[](RunConfig& c) { c.data.train_size = -1; }, "data.train_size", ">= 0"},
      {[](RunConfig& c) { c.data.test_size = -1; }, "data.test_size", ">= 0"},
      {[](RunConfig& c) { c.data.synthetic_train = 0; }, "data.synthetic_train", "[1, 2^32]"},
      {[](RunConfig& c) { c.data.synthetic_test = std::int64_t{1} << 33; }, "data.synthetic_test", "[1, 2^32]"},
      {[](RunConfig& c) { c.dist.timeout_s = -1; }, "dist.timeout_s", ">= 0"},
      {[](RunConfig& c) { c.data.synthetic_features = 0; }, "data.synthetic_features", "> 0"},
      {[](RunConfig& c) { c.data.synthetic_classes = 1; }, "data.synthetic_classes", ">= 2, got 1"},
      {[](RunConfig& c) { c.data.synthetic_teacher_hidden = 0; }, "data.synthetic_teacher_hidden", "> 0"},
      {[](RunConfig& c) { c.model.hidden = {256, 0}; }, "model.hidden", "[1, 65536], got 0"},
      {[](RunConfig& c) { c.model.hidden = {65537}; }, "model.hidden", "[1, 65536], got 65537"},
      {[](RunConfig& c) { c.model.dropout = 1.0; }, "model.dropout", "in [0,1), got 1"},
      {[](RunConfig& c) { c.model.bn_momentum = 1.5; }, "model.bn_momentum", "in [0,1]"},
      {[](RunConfig& c) { c.model.bn_eps = 0.0; }, "model.bn_eps", "> 0"},
      {[](RunConfig& c) { c.loss.label_smoothing = 1.0; }, "loss.label_smoothing", "in [0,1)"},
      {[](RunConfig& c) { c.optim.lr = 0.0; }, "optim.lr", "> 0, got 0"},
      {[](RunConfig& c) { c.optim.lr = INFINITY; }, "optim.lr", "finite"},
      {[](RunConfig& c) { c.optim.momentum = 1.0; }, "optim.momentum", "in [0,1)"},
      {[](RunConfig& c) { c.optim.momentum = 0.0, c.optim.nesterov = true; }, "optim.nesterov", "momentum > 0"},
      {[](RunConfig& c) { c.optim.weight_decay = -1e-4; }, "optim.weight_decay", ">= 0, got -1e-04"},
      {[](RunConfig& c) { c.optim.beta1 = 1.0; }, "optim.beta1", "in [0,1)"},
      {[](RunConfig& c) { c.optim.beta2 = -0.1; }, "optim.beta2", "in [0,1)"},
      {[](RunConfig& c) { c.optim.eps = 0.0; }, "optim.eps", "> 0"},
      {[](RunConfig& c) { c.optim.clip_norm = NAN; }, "optim.clip_norm", "finite"},
      {[](RunConfig& c) { c.schedule.warmup_steps = -1; }, "schedule.warmup_steps", ">= 0"},
      {[](RunConfig& c) { c.schedule.step_size = 0; }, "schedule.step_size", ">= 1"},
      {[](RunConfig& c) { c.schedule.gamma = 0.0; }, "schedule.gamma", "in (0,1]"},
      {[](RunConfig& c) { c.schedule.gamma = 1.5; }, "schedule.gamma", "in (0,1]"},
      {[](RunConfig& c) { c.schedule.min_lr = -1.0; }, "schedule.min_lr", "[0, optim.lr = 0.05]"},
      {[](RunConfig& c) { c.schedule.min_lr = 0.06; }, "schedule.min_lr", "[0, optim.lr = 0.05], got 0.06"},
      {[](RunConfig& c) { c.batch.global = 0; }, "batch.global", ">= 1"},
      {[](RunConfig& c) { c.batch.per_rank = -1; }, "batch.per_rank", ">= 0"},
      {[](RunConfig& c) { c.batch.accum_steps = 0; }, "batch.accum_steps", ">= 1"},
      {[](RunConfig& c) { c.batch.accum_steps = 3; }, "batch.global", "divisible by batch.accum_steps (3)"},
      {[](RunConfig& c) { c.train.steps = -1; }, "train.steps", ">= 0"},
      {[](RunConfig& c) { c.train.epochs = 0; }, "train.epochs", ">= 1 when train.steps = 0"},
      {[](RunConfig& c) { c.train.eval_every = -5; }, "train.eval_every", ">= 0"},
      {[](RunConfig& c) { c.dist.bucket_cap_mb = 0.0; }, "dist.bucket_cap_mb", "> 0"},
      {[](RunConfig& c) { c.dist.world_size = -1; }, "dist.world_size", ">= 0"},
      {[](RunConfig& c) { c.dist.det_chunk = -1; }, "dist.det_chunk", ">= 0"},
      {[](RunConfig& c) { c.dist.reduce = ReduceMode::deterministic, c.dist.reduce_dtype = ReduceDtype::bf16; },
       "dist.reduce_dtype", "needs dist.reduce=mpi or ring"},
      {[](RunConfig& c) { c.dist.reduce = ReduceMode::deterministic, c.dist.divide = DivideMode::before; },
       "dist.divide", "sums exactly in fixed point"},
      {[](RunConfig& c) { c.record.layers_every = -1; }, "record.layers_every", ">= 0"},
      {[](RunConfig& c) { c.record.flush_every = 0; }, "record.flush_every", ">= 1"},
      {[](RunConfig& c) { c.record.chunk_steps = 0; }, "record.chunk_steps", ">= 1"},
      {[](RunConfig& c) { c.faults = {"skip_rank:prob=2"}; }, "fault", "prob must be in (0,1]"},
      {[](RunConfig& c) { c.faults = {"bitflip:tensor=a#b"}; }, "fault", "cannot be written to an INI file"},
  };
  for (const Case& c : cases) {
    RunConfig cfg;
    c.change(cfg);
    expect_error([&] { validate(cfg); }, c.key, {c.fragment});
  }
}

TEST(ConfigErrors, ValidateBoundariesThatAreAllowed) {
  RunConfig c;
  c.model.hidden = {1, 65536};
  c.model.bn_momentum = 1.0;
  c.schedule.gamma = 1.0;
  c.schedule.min_lr = c.optim.lr;
  c.batch.accum_steps = 3;
  c.batch.per_rank = 5;  // divisibility only matters when the global batch is fixed
  c.train.epochs = 0;
  c.train.steps = 10;  // epochs are ignored when steps are given
  c.data.train_size = 0;
  c.record.layers_every = 0;
  EXPECT_NO_THROW(validate(c));
}
