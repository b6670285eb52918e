"""Small Fashion-MNIST-shaped IDX folders for the bad-input corpus: one valid folder, and broken
variants that each differ from it in exactly one file (wrong magic, wrong dimensions, truncated or
corrupt gzip, a folder where a file should be, ...).

It writes files only; what divsim must say about each folder is the corpus's business (bad_input.py).
"""
import gzip
import os
import struct

import numpy as np

TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"


def idx_images(n, rows=28, cols=28, magic=0x803, seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, size=n * rows * cols, dtype=np.uint8)
    return struct.pack(">IIII", magic, n, rows, cols) + pixels.tobytes()


def idx_labels(n, magic=0x801, seed=0, top=10):
    labels = np.random.default_rng(seed + 1).integers(0, top, size=n, dtype=np.uint8)
    return struct.pack(">II", magic, n) + labels.tobytes()


def write_gz(path, data):
    with gzip.open(path, "wb") as fh:
        fh.write(data)


def valid_files(train=96, test=48):
    """{file name: uncompressed bytes} of a consistent 28x28 dataset."""
    return {TRAIN_IMAGES: idx_images(train), TRAIN_LABELS: idx_labels(train),
            TEST_IMAGES: idx_images(test, seed=2), TEST_LABELS: idx_labels(test, seed=2)}


def make_folder(root, changes=None, raw=None):
    """Writes the valid dataset into `root`, then applies `changes` {name: bytes or None (leave the
    file out)} as gzip content and `raw` {name: bytes written as they are, not gzipped}."""
    os.makedirs(root, exist_ok=True)
    files = valid_files()
    files.update(changes or {})
    for name, data in files.items():
        if data is not None and name not in (raw or {}):
            write_gz(os.path.join(root, name), data)
    for name, data in (raw or {}).items():
        with open(os.path.join(root, name), "wb") as fh:
            fh.write(data)
    return root


def gz_bytes(data):
    return gzip.compress(data, mtime=0)


def truncated_gz(data, keep=0.5):
    z = gz_bytes(data)
    return z[: int(len(z) * keep)]


def corrupt_gz(data):
    """A complete gzip member with one flipped byte inside the deflate stream (CRC or inflate error)."""
    z = bytearray(gz_bytes(data))
    z[len(z) // 2] ^= 0xFF
    return bytes(z)
