"""Hostile ``.pt`` input and capture files: shared references, deep nesting, truncation and version errors.

* The size check visits each object of a loaded file once (by identity, without recursion): 100 references
  nested 8 deep (a 4 kB file naming 10^16 paths) is read at once, in a QUERIES file and inside a capture record.
* A field nested 10^5 deep is shown in a few levels: one line, never ``RecursionError``.
* A file cut at 99 % is refused in one line naming the file (truncated), never torch's or the OS's raw text.
* What is wrong in a capture file (its version, its layers) is said as such, not as "KEYS is missing".
* A capture file cut short is "truncated" (never torch's "Invalid argument"), and one holding a pickled object
  is refused unread, naming the object, as no hypviz capture: by ``records.load`` and ``hypviz compare`` alike.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hypviz import cli, data
from hypviz.capture import records
from hypviz.reports import input_files

PLACEHOLDER = "HYPVIZ_TEST_PLACEHOLDER"


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in err and "RecursionError" not in err and "Errno" not in err
    return lines[0]


def points(n: int = 8, heads: int | None = None) -> torch.Tensor:
    shape = (n,) if heads is None else (heads, n)
    return data.lifted_gaussian(shape, 3, 1.0, seed=1)


def capture_dict(tmp_path: Path) -> dict:
    q = points(heads=1)
    rec = records.LayerRecord(name="enc", queries=q, keys=q, values=None, k=1.0, mode="full", kind="distance",
                              temperature=1.0)
    records.save([rec], tmp_path / "cap.pt")
    return torch.load(tmp_path / "cap.pt", weights_only=True)


def fan_out(width: int = 100, depth: int = 8) -> list:
    x: Any = torch.zeros(2)
    for _ in range(depth):
        x = [x] * width
    return x  # width**depth paths to one tensor, depth + 1 distinct objects


def deepened(obj: dict, path: Path, depth: int = 100_000) -> Path:
    """``torch.save(obj)`` with the string :data:`PLACEHOLDER` replaced by a list nested ``depth`` deep (written as
    pickle opcodes: pickling such a list directly overflows the C stack)."""
    torch.save(obj, path)
    with zipfile.ZipFile(path) as zin:
        members = [(info.filename, zin.read(info)) for info in zin.infolist()]
    enc = PLACEHOLDER.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for name, blob in members:
            if name.endswith("data.pkl"):
                pattern = b"X" + struct.pack("<I", len(enc)) + enc  # BINUNICODE
                assert pattern in blob
                blob = blob.replace(pattern, b"]" * depth + b"a" * (depth - 1), 1)  # EMPTY_LIST x depth, APPEND
            zout.writestr(name, blob)
    return path


# --------------------------------------------------------------------------- #
# the size check: each object once
# --------------------------------------------------------------------------- #
class Counting(list):
    iterations = 0

    def __iter__(self):
        Counting.iterations += 1
        return super().__iter__()


def test_the_size_check_visits_each_container_once():
    t = torch.zeros(3, dtype=torch.float64)
    x: object = t
    for _ in range(4):
        x = Counting([x] * 50)
    Counting.iterations = 0
    assert input_files.expanded_bytes({"a": x, "b": x, "c": [t, t]}) == 24  # one tensor, counted once
    assert Counting.iterations == 4


def test_the_size_check_has_no_depth_limit_and_no_recursion():
    deep: list = []
    cur = deep
    for _ in range(100_000):
        cur.append([])
        cur = cur[0]
    cur.append(torch.zeros(5, dtype=torch.float32))
    assert input_files.expanded_bytes(deep) == 20  # found at depth 10^5: the limit cannot be hidden below depth 8


def test_a_queries_file_of_shared_references_is_read_at_once(tmp_path, capsys):
    torch.save({"queries": points().float(), "junk": fan_out()}, tmp_path / "q.pt")
    assert (tmp_path / "q.pt").stat().st_size < 8000
    torch.save({"keys": points().float()}, tmp_path / "k.pt")
    code, out, err = run(capsys, "compare", tmp_path / "q.pt", tmp_path / "k.pt", "--kinds", "spatial", "--device",
                         "cpu", "--out", tmp_path / "r", "--no-progress")
    assert code == 0, err


def test_a_capture_record_of_shared_references_is_read_at_once(tmp_path, capsys):
    d = capture_dict(tmp_path)
    torch.save(dict(d, layers=[dict(d["layers"][0], junk=fan_out())]), tmp_path / "fan.pt")
    code, out, err = run(capsys, "compare", tmp_path / "fan.pt", "--device", "cpu", "--out", tmp_path / "r",
                         "--no-progress")
    assert code == 0, err


def test_the_input_limit_still_counts_a_tensor_hidden_deep(tmp_path, capsys, monkeypatch):
    deep: object = torch.zeros(4).expand(10_000, 4)  # stride 0: 16 bytes stored, 160 kB once dense
    for _ in range(50):
        deep = [deep]
    torch.save({"queries": points().float(), "junk": deep}, tmp_path / "q.pt")
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "10000")
    code, out, err = run(capsys, "compare", tmp_path / "q.pt", tmp_path / "q.pt", "--out", tmp_path / "r")
    one_line(code, err, "QUERIES", "once made dense", input_files.MAX_INPUT_ENV)


# --------------------------------------------------------------------------- #
# deep nesting: one line
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("field, words", [
    ("name", ("CAPTURE", "record 0", "name must be a string, got list")),
    ("verify_note", ("CAPTURE", "record 0", "verify_note", "[[[[...]]]]")),
    ("kind", ("CAPTURE", "record 0")),
])
def test_a_record_field_nested_deep_is_one_line(tmp_path, capsys, field, words):
    d = capture_dict(tmp_path)
    path = deepened(dict(d, layers=[dict(d["layers"][0], **{field: PLACEHOLDER})]), tmp_path / "deep.pt")
    one_line(*run(capsys, "compare", path, "--out", tmp_path / "r")[::2], *words)
    assert not (tmp_path / "r").exists()


def test_a_queries_file_with_a_field_nested_deep_is_read(tmp_path, capsys):
    path = deepened({"queries": points().float(), "junk": PLACEHOLDER}, tmp_path / "q.pt")
    code, out, err = run(capsys, "compare", path, path, "--kinds", "spatial", "--device", "cpu", "--out",
                         tmp_path / "r", "--no-progress")
    assert code == 0, err


# --------------------------------------------------------------------------- #
# truncated files: one line naming the file
# --------------------------------------------------------------------------- #
def _cut(src: Path, dst: Path, fraction: float = 0.99) -> Path:
    blob = src.read_bytes()
    dst.write_bytes(blob[: int(len(blob) * fraction)])
    return dst


@pytest.mark.parametrize("fraction", [0.99, 0.9, 0.5, 0.05])
def test_a_truncated_torch_file_is_one_line_naming_it(tmp_path, capsys, fraction):
    torch.save({"queries": points(100).float()}, tmp_path / "q.pt")
    cut = _cut(tmp_path / "q.pt", tmp_path / "cut.pt", fraction)
    line = one_line(*run(capsys, "compare", cut, tmp_path / "q.pt", "--out", tmp_path / "r")[::2], "QUERIES",
                    str(cut))
    assert "truncated" in line or "not a torch.save file" in line or "corrupted" in line


def test_a_truncated_capture_file_is_one_line_naming_it(tmp_path, capsys):
    capture_dict(tmp_path)
    cut = _cut(tmp_path / "cap.pt", tmp_path / "cut.pt")
    one_line(*run(capsys, "compare", cut, "--out", tmp_path / "r")[::2], "CAPTURE", str(cut), "truncated")


def test_a_truncated_legacy_torch_file_is_one_line_naming_it(tmp_path, capsys):
    torch.save({"queries": points(100).float()}, tmp_path / "q.pt", _use_new_zipfile_serialization=False)
    cut = _cut(tmp_path / "q.pt", tmp_path / "cut.pt")
    one_line(*run(capsys, "compare", cut, tmp_path / "q.pt", "--out", tmp_path / "r")[::2], "QUERIES", str(cut))


def test_a_zip_member_reaching_past_the_end_is_truncated(tmp_path, capsys):
    torch.save({"queries": points(100).float()}, tmp_path / "q.pt")
    blob = bytearray((tmp_path / "q.pt").read_bytes())
    with zipfile.ZipFile(tmp_path / "q.pt") as zf:
        biggest = max(zf.infolist(), key=lambda i: i.compress_size)
    start = biggest.header_offset + 30 + len(biggest.filename.encode()) + 200  # inside the member's data
    del blob[start:start + 100]  # the directory kept, its offsets now past the data
    (tmp_path / "cut.pt").write_bytes(bytes(blob))
    one_line(*run(capsys, "compare", tmp_path / "cut.pt", tmp_path / "q.pt", "--out", tmp_path / "r")[::2],
             "QUERIES", "cut.pt")


# --------------------------------------------------------------------------- #
# what is wrong in a capture file
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("change, words", [
    (dict(version=0), ("without a valid version (expected 1, got 0)",)),
    (dict(version="1"), ("without a valid version (expected 1, got '1')",)),
    (dict(version=None), ("without a valid version (expected 1, got None)",)),
    (dict(version=True), ("without a valid version",)),
    (dict(version=99), ("version 99 is newer than this hypviz reads",)),
    (dict(layers="x"), ("'layers' must be a list of layer records, got str",)),
    (dict(layers=[]), ("holds no layer records",)),
])
def test_what_is_wrong_in_a_capture_file_is_said_as_such(tmp_path, capsys, change, words):
    d = capture_dict(tmp_path)
    torch.save(dict(d, **change), tmp_path / "bad.pt")
    line = one_line(*run(capsys, "compare", tmp_path / "bad.pt", "--out", tmp_path / "r")[::2], "CAPTURE", *words)
    assert "KEYS is missing" not in line


def test_a_capture_file_without_a_version_is_said_as_such(tmp_path, capsys):
    d = capture_dict(tmp_path)
    torch.save({key: v for key, v in d.items() if key != "version"}, tmp_path / "bad.pt")
    line = one_line(*run(capsys, "compare", tmp_path / "bad.pt", "--out", tmp_path / "r")[::2], "CAPTURE", "version")
    assert "KEYS is missing" not in line


def test_a_file_that_is_no_capture_still_asks_for_keys(tmp_path, capsys):
    np.save(tmp_path / "q.npy", points().numpy())
    torch.save({"queries": points()}, tmp_path / "q.pt")
    for path in (tmp_path / "q.npy", tmp_path / "q.pt"):
        one_line(*run(capsys, "compare", path, "--out", tmp_path / "r")[::2], "KEYS is missing")


def test_a_record_the_analysis_cannot_take_is_one_line_naming_the_layer(tmp_path, capsys):
    d = capture_dict(tmp_path)
    d["layers"][0].update(kind="focused", scale_sign=-1, power=2.0, norm_scale=1.0, mode="linear_focused",
                          temperature=None)
    torch.save(d, tmp_path / "neg.pt")
    code, out, err = run(capsys, "compare", tmp_path / "neg.pt", "--device", "cpu", "--no-progress", "--out",
                         tmp_path / "r")
    if code == 0:  # an analysis that takes such a record meets the contract too
        assert (tmp_path / "r" / "metrics.json").exists()
        return
    one_line(code, err, "CAPTURE", "enc")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("field", ["scale_sign", "call", "k", "temperature", "power"])
def test_a_tensor_where_a_record_holds_a_number_is_one_line(field, tmp_path, capsys):
    d = capture_dict(tmp_path)
    d["layers"][0][field] = points(3, heads=1)
    torch.save(d, tmp_path / "bad.pt")
    one_line(*run(capsys, "compare", tmp_path / "bad.pt", "--device", "cpu", "--out", tmp_path / "r")[::2],
             "CAPTURE", "bad.pt")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("fmt", ["npz", "pt", "capture"])
def test_a_file_cut_anywhere_near_its_end_is_one_line_naming_it(fmt, tmp_path):
    from hypviz.base.messages import UsageError

    src = tmp_path / f"whole.{'npz' if fmt == 'npz' else 'pt'}"
    if fmt == "npz":
        np.savez(src, queries=points(50).numpy())
    elif fmt == "pt":
        torch.save({"queries": points(50)}, src)
    else:
        capture_dict(tmp_path)
        src = tmp_path / "cap.pt"
    blob = src.read_bytes()
    cut = tmp_path / f"cut{src.suffix}"
    for n in [*range(1, 64), len(blob) // 100, len(blob) // 2]:  # the zip directory cut at every byte, and more
        cut.write_bytes(blob[: len(blob) - n])
        with pytest.raises(UsageError) as e:
            input_files.read_input(cut, "QUERIES", None, "--queries-key")
        text = str(e.value)
        assert "\n" not in text and str(cut) in text and "truncated or damaged" in text and "Errno" not in text, text


# --------------------------------------------------------------------------- #
# truncated and pickled capture files: records.load and hypviz compare say the same, in one line
# --------------------------------------------------------------------------- #
def _big_capture(tmp_path: Path) -> Path:
    q = points(300, heads=2)
    rec = records.LayerRecord(name="enc", queries=q, keys=q, values=q, k=1.0, mode="full", kind="distance",
                              temperature=1.0)
    return records.save([rec], tmp_path / "cap.pt")


def test_records_load_says_a_cut_capture_file_is_truncated(tmp_path):
    """torch.load says "Invalid argument" or "failed finding central directory" for most of these cuts."""
    blob = _big_capture(tmp_path).read_bytes()
    cut = tmp_path / "cut.pt"
    for n in [len(blob) // 100, len(blob) // 10, len(blob) // 2, len(blob) - 200, *range(1, 40)]:
        cut.write_bytes(blob[: len(blob) - n])
        with pytest.raises(ValueError) as e:
            records.load(cut)
        text = str(e.value)
        assert "\n" not in text and text.startswith(f"{cut}: the file is truncated"), text
        assert "expected a hypviz.capture file written by Capture.save" in text, text
        assert "Invalid argument" not in text and "Errno" not in text and "central directory" not in text, text
    cut.write_bytes(b"")
    with pytest.raises(ValueError, match=r"cut\.pt: the file is empty \(0 bytes\); expected a hypviz.capture file"):
        records.load(cut)


def test_hypviz_compare_says_a_cut_capture_file_is_truncated(tmp_path, capsys):
    blob = _big_capture(tmp_path).read_bytes()
    cut = tmp_path / "cut.pt"
    for n in (len(blob) // 100, len(blob) // 2, 1):
        cut.write_bytes(blob[: len(blob) - n])
        line = one_line(*run(capsys, "compare", cut, "--out", tmp_path / "r")[::2], "CAPTURE", str(cut), "truncated")
        assert "KEYS is missing" not in line and "Invalid argument" not in line
    assert not (tmp_path / "r").exists()


class _Payload:
    """An object whose unpickling would create the file ``marker``: what a hostile capture file may hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


class _Custom:
    pass


def _pickled_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Files holding a pickled object, and the object's name in the message."""
    import pickle

    marker = tmp_path / "ran"
    d = capture_dict(tmp_path)
    d["layers"][0]["detail"] = _Payload(marker)
    torch.save(d, tmp_path / "payload.pt")  # a capture dict with a pickled object inside a record
    torch.save(_Custom(), tmp_path / "custom.pt")  # torch.save of an object of a class
    (tmp_path / "plain.pt").write_bytes(pickle.dumps({"format": "hypviz.capture", "x": _Payload(marker)}))  # pickle.dump
    return {"payload.pt": (tmp_path / "payload.pt", f"a pickled {open.__module__}.open object"),
            "custom.pt": (tmp_path / "custom.pt", f"a pickled {__name__}._Custom object"),
            "plain.pt": (tmp_path / "plain.pt", "a pickled Python object (written by pickle, not torch.save)")}


@pytest.mark.parametrize("name", ["payload.pt", "custom.pt", "plain.pt"])
def test_a_file_holding_a_pickled_object_is_refused_unread_as_no_capture(tmp_path, capsys, name):
    path, what = _pickled_files(tmp_path)[name]
    with pytest.raises(ValueError) as e:
        records.load(path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{path}: it holds {what}, not a hypviz capture"), text
    assert "expected a hypviz.capture file written by Capture.save" in text and "KEYS" not in text, text
    line = one_line(*run(capsys, "compare", path, "--out", tmp_path / "r")[::2], "CAPTURE", str(path),
                    "is not a readable capture file", f"it holds {what}, not a hypviz capture")
    for said in (text, line):
        assert "KEYS is missing" not in said and not re.search(r"weights_only\s*(set to|=)\s*False|trust|Re-running", said)
    assert not (tmp_path / "ran").exists(), "the file's pickle was run"
    assert not (tmp_path / "r").exists()
