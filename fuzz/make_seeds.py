#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into seeds/<target>/ (committed; rerun after a format
change): valid inputs of each kind and a few near misses, so that fuzzing starts from deep inside the
parsers instead of from their first byte. The INI and fault seeds are taken from inputs/.

    fuzz/make_seeds.py
"""
import glob
import gzip
import os
import re
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "..", "inputs")


def put(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def journal_record(kind, proc, procs, group, payload):
    """One record of src/record/journal.cpp's format (documented in docs/reliability.md)."""
    head = struct.pack("<IIIIQQI", 0x314A5344, kind, proc, procs, group, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


GENERATED = ("cli", "ini", "fault_spec", "idx", "text", "journal")


def main():
    # seeds/h5data is not written here: that target reads recipes, not file bytes, and its seeds are
    # inputs its own fuzzing found (merged with -merge=1); see docs/reliability.md.
    for target in GENERATED:
        shutil.rmtree(os.path.join(HERE, "seeds", target), ignore_errors=True)
    # command lines: one argument per line
    put("cli", "small_run", "--train.steps=5\n--optim.lr=0.1\n--model.hidden=64,32\n--run.out=x.h5")
    put("cli", "faults", "--fault=skip_rank:ranks=1,start=2\n--fault=bitflip:bit=30,ranks=0-1+3,every=2,prob=0.5")
    put("cli", "types", "--run.overwrite=yes\n--run.seed=18446744073709551615\n--optim.weight_decay=1e-4\n--model.hidden=")
    put("cli", "nameless", "--=\n--=1\n--\n--run.out=")  # "--=" once escaped the parser (found by fuzz.cli)
    put("cli", "choices", "--optim.type=adamw\n--schedule.type=step\n--dist.reduce=deterministic\n--precision.amp=fp16")
    put("cli", "print_config", "--print-config\n--batch.global=64\n--batch.accum_steps=2")
    # Ranges naming a million ranks, several times over: parsing must stay linear in the text
    put("cli", "wide_ranks", "--fault=bitflip:bit=30,ranks=0-1048575+0-1048575+0-1048575+0-1048575+0-1048575+0-1048575")
    # An option name holding a Boost error-message placeholder: its error message must still end
    put("cli", "placeholder_name", "--option '%canonical_option%'=\n--=1\n--run.out=")
    put("cli", "near_miss", "--optim.lr=nan\n--optim.lr=0.1\n--no.such=1")
    # INI files: the scenarios of inputs/ and a few crafted ones
    for path in [os.path.join(INPUTS, "baseline.ini")] + sorted(glob.glob(os.path.join(INPUTS, "faults", "*.ini")))[:4]:
        put("ini", os.path.basename(path), open(path, "rb").read())
    put("ini", "crafted", "fault = skip_rank:ranks=1\n[run]\nname = x # comment\n[optim]\nlr = 1e-3\n[model]\nhidden =\n")
    put("ini", "unknown_section", "[nosuch]\nkey = 1\n")
    # fault specs: every fault line of inputs/faults/ and crafted ones
    for path in sorted(glob.glob(os.path.join(INPUTS, "faults", "*.ini"))):
        for i, spec in enumerate(re.findall(r"^fault\s*=\s*(.+)$", open(path).read(), re.M)):
            put("fault_spec", f"{os.path.basename(path)[:-4]}_{i}", spec.strip())
    put("fault_spec", "all_keys", "bitflip:ranks=0+2-5,start=3,stop=10,every=2,prob=0.25,bit=7")
    put("fault_spec", "wide_ranks", "bitflip:ranks=0-1048575+0-1048575+0-1048575+0-1048575+0-1048575+1-9")
    put("fault_spec", "bad_range", "skip_rank:ranks=3-1")
    # IDX pairs: 2-byte little-endian length of the image part, the image file, the label file
    images = struct.pack(">IIII", 0x803, 3, 4, 4) + bytes(range(48))
    labels = struct.pack(">II", 0x801, 3) + bytes([0, 9, 4])
    for name, im, lb in [("gzip", gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)),
                         ("plain", images, labels), ("wrong_magic", labels, images)]:
        put("idx", name, struct.pack("<H", len(im)) + im + lb)
    # text: block_size byte (% 16 + 1), train_size and test_size bytes (% 4), the length of the first file,
    # then the two files
    fortunes = (b"%\nA fortune.\n%\nAnother one,\n\ton two lines.\n\t\t-- Someone\n%\n%\n" +
                b"".join(b"Fortune %d: 100%% sure.\n%%\n" % k for k in range(12)))
    for name, block, a, b in [("fortunes", 7, fortunes[:60], fortunes[60:]),
                              ("crlf_few_documents", 3, b"one\r\n%\r\ntwo\r\n", b"%\nthree"),
                              ("utf8_lengths", 15, "h\u00e9\u20ac\U0001F600\U0010FFFF\n%\n".encode() * 3, "\ud7ff\n%".encode()),
                              ("overlong", 4, b"fine\n%\n", b"\xC0\xAF\n"),
                              ("cut_sequence", 0, b"ok\n", b"\xF0\x9F\x98")]:
        put("text", name, bytes([block, 0, 0, len(a)]) + a + b)
    # journals: two processes, a header group and two rows groups; and the same cut short
    body = b""
    for group, kind in enumerate([1, 3, 3]):
        for proc in range(2):
            body += journal_record(kind, proc, 2, group, bytes((group * 7 + proc + i) % 256 for i in range(24 + 8 * proc)))
    put("journal", "two_processes", body)
    put("journal", "cut_short", body[:-10])


if __name__ == "__main__":
    main()
