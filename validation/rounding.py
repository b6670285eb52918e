#!/usr/bin/python3
"""The precision conversions against their sources, bit for bit (issue 27, part 5).

    validation/rounding.py --filter build/tests/divsim_round_filter

divsim emulates bf16 / fp16 / TF32 by rounding float32 values (numerics/bits.hpp, through the function
the layers call, run here as a filter). For every class of float32 bit pattern (zeros, subnormals,
normals, exact ties and their neighbours at the format's rounding bit, the largest finite values and
their overflow, Inf, NaN of both signs and many payloads) it must give:

* bf16, fp16: exactly what PyTorch's own conversion gives, `x.to(dtype).to(torch.float32)` on the CPU;
* tf32: PTX's cvt.rna.tf32.f32 (round to nearest, ties away from zero, 10 mantissa bits), computed
  here independently in float64 arithmetic (PyTorch has no TF32 on the CPU to compare with).

Every mismatch is printed with its input bits; exit status 1 if there is one.
"""
import argparse
import subprocess
import sys

import numpy as np
import torch


def patterns(low_bits):
    """float32 bit patterns: every combination of the upper (32 - low_bits) bits with the low bits that
    decide rounding at bit `low_bits` (zero, one, just below / at / just above the tie, all ones)."""
    half = 1 << (low_bits - 1)
    lows = np.array([0, 1, half - 1, half, half + 1, (1 << low_bits) - 1], dtype=np.uint32)
    highs = np.arange(1 << (32 - low_bits), dtype=np.uint64).astype(np.uint32) << np.uint32(low_bits)
    return (highs[:, None] | lows[None, :]).ravel()


def fp16_subnormal_ties(rng, n):
    """float32s in fp16's subnormal range (2^-25 .. 2^-14) whose bits below fp16's last subnormal digit
    are a tie, or one away from it: there the rounding bit sits above bit 13."""
    exp = rng.integers(102, 113, n).astype(np.uint32)  # biased float32 exponents of 2^-25 .. 2^-15
    drop = (13 + (113 - exp)).astype(np.uint32)  # bits below the fp16 subnormal grid
    mant = rng.integers(0, 1 << 23, n).astype(np.uint32) >> drop << drop
    tie = np.uint32(1) << (drop - np.uint32(1))
    offset = rng.choice(np.array([0, 1, -1], dtype=np.int64), n).astype(np.uint32)
    bits = (exp << np.uint32(23)) | ((mant | tie) + offset) & np.uint32(0x7FFFFF)
    sign = rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    return bits | sign


def tf32_reference(bits):
    """cvt.rna.tf32.f32 in float64: the value's multiple of TF32's ulp nearest to it, ties away from
    zero; Inf beyond the largest TF32 value; NaN and Inf as they are."""
    x = bits.view(np.float32)
    exp = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    ulp = np.ldexp(1.0, np.maximum(exp, 1) - 127 - 10)  # subnormals share the smallest normal's ulp
    with np.errstate(invalid="ignore", over="ignore"):
        v = x.astype(np.float64)
        r = np.copysign(np.floor(np.abs(v) / ulp + 0.5) * ulp, v)
        out = r.astype(np.float32)  # exact: r has at most 11 significant bits (or overflows to Inf)
    special = exp == 0xFF
    out[special] = x[special]
    return out.view(np.uint32)


def run_filter(tool, fmt, bits):
    p = subprocess.run([tool, fmt], input=bits.tobytes(), capture_output=True, check=True)
    return np.frombuffer(p.stdout, dtype=np.uint32)


def compare(fmt, reference, inputs, got, want, nan_bits_matter=True):
    """One format's result: what it was compared with, how many patterns, and the first mismatches."""
    if nan_bits_matter:
        bad = got != want
    else:
        gn, wn = np.isnan(got.view(np.float32)), np.isnan(want.view(np.float32))
        bad = (got != want) & ~(gn & wn)
    return {"format": fmt, "reference": reference, "patterns": len(inputs), "differ": int(bad.sum()),
            "first": [[f"0x{inputs[i]:08x}", f"0x{got[i]:08x}", f"0x{want[i]:08x}"] for i in np.flatnonzero(bad)[:8]]}


def check(tool, seed=27):
    """Every format against its reference -> a list of compare() results."""
    rng = np.random.default_rng(seed)
    random = rng.integers(0, 1 << 32, 1 << 22, dtype=np.uint64).astype(np.uint32)
    nans = np.concatenate([np.uint32(0x7F800000) | rng.integers(1, 1 << 23, 4096).astype(np.uint32),
                           np.array([0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FA00000], dtype=np.uint32)])
    nans = np.concatenate([nans, nans | np.uint32(0x80000000)])
    out = []
    for fmt, dtype, low_bits in (("bf16", torch.bfloat16, 16), ("fp16", torch.float16, 13)):
        inputs = np.concatenate([patterns(low_bits), random, nans])
        if fmt == "fp16":
            inputs = np.concatenate([inputs, fp16_subnormal_ties(rng, 1 << 20)])
        want = torch.from_numpy(inputs.view(np.float32)).to(dtype).to(torch.float32).numpy().view(np.uint32)
        out.append(compare(fmt, f"torch {torch.__version__}: `x.to(torch.{str(dtype)[6:]}).float()`", inputs,
                           run_filter(tool, fmt, inputs), want))
    inputs = np.concatenate([patterns(13), random, nans])
    # A NaN's payload is not specified by the TF32 rule: any NaN is right for a NaN.
    out.append(compare("tf32", "PTX `cvt.rna.tf32.f32`, computed in float64", inputs, run_filter(tool, "tf32", inputs),
                       tf32_reference(inputs), nan_bits_matter=False))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", required=True, help="the divsim_round_filter binary")
    ap.add_argument("--seed", type=int, default=27)
    args = ap.parse_args()
    results = check(args.filter, args.seed)
    for r in results:
        print(f"{'OK' if r['differ'] == 0 else 'NOT OK'}: {r['format']} vs {r['reference']}: {r['patterns']} patterns, "
              f"{r['differ']} differ")
        for i, got, want in r["first"]:
            print(f"    in {i} -> divsim {got}, reference {want}")
    sys.exit(0 if all(r["differ"] == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
