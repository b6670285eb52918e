"""Engine integration tests (issue: the training-loop engine): schema, replicas in sync, bitwise
reproducibility, bad input, --print-config round trip, the default scenario's accuracy, the HDF5 data source, and no
allocation in the step loop."""
import os
import sys
import pathlib

import h5py
import numpy as np

from divsim_testlib import datasets, expect, parse_args, run, same_bits

SMALL = ["--data.train_size=4096", "--data.test_size=1000", "--batch.global=128", "--train.steps=40",
         "--record.layers_every=5", "--record.flush_every=7", "--record.samples=true", "--train.eval_every=20"]


def schema(args):
    w = args.ranks
    run(args, SMALL + ["--run.out=run.h5"])
    path = os.path.join(args.workdir, "run.h5")
    expect(os.path.exists(path) and not os.path.exists(path + ".partial"), "final file exists, no .partial left")
    with h5py.File(path, "r") as f:
        expect(f.attrs["schema_version"] == 1 and f.attrs["world_size"] == w, "root attributes")
        for key in ["divsim_version", "git_sha", "created", "config", "env"]:
            expect(key in f.attrs, f"root attribute {key}")
        # Collectives wait by polling with a core per process and sleep when processes share cores.
        cpus = len(os.sched_getaffinity(0))
        node = f"node={w} processes on {cpus} cpus, waits {'sleep' if w > cpus else 'yield'}"
        expect(node in f.attrs["env"].splitlines(), f"env records {node!r}: {f.attrs['env']!r}")
        S, L, B = 40, 5, 128 // w
        shapes = {"train/step": (S,), "train/global_loss": (S,), "train/loss": (S, w), "train/grad_norm_local": (S, w),
                  "train/grad_norm": (S, w), "train/param_norm": (S, w), "train/param_hash": (S, w),
                  "train/lr": (S, w), "train/loss_scale": (S, w), "train/samples": (S, w, B),
                  "layers/names": (L,), "layers/step": (8,), "layers/forward": (8, w, L, 5),
                  "layers/backward": (8, w, L, 5), "layers/grad_norm": (8, w, L), "eval/step": (2,),
                  "eval/loss": (2, w), "eval/accuracy": (2, w)}
        for name, shape in shapes.items():
            d = f[name]
            expect(d.shape == shape, f"{name} shape {d.shape} == {shape}")
            expect(len(d.attrs["dims"].split(",")) == len(shape) and "description" in d.attrs, f"{name} dims/description")
        expect(f["train/param_hash"].dtype == np.uint64, "param_hash is uint64")
        expect((f["train/step"][()] == np.arange(S)).all(), "train/step = 0..S-1")
        h = f["train/param_hash"][()]
        expect((h == h[:, :1]).all(), "all ranks' param_hash equal at every step (replicas in sync)")
        expect(len(np.unique(h[:, 0])) == S, "param_hash changes every step")
        loss = f["train/loss"][()]
        expect(np.isclose(f["train/global_loss"][()], loss.mean(axis=1), rtol=1e-12).all(), "global_loss = mean of rank losses")
        samples = f["train/samples"][()]
        expect(all(len(np.unique(samples[s])) == 128 for s in range(S)), "no sample twice in a global batch")
        expect(loss[-1].mean() < loss[0].mean(), "loss decreases")
        acc = f["eval/accuracy"][()]
        expect((acc == acc[:, :1]).all() and acc[-1, 0] > 0.6, f"eval accuracy equal on all ranks and learning ({acc[-1, 0]:.3f})")


def reproducible(args):
    extra = SMALL + (["--model.batchnorm=true", "--model.dropout=0.2", "--data.augment=true"] if args.bn_dropout else [])
    run(args, extra + ["--run.out=a.h5"])
    run(args, extra + ["--run.out=b.h5"])
    a, b = datasets(os.path.join(args.workdir, "a.h5")), datasets(os.path.join(args.workdir, "b.h5"))
    for name in sorted(a):
        if name.startswith(("train/", "layers/", "eval/")):
            expect(same_bits(a[name], b[name]), f"{name} bitwise identical across two runs")
    h = a["train/param_hash"]
    expect((h == h[:, :1]).all(), "replicas in sync")


def bad_input(args):
    cases = [(["--optim.lr=-1"], "optim.lr"), (["--no.such=1"], "no.such"), (["--optim.lr=abc"], "optim.lr"),
             (["--batch.global=100"], "batch.global")]  # 100 is not divisible by 3 (run at -n 3)
    for extra, key in cases:
        out = os.path.join(args.workdir, "bad.h5")
        p = run(args, extra + ["--run.out=bad.h5"], ranks=3, check=False)
        expect(p.returncode == 2, f"{extra} exits 2 (got {p.returncode})")
        expect(key in p.stderr and p.stderr.count("error") == 1, f"{extra}: one message naming {key}: {p.stderr.strip()}")
        expect(not os.path.exists(out) and not os.path.exists(out + ".partial"), f"{extra}: no output file")
    run(args, SMALL + ["--run.out=exists.h5"])
    p = run(args, SMALL + ["--run.out=exists.h5"], check=False)
    expect(p.returncode == 2 and "run.out" in p.stderr and "exists.h5" in p.stderr and p.stderr.count("error") == 1,
           f"existing output refused with exit 2: {p.stderr.strip()}")
    p = run(args, SMALL + ["--run.out=exists.h5", "--run.overwrite=true"], check=False)
    expect(p.returncode == 0, "run.overwrite=true replaces it")


def print_config(args):
    extra = SMALL + ["--optim.type=adamw", "--optim.lr=0.001", "--model.hidden=64,32", "--run.seed=7"]
    p = run(args, extra + ["--print-config"], ranks=1)
    ini = os.path.join(args.workdir, "effective.ini")
    with open(ini, "w") as fh:
        fh.write(p.stdout)
    run(args, extra + ["--run.out=direct.h5"])
    run(args, ["--config", ini, "--run.out=replayed.h5"])
    a, b = datasets(os.path.join(args.workdir, "direct.h5")), datasets(os.path.join(args.workdir, "replayed.h5"))
    for name in ["train/global_loss", "train/param_hash", "eval/loss"]:
        expect(same_bits(a[name], b[name]), f"{name}: the printed configuration reproduces the run")


def default_accuracy(args):
    p = run(args, [], timeout=900)
    print(p.stdout.strip())
    with h5py.File(os.path.join(args.workdir, "outputs", "default.h5"), "r") as f:
        acc = f["eval/accuracy"][-1]
        h = f["train/param_hash"][()]
        expect((acc >= 0.88).all(), f"final eval accuracy >= 0.88 on every rank: {acc}")
        expect((h == h[:, :1]).all(), "param_hash equal across ranks at every step")


def read_idx(path):
    import gzip
    raw = gzip.open(path).read()
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def hdf5_source(args):
    """data.source=hdf5 reads the same samples as the IDX reader: Fashion-MNIST's bytes copied into an HDF5
    file ([N, 28, 28] uint8) give a bitwise identical run, augmentation included; the same data standardised
    by numpy (the documented formula) and stored as float32 [N, 784] gives it too, without augmentation."""
    root = "/usr/share/datasets/fashion-mnist/"
    n_train, n_test = 4096, 1000
    splits = {"train": (read_idx(root + "train-images-idx3-ubyte.gz")[:n_train],
                        read_idx(root + "train-labels-idx1-ubyte.gz")[:n_train]),
              "test": (read_idx(root + "t10k-images-idx3-ubyte.gz")[:n_test],
                       read_idx(root + "t10k-labels-idx1-ubyte.gz")[:n_test])}
    tr = splits["train"][0].reshape(n_train, -1).astype(np.int64)
    s1, s2 = tr.sum(axis=0), (tr * tr).sum(axis=0)
    mean = s1 / (255.0 * n_train)
    std = np.maximum(np.sqrt((n_train * s2 - s1 * s1) / (float(n_train) * float(n_train) * 65025.0)), 1e-3)
    with h5py.File(os.path.join(args.workdir, "bytes.h5"), "w") as fb, \
            h5py.File(os.path.join(args.workdir, "floats.h5"), "w") as ff:
        for split, (x, y) in splits.items():
            fb[f"{split}/x"], fb[f"{split}/y"] = x, y.astype(np.int64)
            ff[f"{split}/x"] = ((x.reshape(len(x), -1) / 255.0 - mean) / std).astype(np.float32)
            ff[f"{split}/y"] = y
    common = SMALL[2:] + ["--model.dropout=0.1"]
    idx = ["--data.source=fashion-mnist", f"--data.train_size={n_train}", f"--data.test_size={n_test}"]
    for name, source, extra in (("bytes", ["--data.source=hdf5", "--data.path=bytes.h5"], ["--data.augment=true"]),
                                ("floats", ["--data.source=hdf5", "--data.path=floats.h5"], [])):
        run(args, [*common, *idx, *extra, f"--run.out=idx_{name}.h5"])
        run(args, [*common, *source, *extra, f"--run.out=h5_{name}.h5"])
        a, b = datasets(os.path.join(args.workdir, f"idx_{name}.h5")), datasets(os.path.join(args.workdir, f"h5_{name}.h5"))
        differ = [k for k in a if k not in b or not same_bits(a[k], b[k])]
        expect(sorted(a) == sorted(b) and not differ,
               f"{name}: the HDF5 source's run equals the IDX source's bit for bit ({len(a)} datasets; differ: {differ})")


def step_allocations(args):
    """The step loop allocates no memory: divsim's own heap allocations (its code and the C++ library's,
    counted by the LD_PRELOAD library alloc_counter.cpp; MPICH's, HDF5's and OpenBLAS's internals are
    theirs) are the same for N and 2N steps, per process, in each reduction mode, with virtual ranks,
    BatchNorm, dropout, accumulation, layer statistics and epoch changes inside the counted steps. The
    final flush and evaluation happen once in both runs; periodic flushes are pushed past the run.
    An AVX-512 build multiplies with Eigen or OpenBLAS depending on OpenBLAS's core (model/gemm_backend.cpp;
    Eigen's own packing buffers once came from the heap at every product): there W=1 runs on both."""
    jobs = {"mpi W=1": (1, ["--dist.world_size=1", "--batch.global=256"]),
            "ring W=4 on 2 processes": (2, ["--dist.world_size=4", "--dist.reduce=ring", "--batch.global=256"]),
            "deterministic (tree: 8 chunks) W=4 on 2 processes, SyncBN, 2 micro-steps": (
                2, ["--dist.world_size=4", "--dist.reduce=deterministic", "--dist.sync_bn=true", "--batch.max_micro=32",
                    "--batch.global=256"]),
            "deterministic (fixed point: 24 chunks) W=4 on 2 processes, SyncBN, 2 micro-steps": (
                2, ["--dist.world_size=4", "--dist.reduce=deterministic", "--dist.sync_bn=true", "--batch.max_micro=30",
                    "--batch.global=240"]),
            # The other models' layers (the mlp's settings in `common` are ignored by them); each crosses
            # an epoch within 30 steps, as the jobs above do, so a first epoch change is in both counts.
            "resnet W=2, BatchNorm2d, convolutions": (2, ["--model.type=resnet", "--model.channels=4,8",
                                                         "--dist.world_size=2", "--batch.global=32"]),
            "vit W=1, attention, dropout": (1, ["--model.type=vit", "--model.dim=32", "--model.depth=2",
                                                "--model.heads=2", "--batch.global=64"]),
            "gpt deterministic W=4 on 2 processes, tied head, token count": (
                2, ["--model.type=gpt", "--data.source=fortunes", "--model.block_size=32", "--model.dim=32",
                    "--model.depth=2", "--model.heads=2", "--dist.world_size=4", "--dist.reduce=deterministic",
                    "--batch.global=128"])}
    common = ["--data.train_size=2048", "--data.test_size=1000", "--model.batchnorm=true",
              "--model.dropout=0.1", "--record.layers_every=10", "--record.flush_every=1000", "--train.eval_every=0"]

    def count(name, procs, extra, env=()):
        counts = []
        for steps in (30, 60):
            out = os.path.join(args.workdir, f"counts{len(counts)}")
            os.makedirs(out, exist_ok=True)
            options = ["-genv", "LD_PRELOAD", args.preload, "-genv", "DIVSIM_ALLOC_COUNT_DIR", out]
            for key, value in env:
                options += ["-genv", key, value]
            run(args, common + extra + [f"--train.steps={steps}", f"--run.out=alloc{steps}.h5", "--run.overwrite=true"],
                ranks=procs, mpiexec_options=options)
            files = [os.path.join(out, f"rank{r}.txt") for r in range(procs)]
            expect(all(os.path.exists(f) for f in files), f"{name}, {steps} steps: the counter reported for every process")
            counts.append([int(pathlib.Path(f).read_text()) for f in files])
        with h5py.File(os.path.join(args.workdir, "alloc60.h5"), "r") as f:
            env_lines = f.attrs["env"].splitlines()
        gemm = next(line for line in env_lines if line.startswith("gemm="))
        expect(all(c > 0 for c in counts[0]), f"{name}: the counter sees divsim's allocations ({counts[0]})")
        expect(counts[0] == counts[1], f"{name} ({gemm}): allocations per process, 30 steps {counts[0]}, 60 steps {counts[1]}")
        return env_lines, gemm

    for name, (procs, extra) in jobs.items():
        env_lines, _ = count(name, procs, extra)
    if any(line.startswith("eigen_simd=AVX512") for line in env_lines):
        for core, backend in (("Haswell", "gemm=Eigen"), ("SkylakeX", "gemm=OpenBLAS")):
            _, gemm = count(f"mpi W=1, OPENBLAS_CORETYPE={core}", *jobs["mpi W=1"], env=[("OPENBLAS_CORETYPE", core)])
            expect(gemm.startswith(backend), f"OPENBLAS_CORETYPE={core} on an AVX-512 build: {backend}... ({gemm})")


def oversubscription(args):
    """More processes than CPUs: one line on stderr says so and names the folded command; with a CPU per
    process, nothing. Without --quiet, which silences the note with the progress line."""
    import subprocess
    cpus = len(os.sched_getaffinity(0))
    procs = cpus + 1
    if procs > 9:
        print(f"SKIP: {cpus} CPUs; oversubscribing them would start {procs} processes")
        sys.exit(77)
    world = 2 * procs
    fold = max(p for p in range(1, cpus + 1) if world % p == 0)
    base = [*(a for a in SMALL if not a.startswith(("--train.steps", "--batch.global"))), "--train.steps=2",
            f"--batch.global={16 * world}", "--dist.reduce=ring"]
    for n, w in ((procs, world), (fold, world)):
        cmd = [args.mpiexec, "-n", str(n), args.divsim, *base, f"--dist.world_size={w}", f"--run.out=o{n}.h5"]
        proc = subprocess.run(cmd, cwd=args.workdir, capture_output=True, text=True, timeout=300)
        expect(proc.returncode == 0, f"{n} processes for {w} ranks on {cpus} CPUs run")
        notes = [line for line in proc.stderr.splitlines() if line.startswith("divsim: note:")]
        if n > cpus:
            want = f"mpiexec -n {fold} ... --dist.world_size={world}"
            expect(len(notes) == 1 and f"{n} processes share {cpus} CPUs" in notes[0] and want in notes[0],
                   f"one note names the folded command {want!r}: {notes}")
        else:
            expect(notes == [], f"no note with {n} processes on {cpus} CPUs")


def terminate_after_checkpoint(args, cmd, ckpt):
    """Starts `cmd` (mpiexec with 2 divsim processes), waits for its first checkpoint and sends SIGTERM to
    the ranks, as Slurm does (mpiexec's own exit code for a signal to itself is its own); returns the
    finished job's (returncode, stderr)."""
    import signal
    import subprocess
    import time
    job = subprocess.Popen(cmd, cwd=args.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # Signalled as soon as the first checkpoint exists: a small model runs hundreds of steps a second
    # in a Release build, so any wait here lets a short job finish before the signal.
    while not os.path.exists(ckpt) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)

    def descendants(pid):
        kids = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                kids += [int(k) for k in fh.read().split()]
        return kids + [d for k in kids for d in descendants(k)]
    ranks = [p for p in descendants(job.pid) if os.path.basename(os.readlink(f"/proc/{p}/exe")) == "divsim"]
    expect(len(ranks) == 2, f"two divsim processes under mpiexec ({ranks})")
    for p in ranks:
        os.kill(p, signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    return job.returncode, err


def resume_summary(args):
    """SIGTERM after a checkpoint (exit 75), then the same command with --run.resume=auto: the closing
    line counts the whole run's steps and says how many this start ran."""
    import subprocess
    steps = 1000
    cmd = [args.mpiexec, "-n", "2", args.divsim, *(a for a in SMALL if not a.startswith("--train.steps")),
           f"--train.steps={steps}", "--run.checkpoint_every=20", "--run.out=r.h5"]
    code, err = terminate_after_checkpoint(args, cmd, os.path.join(args.workdir, "r.h5.ckpt"))
    expect(code == 75, f"SIGTERM after a checkpoint exits 75 (got {code}: {err.strip()[-300:]})")
    done = subprocess.run([*cmd, "--run.resume=auto"], cwd=args.workdir, capture_output=True, text=True, timeout=600)
    expect(done.returncode == 0, f"the resumed start completes ({done.stderr.strip()[-300:]})")
    line = done.stdout.strip().splitlines()[-1]
    import re
    m = re.match(rf"divsim: {steps} steps \(resumed at step (\d+): (\d+) steps in this start\)", line)
    expect(m is not None and 0 < int(m[1]) < steps and int(m[1]) + int(m[2]) == steps,
           f"the summary counts the whole run and this start: {line!r}")


def resume_bitwise(args, model):
    """A model stopped by SIGTERM after a checkpoint and resumed writes the file an uninterrupted run
    writes: every dataset bit for bit. The ResNet keeps BatchNorm2d running statistics and momentum; the
    GPT (AdamW) draws dropout masks and normalises its loss by a count summed over the ranks."""
    import subprocess
    base = [args.divsim, *model, "--data.train_size=1024", "--data.test_size=200", "--batch.global=32",
            "--dist.world_size=4", "--train.steps=100", "--train.eval_every=25", "--record.layers_every=5",
            "--run.checkpoint_every=5"]
    run(args, [*base[1:], "--run.out=whole.h5"])
    cmd = [args.mpiexec, "-n", "2", *base, "--run.out=cut.h5"]
    code, err = terminate_after_checkpoint(args, cmd, os.path.join(args.workdir, "cut.h5.ckpt"))
    expect(code == 75, f"SIGTERM after a checkpoint exits 75 (got {code}: {err.strip()[-300:]})")
    done = subprocess.run([*cmd, "--run.resume=auto"], cwd=args.workdir, capture_output=True, text=True, timeout=600)
    expect(done.returncode == 0, f"the resumed start completes ({done.stderr.strip()[-300:]})")
    whole, cut = (datasets(os.path.join(args.workdir, n)) for n in ("whole.h5", "cut.h5"))
    timing = ("time", "wall", "seconds")
    keys = [k for k in whole if not any(t in k for t in timing)]
    expect(sorted(keys) == sorted(k for k in cut if not any(t in k for t in timing)), "the same datasets")
    differ = [k for k in keys if not same_bits(whole[k], cut[k])]
    expect(not differ, f"{len(keys)} datasets bit for bit equal to the uninterrupted run (differing: {differ})")


if __name__ == "__main__":
    commands = {"schema": schema, "reproducible": reproducible, "bad-input": bad_input,
                "print-config": print_config, "default-accuracy": default_accuracy, "hdf5-source": hdf5_source,
                "step-allocations": step_allocations, "oversubscription": oversubscription,
                "resume-summary": resume_summary,
                "resume-bitwise-resnet": lambda a: resume_bitwise(a, ["--model.type=resnet", "--model.channels=4,8"]),
                "resume-bitwise-gpt": lambda a: resume_bitwise(a, ["--model.type=gpt", "--data.source=fortunes",
                                                                   "--model.block_size=32", "--model.dim=32",
                                                                   "--model.depth=2", "--model.heads=2",
                                                                   "--model.dropout=0.1", "--optim.type=adamw",
                                                                   "--optim.lr=0.003"])}
    a = parse_args(list(commands))
    commands[a.command](a)
