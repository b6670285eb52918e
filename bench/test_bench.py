"""Quick checks of the bench/ plumbing (pytest; registered with CTest by bench/tests.cmake): the FLOP
count behind the GEMM table and the W = 1 ceiling of the DDP table, the doc-section rewriting, input errors, and the two C++ helpers'
output against independent values (the HDF5 helper's payload against the bytes h5py finds in its file,
and each logical rank's values in its own column). Not here: timing anything, and the scripts' full
runs against divsim or PyTorch (they take minutes; `bench/run_all.py --quick` is that check).

The helpers are looked for beside $DIVSIM (default build/divsim), in <its folder>/bench/.
"""
import os
import subprocess

import h5py
import numpy as np
import pytest

import benchlib
import gemm
import hdf5_rate
import recording

DIVSIM = os.environ.get("DIVSIM", os.path.join(benchlib.REPO, "build", "divsim"))
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")


def test_flops_per_step_counts_forward_weight_and_input_products():
    # 784-1024-1024-10 at batch 256, by hand: forward 2*256*(784*1024 + 1024*1024 + 1024*10) = 953155584;
    # weight gradients as many; input gradients as many less the first layer's 2*256*784*1024 = 411041792.
    assert gemm.flops_per_step(256, [784, 1024, 1024, 10]) == 3 * 953155584 - 411041792
    # One layer: forward and weight gradient only (the input is data).
    assert gemm.flops_per_step(1, [3, 2]) == 24


def test_products_seconds_takes_each_product_at_its_best_rate():
    # Two layers 3-2-1 at batch 4: forward and weight products of 2*4*3*2 = 48 FLOPs each in layer 0 (no
    # input product), forward, weight and input of 2*4*2*1 = 16 each in layer 1; the best kernel counts.
    rates = [{("eigen", "forward"): 1.0, ("openblas", "forward"): 2.0, ("eigen", "weight"): 4.0,
              ("eigen", "input"): 1e-9},
             {("eigen", "forward"): 8.0, ("eigen", "weight"): 16.0, ("openblas", "input"): 32.0}]
    expected = (48 / 2.0 + 48 / 4.0 + 16 / 8.0 + 16 / 16.0 + 16 / 32.0) * 1e-9
    assert gemm.products_seconds(4, [3, 2, 1], rates) == pytest.approx(expected, rel=1e-15)


def test_openblas_core_is_pinned_only_below_the_cpus_vectors():
    avx512_bf16 = {"avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"}
    avx2 = {"avx", "avx2", "fma"}
    # OpenBLAS 0.3.21 on an Emerald Rapids picks Prescott: the CPU's own AVX-512 core instead.
    assert benchlib.openblas_core_to_pin("Prescott", avx512_bf16) == "Cooperlake"
    assert benchlib.openblas_core_to_pin("Haswell", avx512_bf16 - {"avx512_bf16"}) == "SkylakeX"
    assert benchlib.openblas_core_to_pin("Sandybridge", avx2) == "Haswell"
    for detected, flags in [("Cooperlake", avx512_bf16), ("SkylakeX", avx512_bf16), ("Zen", avx2),
                            ("Haswell", avx2), ("Prescott", {"sse3"})]:
        assert benchlib.openblas_core_to_pin(detected, flags) is None, (detected, flags)


def test_write_section_replaces_only_its_own_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- bench:a:begin -->\nold a\n<!-- bench:a:end -->\n"
                   "<!-- bench:b:begin -->\nold b\n<!-- bench:b:end -->\n")
    benchlib.write_section(str(doc), "a", "| new | table |")
    assert doc.read_text() == ("intro\n<!-- bench:a:begin -->\n| new | table |\n<!-- bench:a:end -->\n"
                               "<!-- bench:b:begin -->\nold b\n<!-- bench:b:end -->\n")
    with pytest.raises(benchlib.BenchError, match="bench:c:begin"):
        benchlib.write_section(str(doc), "c", "x")


def test_bad_settings_are_named():
    with pytest.raises(benchlib.BenchError, match="'4x3'"):
        recording.parse_layouts("1x1,4x3")
    with pytest.raises(benchlib.BenchError, match="'1:2:3'"):
        hdf5_rate.parse_cases("1:2:3")
    with pytest.raises(benchlib.BenchError, match="divsim_nothing"):
        benchlib.helper(DIVSIM, "divsim_nothing")


def test_gemm_rate_helper_reports_the_three_products():
    exe = benchlib.helper(DIVSIM, "divsim_gemm_rate")
    out = subprocess.run([exe, "8", "16", "4", "0.01"], capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [line.split() for line in out if line]
    kernels = sorted({r[0] for r in rows})
    assert kernels in (["eigen"], ["eigen", "openblas"])  # OpenBLAS when divsim is built with it
    for kernel in kernels:
        assert [r[1:5] for r in rows if r[0] == kernel] == [["forward", "8", "16", "4"], ["weight", "4", "8", "16"],
                                                            ["input", "8", "4", "16"]]
    assert all(float(r[5]) > 0 for r in rows)
    bad = subprocess.run([exe, "8", "0", "4"], capture_output=True, text=True)
    assert bad.returncode == 2 and "IN must be a positive integer" in bad.stderr


def test_h5_rate_helper_payload_matches_its_file(tmp_path):
    exe = benchlib.helper(DIVSIM, "divsim_h5_rate")
    W, steps, samples, layers, every = 4, 250, 8, 3, 10
    p = subprocess.run([MPIEXEC, "-n", "2", exe, str(tmp_path), str(W), str(steps), str(samples), str(layers), str(every), "100"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()}
    payload = int(lines["hdf5"][0])
    assert int(lines["plain"][0]) == payload and int(lines["plain_fsync"][0]) == payload
    with h5py.File(tmp_path / "h5_write_rate.h5", "r") as f:
        names = ["train/step", "train/global_loss", "train/loss", "train/grad_norm_local", "train/grad_norm",
                 "train/param_norm", "train/lr", "train/loss_scale", "train/param_hash", "train/samples",
                 "layers/step", "layers/forward", "layers/backward", "layers/grad_norm"]
        assert payload == sum(f[n].size * f[n].dtype.itemsize for n in names)
        assert f["train/samples"].shape == (steps, W, samples)
        assert f["layers/forward"].shape == (steps // every, W, layers, 5)
        # Logical rank r's column holds step*C + r whichever process wrote it.
        s, r = np.meshgrid(np.arange(steps, dtype=np.uint64), np.arange(W, dtype=np.uint64), indexing="ij")
        with np.errstate(over="ignore"):
            expected = s * np.uint64(0x9E3779B97F4A7C15) + r
        np.testing.assert_array_equal(f["train/param_hash"][()], expected)
