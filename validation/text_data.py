"""Character sequences as divsim builds them for the gpt model (data.source = fortunes | text), written
from the rules of src/data/text_data.hpp, so that a PyTorch replay trains on exactly divsim's tokens.

Documents: a file's text split at lines holding only "%" (or "%" + CR); a separator line and its line end
belong to no document, empty documents are none. Document k over all files is held out when
k % 10 == 9; with fewer than 10 documents, each of L characters is cut into tenths [j*L//10, (j+1)*L//10)
and part 9 is held out. Vocabulary: 0 "<|doc|>", the training split's code points in order, last
"<|unk|>". Each document [0, c_1 .. c_L, 0] is cut into windows of block_size inputs at 0, B, 2B, ...
while a next token remains; padding is input 0 and target -1.

Deliberately not here: batching and which rank sees which sample (the replay does that).
"""
import os
import re

import numpy as np

FORTUNE_FOLDER = "/usr/share/games/fortunes"
DOC, IGNORED = "<|doc|>", -1
UNK = "<|unk|>"
PARTS = 10
# "%" alone on its line (with an optional CR), up to and including its line end or the end of the text.
SEPARATOR = re.compile(r"^%\r?(?:\n|\Z)", re.MULTILINE)


class TextDataError(ValueError):
    """A file divsim would refuse with a DataError; the message is divsim's "<file>: <problem>"."""


def fortune_files():
    """The regular files without an extension of Debian's fortune folder (not the .dat indexes, not the
    .u8 links), sorted by name."""
    if not os.path.isdir(FORTUNE_FOLDER):
        raise TextDataError(f"{FORTUNE_FOLDER}: no such folder (Debian: apt-get install fortunes)")
    files = sorted(os.path.join(FORTUNE_FOLDER, name) for name in os.listdir(FORTUNE_FOLDER)
                   if not os.path.splitext(name)[1]
                   and os.path.isfile(os.path.join(FORTUNE_FOLDER, name))
                   and not os.path.islink(os.path.join(FORTUNE_FOLDER, name)))
    if not files:
        raise TextDataError(f"{FORTUNE_FOLDER}: holds no fortune files (Debian: apt-get install fortunes)")
    return files


def read_documents(path):
    """The documents of one file, as str."""
    if os.path.isdir(path):
        raise TextDataError(f"{path}: cannot open: is a folder, not a file")
    if os.path.exists(path) and not os.path.isfile(path):
        raise TextDataError(f"{path}: cannot open: not a regular file (a pipe, device or socket)")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TextDataError(f"{path}: cannot open: {e.strerror}") from e
    try:
        text = raw.decode("utf-8", errors="strict")  # Python's codec refuses what RFC 3629 refuses
    except UnicodeDecodeError as e:
        raise TextDataError(f"{path}: invalid UTF-8 at byte {e.start}") from e
    docs = [d for d in SEPARATOR.split(text) if d]
    if not docs:
        raise TextDataError(f'{path}: holds no text: no character outside the "%" separator lines')
    return docs


def windows(tokens, block_size):
    """(inputs, targets), each [n, block_size], of one document's token ids (without its boundaries)."""
    seq = np.concatenate(([0], tokens, [0])).astype(np.int64)
    n = (len(tokens) + block_size) // block_size
    x = np.zeros(n * block_size, dtype=np.int64)
    y = np.full(n * block_size, IGNORED, dtype=np.int64)
    used = min(len(seq), n * block_size)
    x[:used] = seq[:used]
    y[:len(seq) - 1] = seq[1:]
    return x.reshape(n, block_size), y.reshape(n, block_size)


def load_text(files, block_size, train_size=0, test_size=0):
    """(x_train, y_train, x_test, y_test, vocabulary): int64 arrays [n, block_size] (targets -1 where
    padded) and the text of each id. Raises TextDataError or ValueError where divsim refuses."""
    if block_size < 1:
        raise ValueError(f"model.block_size = {block_size} must be >= 1")
    docs = [d for path in files for d in read_documents(path)]
    if len(docs) >= PARTS:
        train = [d for k, d in enumerate(docs) if k % PARTS != PARTS - 1]
        test = docs[PARTS - 1::PARTS]
    else:
        tenths = [[d[j * len(d) // PARTS:(j + 1) * len(d) // PARTS] for j in range(PARTS)] for d in docs]
        train = [p for t in tenths for p in t[:-1] if p]
        test = [t[-1] for t in tenths]
    chars = sorted(set("".join(train)))
    if not chars:
        raise TextDataError(f"{files[0]}: too short: every document is one character, held out as the last "
                            "tenth of itself, which leaves the training split none")
    vocabulary = [DOC] + chars + [UNK]
    ids = {c: i for i, c in enumerate(chars, start=1)}
    unk = len(vocabulary) - 1

    def split(parts, size, key, name):
        pairs = [windows(np.array([ids.get(c, unk) for c in p], dtype=np.int64), block_size) for p in parts]
        x = np.concatenate([p[0] for p in pairs])
        y = np.concatenate([p[1] for p in pairs])
        if size < 0:
            raise ValueError(f"{key} = {size} must be >= 0")
        if size > len(x):
            raise ValueError(f"{key} = {size} exceeds the {len(x)} {name} sequences")
        return (x[:size], y[:size]) if size else (x, y)

    x_train, y_train = split(train, train_size, "data.train_size", "training")
    x_test, y_test = split(test, test_size, "data.test_size", "held-out")
    return x_train, y_train, x_test, y_test, vocabulary
