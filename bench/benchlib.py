"""Plumbing shared by the bench/ scripts: finding divsim and the bench helpers of its build, running divsim
under mpiexec (steps/s of its step loop, wall time, peak RSS per process), repeating measurements,
and the command line every script shares (--quick, --write DOC).

Each script defines `table(argv) -> str` (measure, return a markdown table with the settings it used)
and calls `cli(table, section, quick)`. `--write DOC` replaces the text between
`<!-- bench:SECTION:begin -->` and `<!-- bench:SECTION:end -->` in DOC. Deliberately not here: what is
measured and how it is judged (each script owns its own), and any target check: these print figures,
they do not pass or fail.
"""
import argparse
import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATE = re.compile(r"([0-9.]+) steps/s")
RSS = re.compile(r"^divsim-peak-rss-kb (\d+)$", re.M)


class BenchError(RuntimeError):
    """A measurement could not be taken as asked (missing binary, failed run): not a slow result."""


def add_divsim_arguments(ap, repeats=3):
    ap.add_argument("--divsim", default=os.path.join(REPO, "build", "divsim"),
                    help="the divsim binary; the bench helpers are looked for in <its folder>/bench/")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec.mpich") or shutil.which("mpiexec") or "mpiexec")
    ap.add_argument("--repeats", type=int, default=repeats, help="runs per point, interleaved (each script says how they combine)")


def check_divsim(path):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BenchError(f"no divsim binary at {path}: build it (cmake --preset release && cmake --build --preset release) "
                         "or pass --divsim PATH")
    return path


def helper(divsim, name):
    """Path of a bench helper program (bench/CMakeLists.txt) built beside `divsim`."""
    path = os.path.join(os.path.dirname(os.path.abspath(divsim)), "bench", name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BenchError(f"{path} is missing: build the target {name} (cmake --build <build> --target {name}); "
                         "the top-level CMakeLists.txt must contain add_subdirectory(bench)")
    return path


def run_divsim(a, procs, args, out, rss=False, timeout=3600):
    """`mpiexec -n procs divsim --quiet ARGS` writing `out`. Returns {rate: steps/s of the step loop as
    divsim reports it, wall: seconds of the whole command (start-up included), rss_mb: peak RSS of each
    process (with rss=True)}."""
    # Each process's /usr/bin/time appends its one line to a file of its own call (O_APPEND: one write
    # per process); on the shared stderr, unbuffered, the processes' lines came out interleaved.
    rss_file = out + ".rss"
    if rss and os.path.exists(rss_file):
        os.remove(rss_file)
    prefix = ["/usr/bin/time", "-a", "-o", rss_file, "-f", "divsim-peak-rss-kb %M"] if rss else []
    cmd = [a.mpiexec, "-n", str(procs), *prefix, check_divsim(a.divsim), "--quiet", "--run.overwrite=true",
           f"--run.out={out}", *args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    rss_text = ""
    if rss and os.path.exists(rss_file):
        with open(rss_file) as fh:
            rss_text = fh.read()
        os.remove(rss_file)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stderr.strip()}")
    m = RATE.search(p.stdout)
    if not m:
        raise BenchError(f"no 'steps/s' in divsim's summary line: {p.stdout.strip()!r}")
    result = {"rate": float(m.group(1)), "wall": wall}
    if rss:
        result["rss_mb"] = [int(k) / 1024.0 for k in RSS.findall(rss_text)]
        if len(result["rss_mb"]) != procs:
            raise BenchError(f"expected {procs} peak-RSS lines from /usr/bin/time, got: {rss_text.strip()!r}")
    return result


def processes(worlds, cap):
    """{W: MPI processes for W logical ranks}: min(W, cap), or W with cap 0 (one process per rank). divsim
    runs the other logical ranks as virtual ranks inside those processes, so W must be a multiple."""
    procs = {w: w if cap == 0 else min(w, cap) for w in worlds}
    for w in worlds:
        if w % procs[w]:
            raise BenchError(f"W={w} is not a multiple of {procs[w]} processes")
    return procs


def fastest(runs, key="rate"):
    """The run with the highest `key`: interference from other processes only ever slows a run down."""
    return max(runs, key=lambda r: r[key])


def repeated(repeats, points, measure):
    """{point: [measure(point) for each repeat]}, with the repeats interleaved over the points so that a
    burst of load elsewhere on the machine hits every point alike instead of one, and every other repeat
    in reverse order (A B, B A, ...) so that no point always runs first (the recording table's pairs,
    always defaults then minimum, once read +13.4% over 16 repeats; ABBA rounds right after, +3.4%)."""
    results = {p: [] for p in points}
    for i in range(repeats):
        for p in points if i % 2 == 0 else points[::-1]:
            results[p].append(measure(p))
    return results


# OpenBLAS's cores by the widest vectors their kernels use (names as openblas_get_corename gives them).
AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}
AVX2_CORES = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


def openblas_core_to_pin(detected, flags):
    """The OpenBLAS core to set when `detected` (what OpenBLAS picked by itself) uses narrower vectors than
    a CPU with these /proc/cpuinfo flags has, else None."""
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        fit, wanted = ("Cooperlake" if "avx512_bf16" in flags else "SkylakeX"), AVX512_CORES
    elif {"avx2", "fma"} <= flags:
        fit, wanted = "Haswell", AVX2_CORES
    else:
        return None
    return None if detected.lower() in wanted else fit


def openblas_autodetected_core():
    """The core OpenBLAS picks by itself on this machine (its CPU table), or None without OpenBLAS."""
    name = ctypes.util.find_library("openblas")
    if name is None:
        return None
    lib = ctypes.CDLL(name)  # loaded with this process's environment: no OPENBLAS_CORETYPE (checked by the caller)
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


_openblas_note = None


def pin_openblas_core():
    """OpenBLAS 0.3.21 (Debian 12) knows CPUs up to Sapphire Rapids; on a newer one (an Emerald Rapids,
    family 6 model 207, seen here) its table falls back to Prescott, SSE3 kernels at a quarter of the
    machine's single-core rate, and torch's matmuls with it: a peer measured that way says nothing about
    PyTorch (as with Debian's reference BLAS). So when OpenBLAS picks a core narrower than the CPU's
    vectors, the benchmarks set OPENBLAS_CORETYPE to the core that fits, for every process they start:
    the peer, divsim (which then multiplies with OpenBLAS too, docs/design.md) and the GEMM helper. A
    core set by the caller is left alone. Once per process; returns the phrase machine() prints."""
    global _openblas_note
    if _openblas_note is None:
        _openblas_note = ""
        if os.environ.get("OPENBLAS_CORETYPE"):
            _openblas_note = f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} (set by the caller)"
        else:
            detected = openblas_autodetected_core()
            fit = openblas_core_to_pin(detected, cpu_flags()) if detected is not None else None
            if fit is not None:
                os.environ["OPENBLAS_CORETYPE"] = fit
                _openblas_note = f"OPENBLAS_CORETYPE={fit} (OpenBLAS's own table picks {detected} on this CPU)"
    return _openblas_note


def machine():
    """One line naming the machine and its load, printed under every table (the figures depend on both)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    load = os.getloadavg()[0]
    note = pin_openblas_core()
    return f"{model}, {os.cpu_count()} cores, load average {load:.1f} at the start" + (f", {note}" if note else "")


def write_section(doc, section, text):
    with open(doc) as f:
        content = f.read()
    pattern = re.compile(rf"(<!-- bench:{re.escape(section)}:begin -->\n).*?(\n<!-- bench:{re.escape(section)}:end -->)", re.S)
    if not pattern.search(content):
        raise BenchError(f"{doc} has no <!-- bench:{section}:begin --> ... <!-- bench:{section}:end --> markers")
    with open(doc, "w") as f:
        f.write(pattern.sub(lambda m: m.group(1) + text + m.group(2), content))


def cli(table, section, quick):
    """Command line of a bench script: [--quick] [--write DOC] plus the script's own options. --quick puts
    the reduced settings `quick` first, so options given explicitly still win."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", default="")
    known, rest = ap.parse_known_args()
    pin_openblas_core()  # before anything is measured
    try:
        text = table((quick if known.quick else []) + rest)
        print(text)
        if known.write:
            write_section(known.write, section, text)
    except BenchError as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {e}")
