"""validation/text_data.py, the Python mirror of divsim's character sequences, held to the fixtures and
the exact numbers of tests/unit/test_text_data.cpp (which holds divsim's C++ loader to them): the same
tokens on both sides, down to checksums of Debian's fortunes."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from validation.text_data import TextDataError, fortune_files, load_text, read_documents  # noqa: E402

F1 = b"%\nab\n%\r\nb\n%\n%\nc"
F2 = b"a\n%\n" * 6 + "zé\n%\n%%\n% \naa\n%\nb".encode()


def write(folder, name, data):
    path = folder / name
    path.write_bytes(data)
    return str(path)


@pytest.fixture
def twelve(tmp_path):
    return [write(tmp_path, "f1.txt", F1), write(tmp_path, "f2.txt", F2)]


def checksum(a):
    """sum over a flattened row-major of (i % 65521 + 1) * value, as the C++ test computes it."""
    flat = a.reshape(-1).astype(np.int64)
    return int(((np.arange(flat.size) % 65521 + 1) * flat).sum())


def test_documents_splits_vocabulary_and_windows(twelve):
    xt, yt, xv, yv, voc = load_text(twelve, 4)
    assert voc == ["<|doc|>", "\n", " ", "%", "a", "b", "c", "<|unk|>"]
    assert xt.dtype == np.int64 and xt.shape == (13, 4) and yt.shape == (13, 4)
    assert xt.reshape(-1).tolist() == [0, 4, 5, 1, 0, 5, 1, 0, 0, 6, 0, 0] + [0, 4, 1, 0] * 6 + \
        [0, 3, 3, 1, 3, 2, 1, 4, 4, 1, 0, 0, 0, 5, 0, 0]
    assert yt.reshape(-1).tolist() == [4, 5, 1, 0, 5, 1, 0, -1, 6, 0, -1, -1] + [4, 1, 0, -1] * 6 + \
        [3, 3, 1, 3, 2, 1, 4, 4, 1, 0, -1, -1, 5, 0, -1, -1]
    assert xv.tolist() == [[0, 7, 7, 1]]
    assert yv.tolist() == [[7, 7, 1, 0]]


def test_block_of_one_token(twelve):
    xt, yt, xv, yv, _ = load_text(twelve, 1)
    assert len(xt) == 4 + 3 + 2 + 6 * 3 + 10 + 2
    assert xt[:6, 0].tolist() == [0, 4, 5, 1, 0, 5]
    assert yt[:6, 0].tolist() == [4, 5, 1, 0, 5, 1]
    assert xv[:, 0].tolist() == [0, 7, 7, 1] and yv[:, 0].tolist() == [7, 7, 1, 0]
    assert (yt != -1).all()


def test_fewer_than_ten_documents_are_cut_into_tenths(tmp_path):
    a, b = write(tmp_path, "a.txt", b"abcdefghijklmnopqrst"), write(tmp_path, "b.txt", b"xyz")
    xt, yt, xv, yv, voc = load_text([a, b], 2)
    assert len(voc) == 22 and voc[1] == "a" and voc[18] == "r" and voc[19:] == ["x", "y", "<|unk|>"]
    assert len(xt) == 20 and len(xv) == 3
    assert xt[:4].reshape(-1).tolist() == [0, 1, 2, 0, 0, 3, 4, 0]
    assert yt[:4].reshape(-1).tolist() == [1, 2, 0, -1, 3, 4, 0, -1]
    assert xt[16:].reshape(-1).tolist() == [0, 17, 18, 0, 0, 19, 0, 20]
    assert yt[16:].reshape(-1).tolist() == [17, 18, 0, -1, 19, 0, 20, 0]
    assert xv.reshape(-1).tolist() == [0, 21, 21, 0, 0, 21]
    assert yv.reshape(-1).tolist() == [21, 21, 0, -1, 21, 0]

    xt, _, xv, yv, voc = load_text([write(tmp_path, "two.txt", b"ab")], 8)
    assert voc == ["<|doc|>", "a", "<|unk|>"]
    assert xt.tolist() == [[0, 1, 0, 0, 0, 0, 0, 0]]
    assert xv.tolist() == [[0, 2, 0, 0, 0, 0, 0, 0]]
    assert yv.tolist() == [[2, 0, -1, -1, -1, -1, -1, -1]]


def test_decodes_every_utf8_length_into_code_point_order(tmp_path):
    chars = b"\xF4\x8F\xBF\xBF\xF0\x9F\x98\x80\xEF\xBF\xBF\xED\x9F\xBF\xE2\x82\xAC\xC3\xA9\xC2\x80\x00"
    _, _, xv, _, voc = load_text([write(tmp_path, "u.txt", (chars + b"\n%\n") * 10)], 16)
    assert voc == ["<|doc|>", "\0", "\n", "\x80", "é", "€", "\uD7FF", "\uFFFF", "\U0001F600", "\U0010FFFF", "<|unk|>"]
    assert xv.tolist() == [[0, 9, 8, 7, 6, 5, 4, 3, 1, 2, 0, 0, 0, 0, 0, 0]]


def test_size_cuts_keep_the_first_sequences(twelve):
    xt, yt, xv, yv, _ = load_text(twelve, 4)
    cut = load_text(twelve, 4, train_size=2, test_size=1)
    assert (cut[0] == xt[:2]).all() and (cut[1] == yt[:2]).all() and (cut[3] == yv).all()
    assert (load_text(twelve, 4, train_size=13)[1] == yt).all()
    for kwargs, needles in [({"train_size": 14}, ["data.train_size = 14", "13 training sequences"]),
                            ({"test_size": 2}, ["data.test_size = 2", "1 held-out sequences"]),
                            ({"train_size": -1}, ["data.train_size = -1"])]:
        with pytest.raises(ValueError) as e:
            load_text(twelve, 4, **kwargs)
        assert all(n in str(e.value) for n in needles), str(e.value)
    for block in (0, -3):
        with pytest.raises(ValueError, match=f"model.block_size = {block}"):
            load_text(twelve, block)


def refusal(files, block=8):
    with pytest.raises(TextDataError) as e:
        load_text(files, block)
    return str(e.value)


def test_refuses_unreadable_files_by_name(tmp_path):
    good = write(tmp_path, "good.txt", b"some text\n")
    missing = str(tmp_path / "x-missing")
    assert refusal([good, missing]) == f"{missing}: cannot open: No such file or directory"
    (tmp_path / "folder").mkdir()
    assert refusal([str(tmp_path / "folder")]) == f"{tmp_path / 'folder'}: cannot open: is a folder, not a file"
    for name, data in [("empty.txt", b""), ("seps.txt", b"%\n%\r\n%")]:
        path = write(tmp_path, name, data)
        assert refusal([good, path]) == f'{path}: holds no text: no character outside the "%" separator lines'
    one = write(tmp_path, "one.txt", b"%\na")
    assert refusal([one]) == (f"{one}: too short: every document is one character, held out as the last tenth "
                              "of itself, which leaves the training split none")


@pytest.mark.parametrize("data,at", [
    (b"ab\x80", 2), (b"a\xC0\x80", 1), (b"a\xC1\xBF", 1), (b"a\xE0\x9F\xBF", 1), (b"\xF0\x8F\xBF\xBF", 0),
    (b"ab\xED\xA0\x80", 2), (b"x\xED\xBF\xBF", 1), (b"\xF4\x90\x80\x80", 0), (b"\xF5\x80\x80\x80", 0),
    (b"\xFF", 0), (b"abc\xE2\x82", 3), (b"abc\xF0\x9F\x98", 3), (b"abc\xE2\x82x", 3), (b"\xC3\xA9\xC3", 2)])
def test_refuses_invalid_utf8_at_its_byte(tmp_path, data, at):
    good, bad = write(tmp_path, "good.txt", b"fine\n"), write(tmp_path, "bad.txt", data)
    assert refusal([good, bad]) == f"{bad}: invalid UTF-8 at byte {at}"


@pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"), reason="no fortunes (apt-get install fortunes)")
def test_real_fortunes():
    files = fortune_files()
    assert files and files == sorted(files)
    assert all(f.startswith("/usr/share/games/fortunes/") and "." not in os.path.basename(f) for f in files)
    xt, yt, xv, yv, voc = load_text(files, 64)
    # Debian 12's fortunes 1:1.99.1-7.3: "fortunes 42646/4818 sequences of 64 tokens (vocabulary 114, 15217
    # documents)" in divsim.
    assert xt.shape == (42646, 64) and xv.shape == (4818, 64) and len(voc) == 114
    assert sum(len(read_documents(f)) for f in files) == 15217
    assert "a" in voc and "\n" in voc
    assert [checksum(a) for a in (xt, yt, xv, yv)] == [4592793277639, 4579059058443, 499887951129, 498400364349]
