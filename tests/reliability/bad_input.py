"""The bad-input corpus (issue 9, item 1): a table of bad configurations and inputs, each run through the
real binary under mpiexec. Every case must

  * exit with its code: 2 for a usage, configuration or input error, 3 for an I/O failure at run time;
  * print exactly one message, on stderr, starting "divsim: error:" and naming the key or file (every
    rank fails the same way; one of them reports), and nothing on stdout;
  * leave its folder exactly as it was: no output, no .partial, no journal, no created folder;
  * finish within the time limit (a hang is the worst failure on a batch cluster).

Cases marked `known` are defects reported to the owner of the code (see docs/reliability.md); they are
expected to fail, and the corpus fails as soon as one of them passes, so the mark gets removed.

    bad_input.py --divsim BUILD/divsim --mpiexec mpiexec --workdir DIR [--only SUBSTRING] [--jobs N]
"""
import argparse
import concurrent.futures
import os
import shutil
import stat
import struct
import sys
from dataclasses import dataclass, field

import idx_fixtures as idx
from reliability_lib import run_job, snapshot

# A valid, small and fast run: each bad case changes one thing of it.
SYNTH = ["--data.source=synthetic", "--data.synthetic_train=512", "--data.synthetic_test=64",
         "--data.synthetic_features=16", "--model.hidden=8", "--train.steps=2", "--record.layers_every=0"]
IDX = ["--data.source=fashion-mnist", "--data.root=data", "--model.hidden=8", "--train.steps=2",
       "--batch.global=24", "--record.layers_every=0"]
H5 = ["--data.source=hdf5", "--data.path=data.h5", "--model.hidden=8", "--train.steps=2", "--batch.global=24",
      "--record.layers_every=0"]
TEXT = ["--data.source=text", "--data.path=t.txt", "--model.type=gpt", "--model.block_size=8", "--model.dim=8",
        "--model.depth=1", "--model.heads=2", "--train.steps=2", "--batch.global=2", "--record.layers_every=0"]
LONG = "a" * 5000


@dataclass
class Case:
    name: str
    args: list
    needles: list                  # every one must appear in the message
    code: int = 2
    base: list = field(default_factory=lambda: SYNTH)
    ranks: int = 2
    setup: object = None           # setup(case_dir) creates the files the case needs
    known: str = ""                # a reported defect: expected to fail until it is fixed
    mpmd: list = None              # per-rank argument lists instead of one (mpiexec A : B)
    timeout: float = 60
    not_as_root: bool = False      # root writes into read-only folders: the case cannot fail there


def ini(name, text):
    def setup(d):
        with open(os.path.join(d, name), "w") as fh:
            fh.write(text)
    return setup


def data(changes=None, raw=None):
    return lambda d: idx.make_folder(os.path.join(d, "data"), changes, raw)


def raw_file(name, data):
    def setup(d):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
    return setup


def sparse(name, size):
    """A file of `size` bytes that takes no disk space (a hole): only its size matters to the check."""
    def setup(d):
        with open(os.path.join(d, name), "wb") as fh:
            fh.truncate(size)
    return setup


def touch(name):
    return ini(name, "not an HDF5 file\n")


def mkdir(name):
    return lambda d: os.makedirs(os.path.join(d, name))


def fifo(name):
    return lambda d: os.mkfifo(os.path.join(d, name))


def data_with_dir_as(name):
    def setup(d):
        data({name: None})(d)
        os.makedirs(os.path.join(d, "data", name))
    return setup


def h5data(edit=None):
    """data.h5: a valid data file (48 / 16 samples of 6x6 bytes, labels 0..2), then edit(file) breaks it."""
    def setup(d):
        import h5py
        import numpy as np
        rng = np.random.default_rng(0)
        with h5py.File(os.path.join(d, "data.h5"), "w") as f:
            for split, n in (("train", 48), ("test", 16)):
                f[f"{split}/x"] = rng.integers(0, 256, (n, 6, 6), dtype=np.uint8)
                f[f"{split}/y"] = np.arange(n) % 3
            if edit:
                edit(f, np)
    return setup


def h5replace(name, make):
    """h5data with dataset `name` replaced by make(np) (a numpy array)."""
    def edit(f, np):
        del f[name]
        f[name] = make(np)
    return h5data(edit)


def h5truncated(d):
    h5data()(d)
    path = os.path.join(d, "data.h5")
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)


def h5declared(samples):
    """Training shapes that claim `samples` samples of 1024 bytes, with no data written (chunks never
    allocated: the file stays small)."""
    def edit(f, np):
        for name in ("train/x", "train/y"):
            del f[name]
        f.create_dataset("train/x", shape=(samples, 1024), dtype=np.uint8, chunks=(64, 1024))
        f.create_dataset("train/y", shape=(samples,), dtype=np.int64, chunks=(4096,))
    return h5data(edit)


def readonly_folder(d):
    os.makedirs(os.path.join(d, "ro"))
    os.chmod(os.path.join(d, "ro"), stat.S_IRUSR | stat.S_IXUSR)


V = idx.valid_files()
TI, TL, EI, EL = idx.TRAIN_IMAGES, idx.TRAIN_LABELS, idx.TEST_IMAGES, idx.TEST_LABELS

CASES = [
    # --- unknown sections and keys
    Case("unknown key", ["--no.such=1"], ["no.such"]),
    Case("option without a name", ["--="], ["command line"]),
    Case("misspelt key", ["--optim.lrr=0.1"], ["optim.lrr", "optim.lr"]),
    Case("key prefix is not a key", ["--optim.l=0.1"], ["optim.l"]),
    Case("section without key", ["--optim=1"], ["optim"]),
    Case("positional argument", ["stray"], ["stray"]),
    Case("single-dash option", ["-x"], ["-x"]),
    Case("unknown section in file", ["--config=c.ini"], ["nosuch", "c.ini"], setup=ini("c.ini", "[nosuch]\na = 1\n")),
    Case("unknown key in file", ["--config=c.ini"], ["optim.lrr", "c.ini"], setup=ini("c.ini", "[optim]\nlrr = 0.1\n")),
    Case("empty section name in file", ["--config=c.ini"], ["c.ini"], setup=ini("c.ini", "[]\nlr = 0.1\n")),
    Case("fault line inside a section", ["--config=c.ini"], ["fault", "c.ini"],
         setup=ini("c.ini", "[optim]\nlr = 0.1\nfault = bitflip\n")),
    # --- wrong types
    Case("text for a number", ["--optim.lr=abc"], ["optim.lr", "abc"]),
    Case("fraction for an integer", ["--train.steps=1.5"], ["train.steps", "1.5"]),
    Case("exponent for an integer", ["--train.steps=1e3"], ["train.steps"]),
    Case("word for a boolean", ["--run.overwrite=maybe"], ["run.overwrite", "maybe"]),
    Case("number for a boolean", ["--model.batchnorm=2"], ["model.batchnorm"]),
    Case("text in a width list", ["--model.hidden=256,abc"], ["model.hidden", "abc"]),
    Case("trailing comma in a width list", ["--model.hidden=256,"], ["model.hidden"]),
    Case("negative unsigned seed", ["--run.seed=-1"], ["run.seed"]),
    Case("word for the world size", ["--dist.world_size=two"], ["dist.world_size"]),
    Case("hex for an integer", ["--train.steps=0x10"], ["train.steps"]),
    Case("wrong type in a file", ["--config=c.ini"], ["optim.lr", "c.ini"], setup=ini("c.ini", "[optim]\nlr = fast\n")),
    # --- out-of-range numbers and unknown choices
    Case("negative learning rate", ["--optim.lr=-1"], ["optim.lr"]),
    Case("zero learning rate", ["--optim.lr=0"], ["optim.lr"]),
    Case("dropout of one", ["--model.dropout=1"], ["model.dropout"]),
    Case("momentum above one", ["--optim.momentum=1.5"], ["optim.momentum"]),
    Case("zero width", ["--model.hidden=0"], ["model.hidden"]),
    Case("width beyond the limit", ["--model.hidden=100000"], ["model.hidden"]),
    Case("zero global batch", ["--batch.global=0"], ["batch.global"]),
    Case("zero accumulation", ["--batch.accum_steps=0"], ["batch.accum_steps"]),
    Case("zero decay factor", ["--schedule.gamma=0"], ["schedule.gamma"]),
    Case("floor above the learning rate", ["--schedule.min_lr=1"], ["schedule.min_lr"]),
    Case("zero flush interval", ["--record.flush_every=0"], ["record.flush_every"]),
    Case("negative chunk length", ["--record.chunk_steps=-5"], ["record.chunk_steps"]),
    Case("label smoothing of one", ["--loss.label_smoothing=1"], ["loss.label_smoothing"]),
    Case("negative steps", ["--train.steps=-1"], ["train.steps"]),
    Case("zero bucket size", ["--dist.bucket_cap_mb=0"], ["dist.bucket_cap_mb"]),
    Case("negative train size", ["--data.train_size=-3"], ["data.train_size"]),
    Case("zero loss scale", ["--precision.loss_scale_init=0"], ["precision.loss_scale_init"]),
    Case("one class", ["--data.synthetic_classes=1"], ["data.synthetic_classes"]),
    Case("unknown optimizer", ["--optim.type=lamb"], ["optim.type", "lamb"]),
    Case("unknown reduction", ["--dist.reduce=nccl"], ["dist.reduce"]),
    Case("unknown precision", ["--precision.matmul=fp8"], ["precision.matmul"]),
    Case("nccl without cuda", ["--dist.backend=nccl"], ["dist.backend"]),
    Case("unknown non-finite policy", ["--train.on_nonfinite=ignore"], ["train.on_nonfinite"]),
    Case("nesterov without momentum", ["--optim.nesterov=true", "--optim.momentum=0"], ["optim.nesterov"]),
    Case("run name with a slash", ["--run.name=a/b"], ["run.name"]),
    # --- NaN and infinity literals
    Case("nan learning rate", ["--optim.lr=nan"], ["optim.lr"]),
    Case("NaN dropout", ["--model.dropout=NaN"], ["model.dropout"]),
    Case("inf learning rate", ["--optim.lr=inf"], ["optim.lr"]),
    Case("-infinity weight decay", ["--optim.weight_decay=-infinity"], ["optim.weight_decay"]),
    Case("beyond double range", ["--optim.lr=1e400"], ["optim.lr"]),
    Case("nan in a file", ["--config=c.ini"], ["optim.eps", "c.ini"], setup=ini("c.ini", "[optim]\neps = nan\n")),
    # --- empty and huge values
    Case("empty number", ["--optim.lr="], ["optim.lr"]),
    Case("empty integer", ["--train.steps="], ["train.steps"]),
    Case("empty run name", ["--run.name="], ["run.name"]),
    Case("empty choice", ["--optim.type="], ["optim.type"]),
    Case("blank number", ["--optim.lr=   "], ["optim.lr"]),
    Case("integer overflow", ["--train.steps=99999999999999999999"], ["train.steps"]),
    Case("unsigned overflow", ["--run.seed=99999999999999999999999"], ["run.seed"]),
    Case("5000-character run name", ["--run.name=" + LONG], ["run.out"]),
    Case("5000-character value", ["--optim.type=" + LONG], ["optim.type"]),
    Case("huge width", ["--model.hidden=9223372036854775807"], ["model.hidden"]),
    Case("huge synthetic set", ["--data.synthetic_train=5000000000"], ["data.synthetic_train"]),
    # --- sizes that pass every range check but cannot fit in memory (Linux would overcommit, then OOM-kill);
    # each needs about a terabyte, beyond any node the suite runs on
    Case("model larger than memory", ["--model.hidden=" + ",".join(["65536"] * 16)], ["model.hidden", "GiB"]),
    Case("replicas larger than memory", ["--model.hidden=16384,16384", "--dist.world_size=256"], ["model.hidden", "GiB"]),
    Case("synthetic set larger than memory", ["--data.synthetic_train=4000000000"], ["data.synthetic_train", "GiB"]),
    Case("train size beyond the data", ["--data.train_size=1000"], ["data.train_size"], base=IDX, setup=data()),
    Case("text file larger than memory", [], ["data.path", "t.txt", "GiB"], base=TEXT, setup=sparse("t.txt", 1 << 41)),
    # --- text data a GPT cannot read
    Case("text file that is not UTF-8", [], ["t.txt", "UTF-8", "byte 3"], base=TEXT,
         setup=raw_file("t.txt", b"abc\xff and more text\n" * 20)),
    Case("text model on images", ["--data.source=fashion-mnist", "--data.root=data"], ["model.type"], base=TEXT,
         setup=data()),
    Case("image model on text", ["--model.type=mlp"], ["model.type", "gpt"], base=TEXT,
         setup=ini("t.txt", "%\n".join(f"document {i} with some text\n" for i in range(30)))),
    # --- duplicated keys
    Case("key given twice", ["--optim.lr=0.1", "--optim.lr=0.2"], ["optim.lr", "twice"]),
    Case("alias and key together", ["--out=a.h5", "--run.out=b.h5"], ["run.out", "twice"]),
    Case("key twice in a file", ["--config=c.ini"], ["optim.lr", "c.ini"],
         setup=ini("c.ini", "[optim]\nlr = 0.1\nlr = 0.2\n")),
    # --- malformed fault specs
    Case("unknown fault", ["--fault=no_such_fault"], ["fault", "no_such_fault"]),
    Case("fault rank beyond the world", ["--fault=skip_rank:ranks=5"], ["fault", "ranks"]),
    Case("fault rank range beyond the world", ["--fault=bitflip:ranks=0-2"], ["fault", "ranks"]),
    Case("fault stop equal to start", ["--fault=skip_rank:start=5,stop=5"], ["fault", "stop"]),
    Case("fault stop before start", ["--fault=skip_rank:start=10,stop=3"], ["fault", "stop"]),
    Case("fault probability zero", ["--fault=bitflip:prob=0"], ["fault", "prob"]),
    Case("fault probability above one", ["--fault=bitflip:prob=1.5"], ["fault", "prob"]),
    Case("fault probability nan", ["--fault=bitflip:prob=nan"], ["fault", "prob"]),
    Case("unknown fault key", ["--fault=skip_rank:bogus=1"], ["fault", "bogus"]),
    Case("empty fault", ["--fault="], ["fault"]),
    Case("fault key twice", ["--fault=skip_rank:ranks=1,ranks=0"], ["fault", "twice"]),
    Case("fault entry without value", ["--fault=skip_rank:start"], ["fault", "start"]),
    Case("negative fault rank", ["--fault=skip_rank:ranks=-1"], ["fault", "ranks"]),
    Case("reversed fault rank range", ["--fault=skip_rank:ranks=1-0"], ["fault", "ranks"]),
    Case("zero fault period", ["--fault=skip_rank:every=0"], ["fault", "every"]),
    Case("negative fault start", ["--fault=skip_rank:start=-1"], ["fault", "start"]),
    Case("upper-case fault name", ["--fault=Skip_Rank"], ["fault", "Skip_Rank"]),
    Case("bad fault parameter value", ["--fault=skip_rank:mode=sideways"], ["fault", "mode"]),
    Case("unknown fault in a file", ["--config=c.ini"], ["fault", "bogus"], setup=ini("c.ini", "fault = bogus\n")),
    # --- impossible batch splits and layouts
    Case("global batch not divisible by the ranks", ["--batch.global=100"], ["batch.global"], ranks=3),
    Case("global batch not divisible by accumulation", ["--batch.global=10", "--batch.accum_steps=3"],
         ["batch.global"]),
    Case("logical ranks not a multiple of processes", ["--dist.world_size=5"], ["dist.world_size"]),
    Case("global batch larger than the data", ["--batch.global=1024"], ["batch.global"]),
    Case("deterministic chunk not dividing the micro-batch",
         ["--dist.reduce=deterministic", "--batch.global=24", "--dist.det_chunk=5"], ["dist.det_chunk"]),
    Case("reduction_order with deterministic reduce", ["--dist.reduce=deterministic", "--fault=reduction_order"],
         ["fault"]),
    Case("augmentation of synthetic data", ["--data.augment=true"], ["data.augment"]),
    # --- dataset files (fixture folders)
    Case("missing data folder", ["--data.root=nowhere"], [TI], base=IDX),
    Case("missing training labels", [], [TL], base=IDX, setup=data({TL: None})),
    Case("missing test images", [], [EI], base=IDX, setup=data({EI: None})),
    Case("image file with a label magic", [], [TI, "magic"], base=IDX,
         setup=data({TI: idx.idx_images(96, magic=0x801)})),
    Case("label file with an image magic", [], [TL, "magic"], base=IDX,
         setup=data({TL: idx.idx_labels(96, magic=0x803)})),
    Case("text file instead of IDX", [], [TI], base=IDX, setup=data(raw={TI: b"hello, world\n" * 10})),
    Case("zero images", [], [TI, "empty"], base=IDX, setup=data({TI: struct.pack(">IIII", 0x803, 0, 28, 28)})),
    Case("implausible image size", [], [TI], base=IDX, setup=data({TI: struct.pack(">IIII", 0x803, 1, 5000, 5000)})),
    Case("header claims more images than stored", [], [TI, "truncated"], base=IDX,
         setup=data({TI: struct.pack(">IIII", 0x803, 1000, 28, 28) + V[TI][16:]})),
    Case("header cut short", [], [TL], base=IDX, setup=data({TL: V[TL][:6]})),
    Case("truncated gzip", [], [TI], base=IDX, setup=data(raw={TI: idx.truncated_gz(V[TI])})),
    Case("gzip without its trailer", [], [EL], base=IDX, setup=data(raw={EL: idx.gz_bytes(V[EL])[:-8]})),
    Case("corrupt gzip", [], [TI], base=IDX, setup=data(raw={TI: idx.corrupt_gz(V[TI])})),
    Case("empty file", [], [TL], base=IDX, setup=data(raw={TL: b""})),
    Case("fewer labels than images", [], [TL, "labels"], base=IDX, setup=data({TL: idx.idx_labels(95)})),
    Case("label out of range", [], [EL, "out of range"], base=IDX,
         setup=data({EL: V[EL][:8] + bytes([10]) + V[EL][9:]})),
    Case("test images of another size", [], [EI], base=IDX, setup=data({EI: idx.idx_images(48, 14, 14)})),
    Case("trailing data after the images", [], [TI, "more data"], base=IDX, setup=data({TI: V[TI] + b"\0" * 100})),
    Case("folder instead of an image file", [], [TI], base=IDX, setup=data_with_dir_as(TI)),
    Case("pipe instead of a label file", [], [TL], base=IDX, timeout=15,
         setup=lambda d: (data({TL: None})(d), os.mkfifo(os.path.join(d, "data", TL)))),
    # --- HDF5 data files (data.source=hdf5)
    Case("hdf5 source without data.path", ["--data.path="], ["data.path"], base=H5),
    Case("missing hdf5 file", ["--data.path=nothing.h5"], ["nothing.h5", "no such file"], base=H5),
    Case("text file instead of hdf5", [], ["data.h5", "not an HDF5 file"], base=H5, setup=touch("data.h5")),
    Case("hdf5 data path is a folder", [], ["data.h5", "folder"], base=H5, setup=mkdir("data.h5")),
    Case("hdf5 data path is a pipe", [], ["data.h5", "not a regular file"], base=H5, setup=fifo("data.h5"),
         timeout=15),
    Case("truncated hdf5 file", [], ["data.h5"], base=H5, setup=h5truncated),
    Case("hdf5 without test labels", [], ["data.h5", "/test/y"], base=H5,
         setup=h5data(lambda f, np: f.__delitem__("test/y"))),
    Case("hdf5 samples are a group", [], ["/train/x", "not a dataset"], base=H5,
         setup=h5data(lambda f, np: (f.__delitem__("train/x"), f.create_group("train/x")))),
    Case("hdf5 samples with 4 dimensions", [], ["/train/x", "dimensions"], base=H5,
         setup=h5replace("train/x", lambda np: np.zeros((48, 2, 3, 6), np.uint8))),
    Case("hdf5 scalar samples", [], ["/train/x", "scalar"], base=H5,
         setup=h5replace("train/x", lambda np: np.uint8(3))),
    Case("hdf5 without samples", [], ["/train/x", "no samples"], base=H5,
         setup=h5replace("train/x", lambda np: np.zeros((0, 6, 6), np.uint8))),
    Case("hdf5 string samples", [], ["/train/x", "strings"], base=H5,
         setup=h5replace("train/x", lambda np: np.array([[b"ab"] * 6] * 48))),
    Case("hdf5 int32 pixels", [], ["/train/x", "uint8"], base=H5,
         setup=h5replace("train/x", lambda np: np.zeros((48, 6, 6), np.int32))),
    Case("hdf5 fewer labels than samples", [], ["/train/y", "47 labels"], base=H5,
         setup=h5replace("train/y", lambda np: np.arange(47) % 3)),
    Case("hdf5 labels of 2 dimensions", [], ["/train/y", "one label per sample"], base=H5,
         setup=h5replace("train/y", lambda np: np.zeros((48, 1), np.int64))),
    Case("hdf5 float labels", [], ["/train/y", "integer labels"], base=H5,
         setup=h5replace("train/y", lambda np: np.zeros(48))),
    Case("hdf5 negative label", [], ["/test/y", "-1"], base=H5,
         setup=h5replace("test/y", lambda np: np.where(np.arange(16) == 5, -1, np.arange(16) % 3))),
    Case("hdf5 labels all zero", [], ["data.h5", "at least 2 classes"], base=H5,
         setup=h5data(lambda f, np: [f[n].__setitem__(slice(None), 0) for n in ("train/y", "test/y")])),
    Case("hdf5 label beyond the classes attribute", [], ["/train/y", "classes"], base=H5,
         setup=h5data(lambda f, np: f["train/y"].attrs.__setitem__("classes", 2))),
    Case("hdf5 classes attribute not an integer", [], ["/train/y", "classes"], base=H5,
         setup=h5data(lambda f, np: f["train/y"].attrs.__setitem__("classes", "three"))),
    Case("hdf5 test samples of another shape", [], ["/test/x", "one shape"], base=H5,
         setup=h5replace("test/x", lambda np: np.zeros((16, 5, 5), np.uint8))),
    Case("hdf5 bytes for training, floats for test", [], ["/test/x", "both"], base=H5,
         setup=h5replace("test/x", lambda np: np.zeros((16, 6, 6), np.float32))),
    Case("hdf5 NaN feature", [], ["/train/x", "not finite"], base=H5,
         setup=h5data(lambda f, np: [f.__delitem__(n) or f.__setitem__(n, v) for n, v in
                                     (("train/x", np.where(np.arange(48 * 36).reshape(48, 36) == 100, np.nan, 1.0)),
                                      ("test/x", np.ones((16, 36))))])),
    Case("hdf5 train size beyond the samples", ["--data.train_size=100"], ["data.train_size", "48 samples"], base=H5,
         setup=h5data()),
    Case("augmentation of flat hdf5 features", ["--data.augment=true"], ["data.augment"], base=H5,
         setup=h5data(lambda f, np: [f.__delitem__(n) or f.__setitem__(n, np.zeros((k, 36), np.uint8)) for n, k in
                                     (("train/x", 48), ("test/x", 16))])),
    Case("hdf5 shapes beyond memory", [], ["data.path", "data.h5", "GiB per process"], base=H5, setup=h5declared(2 ** 26)),
    Case("hdf5 implausible shapes", [], ["/train/x", "implausibly many"], base=H5, setup=h5declared(2 ** 31)),
    # --- configuration files
    Case("config file is a folder", ["--config=cfgdir"], ["cfgdir", "directory"], setup=mkdir("cfgdir")),
    Case("missing config file", ["--config=missing.ini"], ["missing.ini"]),
    Case("empty config path", ["--config="], ["config"]),
    Case("config line without '='", ["--config=c.ini"], ["c.ini"], setup=ini("c.ini", "[optim]\nlr\n")),
    Case("binary config file", ["--config=c.ini"], ["c.ini"],
         setup=lambda d: open(os.path.join(d, "c.ini"), "wb").write(bytes(range(256)) * 4)),
    Case("config file is a pipe", ["--config=c.ini"], ["c.ini"], setup=fifo("c.ini"), timeout=15),
    # --- output paths
    Case("existing output", ["--run.out=x.h5"], ["run.out", "x.h5"], setup=touch("x.h5")),
    # A configuration error is reported as itself, not as the output file in the way (issue 36).
    Case("unknown fault, output exists", ["--run.out=x.h5", "--fault=skip_rnk:ranks=1"], ["fault", "skip_rnk"],
         setup=touch("x.h5")),
    Case("fault rank beyond the world, output exists", ["--run.out=x.h5", "--fault=skip_rank:ranks=7"],
         ["fault", "ranks"], setup=touch("x.h5")),
    Case("fault against the reduce mode, output exists", ["--run.out=x.h5", "--dist.reduce=deterministic",
         "--fault=reduction_order:mode=bucket,cap_mb=0.1,ranks=1"], ["fault", "deterministic"], setup=touch("x.h5")),
    Case("output is a folder", ["--run.out=outdir"], ["run.out", "outdir"], setup=mkdir("outdir")),
    Case("output under a regular file", ["--run.out=afile/x.h5"], ["run.out", "afile"], setup=touch("afile")),
    Case("output is a pipe, overwrite on", ["--run.out=p.h5", "--run.overwrite=true"], ["run.out", "p.h5"],
         setup=fifo("p.h5")),
    Case("in-progress file is a folder", ["--run.out=x.h5"], ["run.out", "x.h5.partial"], setup=mkdir("x.h5.partial")),
    Case("output path with '#'", ["--run.out=a#b.h5"], ["run.out"]),
    Case("output folder not writable", ["--run.out=ro/x.h5"], ["run.out", "ro"], setup=readonly_folder,
         not_as_root=True),
    # --- configuration skew between ranks (MPMD launch: each rank its own arguments)
    Case("configuration skew", [], ["optim.lr", "rank 1"], mpmd=[["--optim.lr=0.1"], ["--optim.lr=0.2"]]),
]


def without_keys(base, args):
    """base minus the settings that args give again (a key may appear once on the command line)."""
    given = {a.split("=", 1)[0] for a in args}
    return [b for b in base if b.split("=", 1)[0] not in given]


def run_case(case, args):
    d = os.path.join(args.workdir, "".join(c if c.isalnum() else "_" for c in case.name))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if case.setup:
        case.setup(d)
    if case.not_as_root and os.geteuid() == 0:
        return case, None, "skipped: running as root"
    before = snapshot(d)
    common = [args.divsim, "--quiet", *without_keys(case.base, case.args + sum(case.mpmd or [], []))]
    if case.mpmd:
        argv = []
        for i, extra in enumerate(case.mpmd):
            argv += ([":", "-n", "1"] if i else []) + common + extra
        rc, out, err = run_job(args.mpiexec, 1, argv, d, timeout=case.timeout)
    else:
        rc, out, err = run_job(args.mpiexec, case.ranks, common + case.args, d, timeout=case.timeout)
    problems = []
    if rc is None:
        problems.append(f"still running after {case.timeout:.0f} s (killed)")
    elif rc != case.code:
        problems.append(f"exit {rc}, expected {case.code}")
    message = err.strip()
    if message.count("divsim: error") != 1 or not message.startswith("divsim: error: "):
        problems.append("not exactly one 'divsim: error:' message")
    missing = [n for n in case.needles if n not in message]
    if missing:
        problems.append(f"message does not name {missing}")
    if out.strip():
        problems.append(f"stdout not empty: {out.strip()[:200]!r}")
    after = snapshot(d)
    if after != before:
        changed = sorted(set(after.items()) ^ set(before.items()))
        problems.append(f"files changed: {[c[0] for c in changed][:6]}")
    return case, problems, message


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--divsim", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", default="", help="run only cases whose name contains this")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    args.divsim = os.path.abspath(args.divsim)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    cases = [c for c in CASES if args.only in c.name]
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "case names must be unique"

    failures, counts = [], {"ok": 0, "known": 0, "skipped": 0}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for case, problems, message in pool.map(lambda c: run_case(c, args), cases):
            first_line = message.splitlines()[0][:150] if message else ""
            if problems is None:
                counts["skipped"] += 1
                print(f"SKIP  {case.name}: {message}")
            elif case.known and problems:
                counts["known"] += 1
                print(f"KNOWN {case.name}: {'; '.join(problems)} [{case.known}]")
            elif case.known:
                failures.append(case.name)
                print(f"FIXED {case.name}: passes now; remove its `known` mark [{case.known}]")
            elif problems:
                failures.append(case.name)
                print(f"FAIL  {case.name}: {'; '.join(problems)}\n      args {case.args}\n"
                      f"      stderr: {message[:600]}")
            else:
                counts["ok"] += 1
                print(f"ok    {case.name}: {first_line}")
    print(f"\n{len(cases)} cases: {counts['ok']} ok, {counts['known']} known defects, {counts['skipped']} skipped, "
          f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
