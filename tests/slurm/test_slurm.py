"""Slurm tests (issue 7): the real jobscripts submitted with sbatch to a real local Slurm (local_slurm.py),
their HDF5 outputs checked against runs of the same arguments under plain mpiexec, and the sweep tool.

    test_slurm.py worldsize|single|faults|requeue|timelimit|preempt|sweep-tool --workdir DIR [--signals N]

The binary comes from $DIVSIM. Exit 77 (CTest SKIP_RETURN_CODE) with the reason when Slurm is not
installed, or, for timelimit and preempt, while `divsim --help` does not list run.resume.
It does not test divsim's numerics: tests/mpi does; here only where the files come from and that the
Slurm path changes no bit of them.
"""
import argparse
import collections
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py

from divsim_testlib import datasets, expect, same_bits
from local_slurm import SKIP, LocalSlurm, missing_programs, wait_until

ROOT = Path(__file__).resolve().parents[2]
JOBSCRIPTS = ROOT / "jobscripts"
SWEEP_TOOL = ROOT / "tools" / "divsim-sweep"
SMOKE = ROOT / "inputs" / "sweeps" / "smoke.ini"
SMOKE_FAULT = "skip_rank:mode=own_grad,ranks=1,start=10"  # the one fault in smoke.ini
SMALL = ["--data.train_size=4096", "--data.test_size=1000", "--batch.global=64", "--train.steps=30",
         "--record.layers_every=5"]


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def divsim():
    path = os.environ.get("DIVSIM")
    if not path or not os.access(path, os.X_OK):
        sys.exit(f"NOT OK: set DIVSIM to the built binary (got '{path}')")
    return path


def resume_supported():
    p = subprocess.run([divsim(), "--help"], capture_output=True, text=True, timeout=60)
    return "--run.resume" in p.stdout


def job_env():
    """Environment for jobs: this checkout and binary; no run.resume for a binary without it."""
    env = {"DIVSIM_ROOT": str(ROOT), "DIVSIM": divsim()}
    if not resume_supported():
        env["DIVSIM_RESUME"] = ""
    return env


def local_run(workdir, procs, args, out):
    """The reference: the same divsim arguments under plain mpiexec, outside Slurm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    cmd = ["mpiexec", "-n", str(procs), divsim(), "--quiet", f"--run.out={out}", *args]
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"NOT OK: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}{p.stderr}")
    return os.path.join(workdir, out)


def wait_ok(slurm, workdir, jobid, count, timeout):
    """Waits for `count` jobs of `jobid`; each must be COMPLETED with exit 0:0 (job logs shown if not)."""
    jobs = slurm.wait(jobid, timeout, expect_count=count)
    bad = {j: f for j, f in jobs.items() if f["JobState"] != "COMPLETED" or f["ExitCode"] != "0:0"}
    if bad or len(jobs) != count:
        for log in sorted(Path(workdir, "outputs").glob("slurm-*.out")):  # the daemons' logs follow on exit
            print(f"---- {log.name} ----\n{log.read_text(errors='replace')}")
    expect(not bad and len(jobs) == count,
           f"{count} job(s) of {jobid} COMPLETED with exit 0:0: " +
           ", ".join(f"{j}={f['JobState']}/{f['ExitCode']}" for j, f in sorted(jobs.items())))
    return jobs


def effective_config(path):
    """(faults, {section.key: value}) from a file's `config` root attribute."""
    faults, values, section = [], {}, ""
    with h5py.File(path, "r") as f:
        text = f.attrs["config"]
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = (s.strip() for s in line.split("=", 1))
            if section:
                values[f"{section}.{key}"] = value
            elif key == "fault":
                faults.append(value)
    return faults, values


def check_slurm_identity(path, job, name):
    """The root attributes carry this job's Slurm identity (fields from `scontrol show job`)."""
    with h5py.File(path, "r") as f:
        a = {k: f.attrs.get(k) for k in ("slurm_job_id", "slurm_array_job_id", "slurm_array_task_id",
                                         "slurm_nodes", "slurm_job_name")}
    want = {"slurm_job_id": job["JobId"], "slurm_nodes": LocalSlurm.NODE, "slurm_job_name": name,
            "slurm_array_job_id": job.get("ArrayJobId"), "slurm_array_task_id": job.get("ArrayTaskId")}
    expect(a == want, f"{os.path.basename(path)}: Slurm identity attributes {a}")


def short(path):
    return os.path.join(*Path(path).parts[-4:])


def check_same_trajectory(path, reference, skip_prefixes=()):
    a, b = datasets(path), datasets(reference)
    names = [n for n in sorted(a) if not n.startswith(skip_prefixes)]
    differ = [n for n in names if n not in b or not same_bits(a[n], b[n])]
    expect(sorted(a) == sorted(b) and not differ,
           f"{short(path)} == {short(reference)} bit for bit ({len(names)} datasets; differ: {differ})")


# ---- world-size array ----------------------------------------------------------------------------
def worldsize(a):
    worlds = [1, 2, 4]
    with LocalSlurm() as slurm:
        jobid = slurm.sbatch([f"--array={','.join(map(str, worlds))}", "--ntasks=4", "--job-name=ws",
                              str(JOBSCRIPTS / "worldsize-array.sbatch"), *SMALL], cwd=a.workdir, env=job_env())
        jobs = wait_ok(slurm, a.workdir, jobid, len(worlds), 600)
    by_w = {int(f["ArrayTaskId"]): f for f in jobs.values()}
    expect(sorted(by_w) == worlds, f"one array element per world size {worlds}")
    first_loss = {}
    for w in worlds:
        path = os.path.join(a.workdir, "outputs", "ws", f"w{w}.h5")
        expect(os.path.exists(path), f"{path} written")
        _, cfg = effective_config(path)
        with h5py.File(path, "r") as f:
            expect(f.attrs["world_size"] == w and f["train/loss"].shape == (30, w), f"w{w}.h5: world size {w}")
            expect("mpi_processes=" + str(w) in f.attrs["env"], f"w{w}.h5: one process per rank")
            h = f["train/param_hash"][()]
            expect((h == h[:, :1]).all(), f"w{w}.h5: replicas in sync")
            first_loss[w] = f["train/global_loss"][0]
        expect(cfg["batch.global"] == "64" and cfg["batch.per_rank"] == "0", f"w{w}.h5: global batch 64")
        check_slurm_identity(path, by_w[w], "ws")
    # Same initial parameters and the same 64 samples at step 0: the global loss agrees up to the rounding
    # of the forward products, whose kernels OpenBLAS picks by the per-rank batch, and the summation order
    # (docs/reproducibility.md; 4e-9 relative here).
    spread = max(first_loss.values()) - min(first_loss.values())
    expect(spread < 1e-7 * first_loss[1], f"step-0 global loss equal across W up to rounding (spread {spread:.3g})")


# ---- one run, both launchers ---------------------------------------------------------------------
def single(a):
    scenario = os.path.join(a.workdir, "scenario.ini")
    with open(scenario, "w") as f:
        f.write("[train]\nsteps = 25\n[data]\ntrain_size = 2048\ntest_size = 1000\n")
    overrides = ["--train.eval_every=10"]
    with LocalSlurm() as slurm:
        ids = {name: slurm.sbatch(["--ntasks=2", f"--job-name={name}", str(JOBSCRIPTS / "divsim.sbatch"),
                                   "scenario.ini", *overrides], cwd=a.workdir,
                                  env=dict(job_env(), DIVSIM_LAUNCHER=launcher))
               for name, launcher in (("one", "mpiexec"), ("one_srun", "srun"))}
        jobs = {name: wait_ok(slurm, a.workdir, jobid, 1, 300)[jobid] for name, jobid in ids.items()}
    reference = local_run(a.workdir, 2, ["--config", "scenario.ini", *overrides], "reference.h5")
    for name, job in jobs.items():
        path = os.path.join(a.workdir, "outputs", name, f"{name}.h5")
        expect(os.path.exists(path), f"{path} written")
        _, cfg = effective_config(path)
        expect(cfg["train.steps"] == "25" and cfg["data.train_size"] == "2048" and cfg["train.eval_every"] == "10",
               f"{name}.h5: scenario file and command-line override both applied")
        with h5py.File(path, "r") as f:
            expect(f.attrs["world_size"] == 2, f"{name}.h5: world size = --ntasks = 2")
        check_slurm_identity(path, job, name)
        check_same_trajectory(path, reference)


# ---- fault matrix from a sweep description --------------------------------------------------------
def sweep_elements(sweep):
    count = int(run_tool("array", sweep).split("-")[1]) + 1
    out = []
    for i in range(count):
        lines = run_tool("element", sweep, str(i)).splitlines()
        out.append((int(lines[0]), lines[1], lines[2:]))
    return out


def run_tool(*args, cwd=None, check=True):
    p = subprocess.run([str(SWEEP_TOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, DIVSIM=divsim()))
    if check and p.returncode != 0:
        sys.exit(f"NOT OK: divsim-sweep {' '.join(args)} exited {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout if check else p


def faults(a):
    elements = sweep_elements(str(SMOKE))
    with LocalSlurm() as slurm:
        jobid = slurm.sbatch([f"--array=0-{len(elements) - 1}", "--ntasks=2", "--job-name=smoke",
                              str(JOBSCRIPTS / "fault-matrix.sbatch"), str(SMOKE)], cwd=a.workdir, env=job_env())
        jobs = wait_ok(slurm, a.workdir, jobid, len(elements), 600)
    by_index = {int(f["ArrayTaskId"]): f for f in jobs.values()}
    local = os.path.join(a.workdir, "local")
    os.makedirs(local)
    run_tool("run", str(SMOKE), cwd=local)
    final_hash = collections.defaultdict(set)
    for i, (world, out, args) in enumerate(elements):
        path = os.path.join(a.workdir, out)
        expect(os.path.exists(path), f"element {i}: {out} written")
        specs, cfg = effective_config(path)
        want_specs = [args[k + 1] for k, w in enumerate(args) if w == "--fault"]
        seed = next(w.split("=")[1] for w in args if w.startswith("--run.seed="))
        expect(specs == want_specs and cfg["run.seed"] == seed and cfg["dist.world_size"] == str(world),
               f"element {i}: config has faults {specs}, seed {seed}, W {world}")
        with h5py.File(path, "r") as f:
            expect(f.attrs["world_size"] == world, f"element {i}: world size {world}")
            final_hash[(tuple(specs), world)].add(f["train/param_hash"][-1, 0])
        check_slurm_identity(path, by_index[i], "smoke")
        check_same_trajectory(path, os.path.join(local, out))
    expect(all(len(h) == 2 for h in final_hash.values()), "the two seeds of each fault and W end differently")
    fault_free = final_hash[((), 2)]
    expect(not final_hash[((SMOKE_FAULT,), 2)] & fault_free, "the faulty elements end unlike the fault-free ones")


# ---- checkpoint/resume under Slurm (gated on run.resume) -------------------------------------------
def steps_for(a, seconds, args):
    """Steps that take at least about `seconds` on 2 ranks here: the time of 2000 steps less that of 400
    (no start-up), measured with the job's own checkpoint interval: at a few thousand steps/s the periodic
    checkpoints, not the steps, set the pace (calibrating without them once made a 75 s job need 37
    starts). The faster of two measurements: a job sized on a slowed-down calibration finishes before
    Slurm stops it (it once did 16335 "45 s" steps in 12 s)."""
    def took(steps):
        t = time.monotonic()
        local_run(a.workdir, 2, [*args, f"--run.checkpoint_every={CHECKPOINT_EVERY}", f"--train.steps={steps}"],
                  "calibrate.h5")
        os.remove(os.path.join(a.workdir, "calibrate.h5"))
        return time.monotonic() - t
    per_1600 = min(took(2000) - took(400) for _ in range(2))
    return max(2000, int(1600 * seconds / max(per_1600, 0.1)))


LONG = ["--data.train_size=8192", "--data.test_size=1000", "--batch.global=64", "--record.layers_every=25",
        "--train.eval_every=500"]
CHECKPOINT_EVERY = 100


def resumed_job(a, name, sbatch_opts, target_seconds, interrupt):
    """Submits a long 2-rank run, calls interrupt(slurm, jobid) while it runs, then checks that it
    completed after >= 1 restart and that its trajectory equals an uninterrupted run's bit for bit."""
    if not resume_supported():
        skip("divsim --help does not list run.resume (checkpoint/resume not in this binary yet)")
    steps = steps_for(a, target_seconds, LONG)
    args = [*LONG, f"--train.steps={steps}"]
    print(f"{steps} steps (about {target_seconds} s here)")
    with LocalSlurm() as slurm:
        jobid = slurm.sbatch(["--ntasks=2", f"--job-name={name}", *sbatch_opts, str(JOBSCRIPTS / "divsim.sbatch"),
                              *args], cwd=a.workdir, env=dict(job_env(), DIVSIM_CHECKPOINT_EVERY=str(CHECKPOINT_EVERY)))
        interrupt(slurm, jobid)
        job = wait_ok(slurm, a.workdir, jobid, 1, 1500)[jobid]
    expect(int(job["Restarts"]) >= 1, f"job was stopped and requeued {job['Restarts']} time(s)")
    path = os.path.join(a.workdir, "outputs", name, f"{name}.h5")
    reference = local_run(a.workdir, 2, args, "uninterrupted.h5")
    # /events may record the resumes themselves; the trajectory is everything else.
    check_same_trajectory(path, reference, skip_prefixes=("events",))


def timelimit(a):
    # One minute limit, SIGTERM to the batch shell 55 s before it: Slurm checks limits about every 30 s,
    # so the signal comes 5-35 s into each start; 45 s of work needs at least one requeue.
    resumed_job(a, "timelimit", ["--time=1", "--signal=B:TERM@55"], 45, lambda slurm, jobid: None)


def preempt(a):
    rng = random.Random(a.seed)

    def interrupt(slurm, jobid):
        print(f"random seed {a.seed} (--seed to repeat)")
        log = Path(a.workdir, "outputs", f"slurm-preempt-{jobid}.out")
        for k in range(a.signals):
            job = slurm.wait_state(jobid, "RUNNING", restarts=k, timeout=300)
            if job is None:
                sys.exit(f"NOT OK: the job finished after {k} of {a.signals} SIGTERMs; give it more steps")
            # From the launch of this start's ranks on, a SIGTERM may come at any moment (start-up included).
            launched = f"restart {k} on"
            wait_until(f"start {k} launching",
                       lambda: log.exists() and launched in log.read_text(errors="replace"), 60)
            time.sleep(rng.uniform(0.0, 4.0))
            slurm.run(["scancel", "--signal=TERM", "--batch", jobid])
            print(f"SIGTERM {k + 1}/{a.signals} sent")

    resumed_job(a, "preempt", [], 4 * a.signals + 20, interrupt)


# ---- the jobscripts' SIGTERM -> requeue -> resume logic, with a stand-in binary ----------------------
# Runs until SIGTERM (then "checkpoints": logs and exits 0) on its first two starts; finishes on the third.
FAKE_DIVSIM = r"""#!/bin/bash
out=; for a in "$@"; do case $a in --run.out=*) out=${a#--run.out=} ;; esac; done
rank=${PMI_RANK:-$SLURM_PROCID}
echo "start ${SLURM_RESTART_COUNT:-0} rank $rank args $*" >>fake.log
if ((${SLURM_RESTART_COUNT:-0} >= 2)); then
  [[ $rank == 0 ]] && touch "$out"
  exit 0
fi
trap 'echo "checkpoint ${SLURM_RESTART_COUNT:-0} rank $rank" >>fake.log; exit 0' TERM
while :; do sleep 0.1; done
"""


def requeue(a):
    fake = os.path.join(a.workdir, "fake-divsim")
    with open(fake, "w") as f:
        f.write(FAKE_DIVSIM)
    os.chmod(fake, 0o755)
    log = Path(a.workdir, "fake.log")

    def started(restarts):
        return lambda: log.exists() and log.read_text().count(f"start {restarts} ") == 2

    env = {"DIVSIM_ROOT": str(ROOT), "DIVSIM": fake}
    with LocalSlurm() as slurm:
        # First stop: the time limit's signal (the limit is checked about every 30 s, so it comes 5-35 s in);
        # second stop: a SIGTERM to the batch shell, as a preemption sends it.
        jobid = slurm.sbatch(["--ntasks=2", "--job-name=rq", "--time=1", "--signal=B:TERM@55",
                              str(JOBSCRIPTS / "divsim.sbatch"), "--x=1"], cwd=a.workdir,
                             env=dict(env, DIVSIM_RESUME="auto"))
        for k in range(2):
            expect(slurm.wait_state(jobid, "RUNNING", restarts=k, timeout=120) is not None, f"start {k} running")
            wait_until(f"both ranks of start {k}", started(k), 60)
            if k == 0:
                t = time.monotonic()
                wait_until("the time limit's SIGTERM", lambda: "checkpoint 0 rank 1" in log.read_text(), 60)
                print(f"time-limit SIGTERM came {time.monotonic() - t:.0f} s after the ranks started")
            else:  # check=False: the time limit may have stopped this start first, which is as good
                slurm.run(["scancel", "--signal=TERM", "--batch", jobid], check=False)
        job = wait_ok(slurm, a.workdir, jobid, 1, 180)[jobid]
        expect(job["Restarts"] == "2", f"two SIGTERMs, two requeues (Restarts={job['Restarts']})")
        text = log.read_text()
        expect(all(text.count(f"checkpoint {k} rank {r}") == 1 for k in range(2) for r in range(2)),
               "each SIGTERM reached both ranks once")
        starts = [ln for ln in text.splitlines() if ln.startswith("start")]
        expect(len(starts) == 6 and all("--run.resume=auto" in ln and ln.endswith("--x=1") for ln in starts),
               "every start got --run.resume=auto and the job's own arguments")
        expect(os.path.exists(os.path.join(a.workdir, "outputs", "rq", "rq.h5")), "finished on the third start")
        # Without resuming, a SIGTERM ends the job: no requeue that would start the run over. Launched
        # with srun this time, which must pass the SIGTERM on as well.
        log.unlink()
        jobid = slurm.sbatch(["--ntasks=2", "--job-name=norq", str(JOBSCRIPTS / "divsim.sbatch")],
                             cwd=a.workdir, env=dict(env, DIVSIM_RESUME="", DIVSIM_LAUNCHER="srun"))
        expect(slurm.wait_state(jobid, "RUNNING", restarts=0, timeout=120) is not None, "second job running")
        wait_until("both ranks started", started(0), 60)
        slurm.run(["scancel", "--signal=TERM", "--batch", jobid])
        job = wait_ok(slurm, a.workdir, jobid, 1, 120)[jobid]
        text = log.read_text()
        expect(all(f"checkpoint 0 rank {r}" in text for r in range(2)), "srun passed the SIGTERM to both ranks")
        expect(job["Restarts"] == "0" and "--run.resume" not in text,
               "DIVSIM_RESUME= passes no run.resume and does not requeue")


# ---- the sweep tool alone (no Slurm) --------------------------------------------------------------
def sweep_tool(a):
    d = Path(a.workdir)
    (d / "base.ini").write_text("[train]\nsteps = 5\n")
    (d / "s.ini").write_text("[sweep]\nname = t\nscenario = base.ini  # relative to this file\nworld_sizes = 1, 4\n"
                             "seeds = 3, 4\nargs = --a=1 'b c'\n[faults]\nref =\nx = f1:ranks=2 --own=1 f2:ranks=0-1\n"
                             "y = f3:ranks=all,start=2\n")
    elements = sweep_elements(str(d / "s.ini"))
    got = [(w, out, args[-1] if "--fault" in args else None) for w, out, args in elements]
    want = [(1, "outputs/t/ref_w1_s3.h5", None), (1, "outputs/t/ref_w1_s4.h5", None),
            (4, "outputs/t/ref_w4_s3.h5", None), (4, "outputs/t/ref_w4_s4.h5", None),
            (4, "outputs/t/x_w4_s3.h5", "f2:ranks=0-1"), (4, "outputs/t/x_w4_s4.h5", "f2:ranks=0-1"),
            (1, "outputs/t/y_w1_s3.h5", "f3:ranks=all,start=2"), (1, "outputs/t/y_w1_s4.h5", "f3:ranks=all,start=2"),
            (4, "outputs/t/y_w4_s3.h5", "f3:ranks=all,start=2"), (4, "outputs/t/y_w4_s4.h5", "f3:ranks=all,start=2")]
    expect(got == want, "elements fault-major, then W, then seed; x left out at W=1 (ranks=2)")
    expect(elements[5][2] == ["--config", str(d / "base.ini"), "--a=1", "b c", "--own=1", "--run.seed=4",
                              "--dist.world_size=4", "--fault", "f1:ranks=2", "--fault", "f2:ranks=0-1"],
           f"element 5 arguments: scenario, shell words, the row's own, seed, W, faults in order: {elements[5][2]}")
    expect("left out: x at W=1 (its ranks need W >= 3)" in run_tool("list", str(d / "s.ini")),
           "list names what it leaves out")
    dry = run_tool("run", str(d / "s.ini"), "--procs=2", "--dry-run", "--", "--extra=1", cwd=a.workdir, check=False)
    lines = [ln for ln in dry.stderr.splitlines() if ln.startswith("[")]
    expect(len(lines) == 10 and "mpiexec -n 2 " in lines[2] and "mpiexec -n 1 " in lines[0] and
           lines[2].endswith("--extra=1") and not (d / "outputs" / "t").exists(),
           "run --procs=2 --dry-run: W=4 folded onto 2 processes, extra arguments last, nothing run")
    bad = {"[sweep]\nworld_sizes = 0\n[faults]\nr =\n": "world_sizes",
           "[sweep]\nbogus = 1\n[faults]\nr =\n": "bogus",
           "[sweep]\n[faults]\n": "[faults] is empty",
           "[sweep]\nscenario = none.ini\n[faults]\nr =\n": "none.ini",
           "[sweep]\n[faults]\nbad/label =\n": "bad/label",
           "[sweep]\nworld_sizes = 1\n[faults]\nx = f:ranks=1\n": "no element left"}
    for text, needle in bad.items():
        (d / "bad.ini").write_text(text)
        p = run_tool("list", str(d / "bad.ini"), check=False)
        expect(p.returncode == 2 and needle in p.stderr,
               f"bad description refused naming '{needle}': {p.stderr.strip()}")
    p = run_tool("element", str(d / "s.ini"), "10", check=False)
    expect(p.returncode == 2 and "out of range 0-9" in p.stderr, "index out of range refused")
    for shipped in sorted((ROOT / "inputs" / "sweeps").glob("*.ini")):
        expect(len(sweep_elements(str(shipped))) > 0, f"shipped description {shipped.name} expands")


# ---- job scripts on a workstation: bash without Slurm, and tools/local-slurm ---------------------------
def workstation(a):
    """`bash jobscripts/divsim.sbatch ...` outside Slurm runs the script's --ntasks ranks folded onto this
    machine's CPUs, bitwise the same as the plain run; SLURM_NTASKS=W picks another W; and the one-command
    local cluster (tools/local-slurm) runs the same script under a real Slurm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(job_env())
    args = [*SMALL, "--dist.reduce=ring"]
    cpus = len(os.sched_getaffinity(0))
    for world in (4, 2):
        e = dict(env, SLURM_JOB_NAME=f"ws{world}", **({} if world == 4 else {"SLURM_NTASKS": str(world)}))
        p = subprocess.run(["bash", str(JOBSCRIPTS / "divsim.sbatch"), *args], cwd=a.workdir, env=e,
                           capture_output=True, text=True, timeout=600)
        expect(p.returncode == 0, f"bash divsim.sbatch (W={world}) runs without Slurm: {p.stderr.strip()[-300:]}")
        folded = world > cpus
        expect(("folded onto" in p.stderr) == folded, f"  folded onto this machine's {cpus} CPUs: {folded}")
        path = os.path.join(a.workdir, "outputs", f"ws{world}", f"ws{world}.h5")
        with h5py.File(path, "r") as f:
            expect(f.attrs["world_size"] == world, f"  W={world} (#SBATCH --ntasks=4, or SLURM_NTASKS)")
        check_same_trajectory(path, local_run(a.workdir, world, args, f"plain{world}.h5"))
    tool = ROOT / "tools" / "local-slurm"
    p = subprocess.run([str(tool), "sbatch", "--wait", "--ntasks=2", "--job-name=viatool", str(JOBSCRIPTS / "divsim.sbatch"),
                        *args], cwd=a.workdir, env=env, capture_output=True, text=True, timeout=600)
    expect(p.returncode == 0, f"tools/local-slurm sbatch --wait ... exits 0: {p.stderr.strip()[-400:]}")
    path = os.path.join(a.workdir, "outputs", "viatool", "viatool.h5")
    check_same_trajectory(path, os.path.join(a.workdir, "plain2.h5"))
    p = subprocess.run(["sbatch", "--wrap=true"], env=env, capture_output=True, text=True, timeout=60)
    expect(p.returncode != 0, f"no controller outside: sbatch fails ({p.stderr.strip()[:120]})")


def main():
    commands = {"worldsize": worldsize, "single": single, "workstation": workstation, "faults": faults, "timelimit": timelimit,
                "preempt": preempt, "requeue": requeue, "sweep-tool": sweep_tool}
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=commands)
    p.add_argument("--workdir", required=True)
    p.add_argument("--signals", type=int, default=20, help="preempt: SIGTERMs at random moments")
    p.add_argument("--seed", type=int, default=int(time.time()), help="preempt: random seed (printed)")
    a = p.parse_args()
    if a.command != "sweep-tool" and missing_programs():
        skip(f"Slurm not installed (missing {', '.join(missing_programs())}): apt-get install slurm-wlm munge")
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(os.path.join(a.workdir, "outputs"))
    commands[a.command](a)


if __name__ == "__main__":
    main()
