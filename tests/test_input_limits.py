"""What a file may make ``hypviz compare`` allocate is bounded and stated, and bad values are usage errors.

* ``HYPVIZ_MAX_INPUT_BYTES`` bounds what the inputs *expand to*: elements x item size of every tensor a file
  holds, taken from shapes before anything is made dense (a stride-0 tensor of a 1.6 kB file that would take
  33.5 GiB), and what a ``.pt`` zip decompresses to; ``HYPVIZ_MAX_LAYERS`` the layer records of a capture file,
  ``HYPVIZ_MAX_NAME_CHARS`` the names and strings read from it.  Each refusal is one line, exit 2, naming the
  limit and the variable that raises it.  Slow cases (many layers, long names) run with small limits.
* The norm checks go through the points block by block: no float64 copy of the whole input.
* Usage errors: ``--rows 1``, a ``--seed`` outside 0 .. 2**64 - 1, a temperature below what float32 resolves
  (given or stored in a capture), a capture without layers, sparse capture records; bfloat16 and float16
  records are analysed (in float32); torch's advice to load a refused pickle unsafely is never relayed.
* Every string read from a file (layer names with control characters, lone surrogates) is shown escaped.
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from hypviz import cli, data, lorentz
from hypviz.base import messages
from hypviz.capture import records
from hypviz.lorentz import points
from hypviz.reports import input_files, inputs, publishing

FAST = ("--kinds", "spatial", "--sample-rows", "4", "--device", "cpu")
LIMIT_ENVS = (input_files.MAX_INPUT_ENV, input_files.MAX_LAYERS_ENV, input_files.MAX_NAME_ENV)


@pytest.fixture(autouse=True)
def _no_limits_from_outside(monkeypatch):
    for name in LIMIT_ENVS + ("HYPVIZ_DEBUG", publishing.PAUSE_ENV):
        monkeypatch.delenv(name, raising=False)


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, out: str, err: str, *words: str, longest: int = 600) -> str:
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and out == "", err
    assert len(lines[0]) < longest, f"a long line: {len(lines[0])} characters"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", lines[0]), repr(lines[0])
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture()
def work(tmp_path):
    q = data.lifted_gaussian((2, 12), 3, 1.0, seed=1, dtype=torch.float32)
    k = data.lifted_gaussian((2, 10), 3, 1.0, seed=2, dtype=torch.float32)
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    return tmp_path


def _record(name: str = "l0", dtype=torch.float32, temperature: float = 1.0, n: int = 4) -> records.LayerRecord:
    q = data.lifted_gaussian((1, n), 3, 1.0, seed=3, dtype=torch.float64).to(dtype)
    return records.LayerRecord(name=name, queries=q, keys=q, values=None, k=1.0, mode="generic", kind="distance",
                               temperature=temperature)


def _capture(path: Path, layers: list) -> Path:
    torch.save({"format": records.FORMAT, "version": records.VERSION, "layers": layers}, path)
    return path


# --------------------------------------------------------------------------- #
# what inputs expand to
# --------------------------------------------------------------------------- #
def test_a_stride_0_tensor_is_measured_by_what_it_expands_to(work, capsys):
    torch.save(torch.zeros(1, 1, 9).expand(1, 10**9, 9), work / "wide.pt")
    assert (work / "wide.pt").stat().st_size < 4000
    refused(*run(capsys, "compare", work / "wide.pt", work / "k.npy", "--spatial", *FAST, "--out", work / "r"),
            "QUERIES: what the tensors in", "take once made dense is 33.5 GiB (36000000000 bytes)",
            "above the input limit of 2 GiB", f"set {input_files.MAX_INPUT_ENV}")
    assert not (work / "r").exists()


def test_a_compressed_pt_is_measured_by_what_it_decompresses_to(work, capsys, monkeypatch):
    torch.save(torch.zeros(1, 100_000, 9), work / "plain.pt")
    with zipfile.ZipFile(work / "plain.pt") as src, zipfile.ZipFile(work / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    size = (work / "deflated.pt").stat().st_size
    assert size < 100_000 and torch.load(work / "deflated.pt", weights_only=True).shape == (1, 100_000, 9)
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "1000000")
    refused(*run(capsys, "compare", work / "deflated.pt", work / "k.npy", "--spatial", *FAST, "--out", work / "r"),
            "QUERIES: what the file", "decompresses to is 3.43 MiB", "above the input limit of 977 KiB",
            input_files.MAX_INPUT_ENV)


def test_a_capture_is_measured_by_what_its_tensors_expand_to(work, capsys, monkeypatch):
    rec = _record().to_dict()
    rec["queries"] = rec["queries"][:, :1].expand(1, 100_000, 4)  # 3.2 MB once dense, a few bytes on disk
    path = _capture(work / "cap.pt", [rec])
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "1000000")
    refused(*run(capsys, "compare", path, *FAST[2:], "--out", work / "r"),
            "CAPTURE: what the tensors in", "take once made dense", "above the input limit", input_files.MAX_INPUT_ENV)


def test_layer_count_and_name_lengths_are_limited(work, capsys, monkeypatch):
    monkeypatch.setenv(input_files.MAX_LAYERS_ENV, "3")
    path = records.save([_record(f"l{i}") for i in range(4)], work / "four.pt")
    refused(*run(capsys, "compare", path, "--device", "cpu", "--out", work / "r"),
            "holds 4 layer records, above the limit of 3", f"set {input_files.MAX_LAYERS_ENV}")
    path = records.save([_record(f"l{i}") for i in range(3)], work / "three.pt")
    code, out, err = run(capsys, "compare", path, "--device", "cpu", "--out", work / "r")
    assert code == 0 and err == "", err
    assert len(json.loads((work / "r" / "metrics.json").read_text())["layers"]) == 3

    monkeypatch.setenv(input_files.MAX_NAME_ENV, "10")
    path = records.save([_record("x" * 11)], work / "long.pt")
    refused(*run(capsys, "compare", path, "--device", "cpu", "--out", work / "r2"),
            "record 0: its name is 11 characters long, above the limit of 10", f"set {input_files.MAX_NAME_ENV}")
    monkeypatch.delenv(input_files.MAX_NAME_ENV)
    for key in ("kind", "mode"):  # a megabyte string from a file is cut in the message (default limit)
        rec = _record().to_dict()
        rec[key] = "y" * 10**6
        line = refused(*run(capsys, "compare", _capture(work / f"{key}.pt", [rec]), "--out", work / "r2"),
                       f"its {key} is 1000000 characters long, above the limit of 256")
        assert "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy" not in line
    torch.save({"format": "z" * 10**6, "version": 1, "layers": []}, work / "format.pt")
    line = refused(*run(capsys, "compare", work / "format.pt", "--out", work / "r2"),
                   "not a hypviz.capture file", "(1000000 characters)")
    assert "z" * 100 not in line
    with pytest.raises(ValueError, match=r"kind must be one of .*, got 'y+\.\.\.' \(1000000 characters\)") as err:
        records.parse({"format": records.FORMAT, "version": 1, "layers": [rec | {"mode": "generic", "kind": "y" * 10**6}]})
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("env", LIMIT_ENVS)
@pytest.mark.parametrize("value", ["0", "-5", "lots", "1e9"])
def test_limits_set_to_nonsense_are_a_usage_error(env, value, work, capsys, monkeypatch):
    monkeypatch.setenv(env, value)
    path = records.save([_record()], work / "cap.pt")
    refused(*run(capsys, "compare", path, "--out", work / "r"), f"{env} must be a positive whole number of", repr(value))


# --------------------------------------------------------------------------- #
# no float64 copy of the whole input
# --------------------------------------------------------------------------- #
def test_the_norm_checks_go_block_by_block(monkeypatch):
    a = np.asarray(data.lifted_gaussian((3, 40_000), 7, 1.0, seed=4, dtype=torch.float32))  # 3.8 MB of float32
    full = float(np.einsum("...i,...i->...", a.astype(np.float64), a.astype(np.float64)).max())
    monkeypatch.setattr(inputs, "_BLOCK_ELEMENTS", 2**15)  # 256 KiB float64 blocks (4 MiB... 32 MiB in real runs)
    tracemalloc.start()
    try:
        top = inputs._overflow(a, "QUERIES", False, 1.0, np.float32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert top == full
    assert peak < a.nbytes / 4  # a float64 copy of the whole array would be 2 x a.nbytes
    # blocks of a few rows: the same answers, and the first bad value found in a later block
    monkeypatch.setattr(inputs, "_BLOCK_ELEMENTS", 64)
    assert inputs._overflow(a, "QUERIES", False, 1.0, np.float32) == full
    b = a.copy()
    b[2, 39_000, 5] = np.nan
    with pytest.raises(messages.UsageError, match=r"QUERIES holds NaN \(first non-finite value at index \(2, 39000, 5\)\)"):
        inputs._finite_parts(b, "QUERIES")


def test_check_points_goes_block_by_block_and_names_the_same_worst_row(monkeypatch):
    x = data.lifted_gaussian((2, 3000), 4, 1.0, seed=5)
    x[1, 2500, 0] += 1e-3
    x[0, 10, 0] += 1e-6
    with pytest.raises(ValueError) as whole:
        lorentz.check_points(x)
    monkeypatch.setattr(points, "_CHECK_BLOCK", 50)
    with pytest.raises(ValueError) as blocks:
        lorentz.check_points(x)
    assert str(whole.value) == str(blocks.value) and "worst is row (1, 2500)" in str(blocks.value)
    x[1, 2500, 0] = float("inf")
    with pytest.raises(ValueError, match=r"row \(1, 2500\) holds NaN or Inf"):
        lorentz.check_points(x)


# --------------------------------------------------------------------------- #
# usage errors, one line each
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("option, value, words", [
    ("--rows", "1", "argument --rows: expected an integer >= 2"),
    ("--rows", "0", "argument --rows: expected an integer >= 2"),
    ("--seed", str(2**64), "argument --seed: expected an integer from 0 to 2**64 - 1"),
    ("--seed", str(-2**63 - 1), "argument --seed: expected an integer from 0 to 2**64 - 1"),
    ("--seed", "-1", "argument --seed: expected an integer from 0 to 2**64 - 1"),
    ("--seed", "9" * 5000, "argument --seed: expected an integer from 0 to 2**64 - 1"),
    ("--temperature", "1e-39", "--temperature: temperature 1e-39 makes the logits overflow float32"),
])
def test_bad_values_are_usage_errors(option, value, words, work, capsys):
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", *FAST, "--rows", "4", option, value,
                 "--out", work / "r"), words)
    assert not (work / "r").exists()


def test_the_largest_seed_is_accepted(work, capsys):
    code, out, err = run(capsys, "compare", work / "q.npy", work / "k.npy", *FAST, "--rows", "4", "--seed",
                         str(2**64 - 1), "--out", work / "r")
    assert code == 0, err
    assert json.loads((work / "r" / "metrics.json").read_text())["setup"]["sample_seed"] == 2**64 - 1


def test_capture_records_that_are_refused_in_one_line(work, capsys):
    rec = _record().to_dict()
    refused(*run(capsys, "compare", _capture(work / "empty.pt", []), "--out", work / "r"),
            "holds no layer records (its 'layers' list is empty)")
    with pytest.raises(ValueError, match="holds no layer records"):
        records.load(work / "empty.pt")
    tiny = dict(rec, temperature=1e-300)
    refused(*run(capsys, "compare", _capture(work / "tiny.pt", [tiny]), "--device", "cpu", "--out", work / "r"),
            "CAPTURE: layer l0 (call 0), the temperature 1e-300 it stores: temperature 1e-300 makes the logits overflow")
    focused = dict(rec, kind="focused", power=2.0, norm_scale=1.0, temperature=None)  # compared at --temperature
    refused(*run(capsys, "compare", _capture(work / "focused.pt", [focused]), "--device", "cpu", "--temperature", "1e-39",
                 "--out", work / "r"), "CAPTURE: layer l0 (call 0), --temperature: temperature 1e-39 makes the logits overflow")
    sparse = dict(rec, queries=rec["queries"].to_sparse(), keys=rec["keys"].to_sparse())
    refused(*run(capsys, "compare", _capture(work / "sparse.pt", [sparse]), "--out", work / "r"),
            "record 0: LayerRecord 'l0' queries: expected a dense tensor of coordinates, got a sparse tensor")

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    _capture(work / "pickle.pt", [Payload()])
    line = refused(*run(capsys, "compare", work / "pickle.pt", "--out", work / "r"), "not a readable capture file",
                   "it holds a pickled")
    assert not re.search(r"weights_only\s*(set to|=)\s*False|trust|Re-running", line)
    with pytest.raises(ValueError) as err:
        records.load(work / "pickle.pt")
    assert not re.search(r"weights_only\s*(set to|=)\s*False|trust|Re-running", str(err.value))
    assert not (work / "r").exists()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_captures_are_analysed_in_float32(dtype, work, capsys):
    path = records.save([_record(dtype=dtype, n=6)], work / "half.pt")
    code, out, err = run(capsys, "compare", path, "--device", "cpu", "--out", work / "r")
    assert code == 0 and err == "", err
    meta = json.loads((work / "r" / "metrics.json").read_text())
    assert meta["layers"][0]["name"] == "l0"
    assert "6 queries" in out


# --------------------------------------------------------------------------- #
# strings from a file are shown escaped
# --------------------------------------------------------------------------- #
def test_layer_names_are_escaped_everywhere(work, capsys):
    evil = "evil\x1b[31mRED\x07\r\nFAKE line\u202e\ud800"
    rec = _record().to_dict() | {"name": evil}
    code, out, err = run(capsys, "compare", _capture(work / "evil.pt", [rec]), "--device", "cpu", "--out", work / "r")
    assert code == 0 and err == "", err
    shown = "evil\\x1b[31mRED\\x07\\x0d\\x0aFAKE line\\u202e\\ud800"
    assert shown in out and not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", out)
    assert json.loads((work / "r" / "metrics.json").read_text())["layers"][0]["name"] == shown
    html = (work / "r" / "report.html").read_text(encoding="utf-8")
    assert "\x1b" not in html and "\x07" not in html and "\u202e" not in html


@pytest.mark.parametrize("error", [
    MemoryError("Unable to allocate 33.5 GiB for an array with shape (1000000000, 9) and data type float32"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
                 "allocate 36000000000 bytes. Error code 12 (Cannot allocate memory)"),
])
def test_running_out_of_memory_is_one_line(error, work, capsys, monkeypatch):
    import hypviz.reports.point_report as report

    def greedy(*args, **kwargs):
        raise error

    monkeypatch.setattr(report, "analyse", greedy)
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", *FAST, "--out", work / "r"),
            f"error: not enough memory ({str(error)[:30]}", "nothing written", "--rows")
    assert not (work / "r").exists() and not [p for p in work.iterdir() if p.name.startswith(".")]


def test_running_out_of_memory_with_features_given_names_them(work, capsys, monkeypatch):
    """The random features may be what did not fit: a --features the user gave is named in the advice."""
    import hypviz.reports.point_report as report

    def greedy(*args, **kwargs):
        raise MemoryError("Unable to allocate 2.03 GiB for an array with shape (64528, 65, 65) and data type float64")

    monkeypatch.setattr(report, "analyse", greedy)
    line = refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--kinds", "distance_rf", "--features", "4096",
                        "--out", work / "r"), "error: not enough memory", "fewer --features (now 4096)", "--rows")
    assert "nothing written" in line and not (work / "r").exists()


def test_a_huge_value_on_the_command_line_is_cut_in_its_one_line(work, capsys):
    line = refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--kinds", "x" * 100_000, "--out", work / "r"),
                   "argument --kinds", longest=2200)
    assert re.search(r"x\.\.\. \(\d{6} characters in all\) \(see 'hypviz compare --help'\)$", line), line
