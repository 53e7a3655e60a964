"""Faults of ``hypviz compare`` that once crashed, hung or misled, each pinned down (in process through
``hypviz.cli.main``, except the signal tests, which kill a child process at each stage of publishing).

Bad input is exit code 2 with one line naming what was wrong and what was expected, and nothing
written: tensors that are not dense floats, names that are not UTF-8 or hold escape codes, ``--out``
names too long for the temporary folder, a full disk, FIFOs, inputs above ``HYPVIZ_MAX_INPUT_BYTES``
(refused from their headers, before anything is decompressed), pickles.  Valid input is accepted:
big-endian float32, float16 and bfloat16 points (checked at their own precision).  ``--force``
replaces a report atomically (``renameat2(RENAME_EXCHANGE)``), and a SIGTERM or SIGHUP at any stage
leaves ``--out`` holding the complete old or new report, says which, and leaves no temporary folder.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from hypviz import attention, cli, data, lorentz
from hypviz.base import messages
from hypviz.cli import command
from hypviz.reports import input_files, point_report, publishing
from hypviz.reports import inputs as report_inputs

ENV = {k: v for k, v in os.environ.items() if k not in ("HYPVIZ_DEBUG", publishing.PAUSE_ENV, input_files.MAX_INPUT_ENV)}
ENV.update(MPLBACKEND="Agg", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
FAST = ("--kinds", "spatial", "--sample-rows", "4", "--device", "cpu")  # one comparison, small figures


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if re.match(r"^\..*\.(tmp|old)-", p.name))


def refused(code: int, out: str, err: str, *words: str) -> str:
    """Exit 2, one line on stderr starting with 'hypviz', holding ``words``, and no raw control characters."""
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("hypviz") and "Traceback" not in err and out == ""
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line), repr(line)
    for word in words:
        assert word in line, f"{word!r} not in {line!r}"
    return line


@pytest.fixture(scope="module")
def pts():
    q = data.lifted_gaussian((2, 12), 3, 1.0, seed=1, dtype=torch.float32)
    k = data.lifted_gaussian((2, 10), 3, 1.0, seed=2, dtype=torch.float32)
    return q, k


@pytest.fixture()
def work(tmp_path, pts):
    q, k = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", k.numpy())
    return tmp_path


def untouched(work: Path, before: set[str]) -> None:
    assert {p.name for p in work.iterdir()} == before, "something was written"


# --------------------------------------------------------------------------- #
# 1. exit 1 instead of 2
# --------------------------------------------------------------------------- #
ODD_TENSORS = {
    "sparse": (lambda q: q.to_sparse(), "holds a sparse tensor"),
    "sparse csr": (lambda q: q[0].to_sparse_csr(), "holds a sparse tensor"),
    "meta": (lambda q: torch.empty(q.shape, device="meta"), "holds a meta tensor"),
    "quantised": (lambda q: torch.quantize_per_tensor(q, 0.01, 0, torch.qint8), "holds a quantised tensor"),
    "float8": (lambda q: q.to(torch.float8_e4m3fn), "holds a float8 tensor"),
    "nested": (lambda q: torch.nested.nested_tensor([q[0], q[1, :5]]), "holds a nested tensor"),
}


@pytest.mark.parametrize("kind", list(ODD_TENSORS))
@pytest.mark.parametrize("in_dict", [False, True])
def test_tensors_that_are_not_dense_floats_are_refused(kind, in_dict, work, pts, capsys):
    make, words = ODD_TENSORS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantised and nested tensors warn that they are deprecated / a prototype
        t = make(pts[0])
    torch.save({"queries": t} if in_dict else t, work / "odd.pt")
    before = {p.name for p in work.iterdir()}
    refused(*run(capsys, "compare", work / "odd.pt", work / "k.npy", "--out", work / "r"),
            "QUERIES", "odd.pt", words, "expected a dense float16/bfloat16/float32/float64 tensor")
    untouched(work, before)


def test_file_names_that_are_not_utf8_are_escaped_in_the_report(work, pts, capsys):
    # one run for two faults: a name that is not UTF-8 (queries and --out), holding big-endian float32 points
    q, k = pts
    qname = os.fsdecode(b"q\xff.npy")
    try:
        np.save(work / qname, q.numpy().astype(">f4"))
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    out = work / os.fsdecode(b"r\xfe")
    code, stdout, err = run(capsys, "compare", work / qname, work / "k.npy", "--out", out, *FAST)
    assert code == 0, err
    meta = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert meta["inputs"]["queries"]["path"].endswith("q\\xff.npy")
    assert meta["inputs"]["queries"]["dtype"] == "float32" and meta["setup"]["dtype"] == "float32"
    assert "q\\xff.npy vs k.npy" in (out / "report.html").read_text(encoding="utf-8")
    assert "r\\xfe" in stdout and "q\\xff.npy" in stdout
    # 2. big-endian float32 is float32: checked and computed there, the same numbers as native float32
    expected = attention.compare(q, k, "spatial", "distance", device="cpu")
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-6)
    assert leftovers(work) == []


def test_every_out_name_the_file_system_allows_is_accepted_and_longer_ones_refused(work, capsys):
    name_max = os.pathconf(work, "PC_NAME_MAX")
    before = {p.name for p in work.iterdir()}
    line = refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", work / ("a" * (name_max + 1))),
                   "--out name too long", f"{name_max + 1} bytes", f"at most {name_max}")
    assert "a" * 40 not in line  # the name is shortened in the message
    untouched(work, before)
    # 250 characters and the longest the file system allows: the temporary folder beside it is cut to fit
    for n in (name_max - publishing.TMP_EXTRA + 1, 250, name_max):
        out = work / ("a" * n)
        assert len(publishing.tmp_prefix(out)) + 8 <= name_max
        code, stdout, err = run(capsys, "compare", work / "q.npy", work / "k.npy", *FAST, "--out", out)
        assert code == 0 and err == "", err
        assert (out / "metrics.json").is_file() and leftovers(work) == []
        assert run(capsys, "compare", work / "q.npy", work / "k.npy", *FAST, "--out", out, "--force")[0] == 0
        assert leftovers(work) == []
    # a multi-byte name is measured in bytes: 2 bytes a character
    out = work / ("é" * (name_max // 2))
    assert publishing.check_out(out, force=False) == out
    with pytest.raises(messages.UsageError, match="too long"):
        publishing.check_out(work / ("é" * (name_max // 2 + 1)), force=False)
    assert publishing.tmp_prefix(out).startswith(".é") and len(os.fsencode(publishing.tmp_prefix(out))) + 8 <= name_max


def _old_report(folder: Path, tag: str = "old") -> None:
    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({"generator": "hypviz", "tag": tag}))
    (folder / "report.html").write_text(f"<p>{tag}</p>")


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_is_a_clear_error_and_removes_the_temporary_folder(existing, work, capsys, monkeypatch):
    from hypviz.reports import writing

    def full(result, folder, options=None):
        (Path(folder) / "metrics.json").write_text("{half")
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / "rows.npz"))

    monkeypatch.setattr(writing, "write_point_report", full)
    out = work / "r"
    if existing:
        _old_report(out)
    before = {p.name for p in work.iterdir()}
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", out, "--force", *FAST),
            "cannot write the report", "No space left on device", "ENOSPC", "nothing written")
    untouched(work, before)
    assert leftovers(work) == []
    if existing:
        assert json.loads((out / "metrics.json").read_text())["tag"] == "old"


# --------------------------------------------------------------------------- #
# 2. valid input refused: half precision
# --------------------------------------------------------------------------- #
def test_float16_and_bfloat16_points_are_checked_at_their_precision(work, capsys):
    xs = torch.randn(2, 12, 3, generator=torch.Generator().manual_seed(3))
    ks = torch.randn(2, 10, 3, generator=torch.Generator().manual_seed(4)) * 2
    q16 = lorentz.lift(xs.half())  # lifted in float16: off <x,x>_L = -k by float16 rounding (~1e-3 relative)
    kbf = lorentz.lift(ks.bfloat16())
    with pytest.raises(ValueError, match="off the hyperboloid"):
        lorentz.check_points(q16.float())  # refused at float32's tolerance: the fault
    np.save(work / "q16.npy", q16.numpy())
    torch.save({"keys": kbf}, work / "kbf.pt")
    code, stdout, err = run(capsys, "compare", work / "q16.npy", work / "kbf.pt", "--out", work / "r", *FAST)
    assert code == 0, err
    meta = json.loads((work / "r" / "metrics.json").read_text())
    assert meta["inputs"]["queries"]["dtype"] == "float16" and meta["inputs"]["keys"]["dtype"] == "bfloat16"
    assert meta["setup"]["dtype"] == "float32"
    # the spatial parts, re-lifted in float32
    expected = attention.compare(lorentz.lift(q16[..., 1:].float()), lorentz.lift(kbf[..., 1:].float()), "spatial",
                                 "distance", device="cpu")
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-6)

    # points that are merely wrong are still refused, and the message names the dtype
    bad = q16.clone()
    bad[1, 4, 0] *= 1.1
    np.save(work / "bad16.npy", bad.numpy())
    refused(*run(capsys, "compare", work / "bad16.npy", work / "kbf.pt", "--out", work / "s"),
            "QUERIES (float16)", "off the hyperboloid", "row (1, 4)")
    # float16 points beyond |x| = 256 (whose squares overflow float16) are fine
    big = lorentz.lift(xs * 300).half().numpy()
    with np.errstate(over="ignore"):
        assert np.isinf(big**2).any()
    arr, _, made = input_files.read_input(_save(work / "big16.npy", big), "QUERIES", None, "--queries-key")
    inputs = report_inputs.prepare(arr, arr, k=1.0, spatial=False, heads_axis=None, dtype="auto", described={},
                                   made_in=(made, made))
    assert inputs.queries.dtype == torch.float32 and made == "float16"
    # API: a float16 numpy array passed to prepare is checked as float16 too; --dtype float64 re-lifts there
    inputs = report_inputs.prepare(q16.numpy(), q16.numpy(), k=1.0, spatial=False, heads_axis=None, dtype="float64", described={})
    assert inputs.queries.dtype == torch.float64
    torch.testing.assert_close(inputs.queries, lorentz.lift(q16[..., 1:].double()), rtol=0, atol=0)


def _save(path: Path, arr) -> Path:
    np.save(path, arr)
    return path


# --------------------------------------------------------------------------- #
# 3. a FIFO hangs forever
# --------------------------------------------------------------------------- #
def test_fifos_and_devices_are_refused_without_reading(work, capsys):
    os.mkfifo(work / "pipe.npy")
    (work / "dev.npy").symlink_to("/dev/null")
    before = {p.name for p in work.iterdir()}
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("hypviz blocked on a FIFO"))
    signal.alarm(20)
    try:
        refused(*run(capsys, "compare", work / "pipe.npy", work / "k.npy", "--out", work / "r"),
                "QUERIES", "pipe.npy", "is not a regular file", "FIFO")
        refused(*run(capsys, "compare", work / "q.npy", work / "dev.npy", "--out", work / "r"),
                "KEYS", "dev.npy", "is not a regular file", "character device")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    untouched(work, before)


# --------------------------------------------------------------------------- #
# 4. the input limit, from the .npy headers
# --------------------------------------------------------------------------- #
def _npy_bytes(shape, dtype="<f8", data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})  # magic too
    return buf.getvalue() + data


def test_inputs_above_the_limit_are_refused_from_their_headers(work, capsys, monkeypatch):
    # an .npz of 1 MiB promising 8 GiB: refused from the member's header, nothing decompressed
    with zipfile.ZipFile(work / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("queries.npy", _npy_bytes((2**27, 8), data=bytes(2**20)))
        z.writestr("keys.npy", _npy_bytes((4, 4), data=bytes(128)))
    (work / "bomb.npy").write_bytes(_npy_bytes((2**31,), "<f4"))  # a header promising 8 GiB, and no data
    before = {p.name for p in work.iterdir()}
    def read_array(*a, **kw):
        raise AssertionError("a refused array was read")

    with monkeypatch.context() as m:
        m.setattr(np.lib.format, "read_array", read_array)
        for path, shown in ((work / "bomb.npz", "bomb.npz [queries]"), (work / "bomb.npy", "bomb.npy")):
            refused(*run(capsys, "compare", path, work / "k.npy", "--out", work / "r"),
                    "QUERIES", shown, "8 GiB", "above the input limit of 2 GiB", input_files.MAX_INPUT_ENV)
    untouched(work, before)
    # the limit is the environment's; .pt files are held to it by their size
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "1000")
    np.savez_compressed(work / "zeros.npz", queries=np.zeros((50, 5)))  # 2000 bytes of data, compressed to less
    torch.save(torch.zeros(50, 5), work / "zeros.pt")
    assert (work / "zeros.npz").stat().st_size < 1000
    refused(*run(capsys, "compare", work / "zeros.npz", work / "k.npy"), "QUERIES", "2000 bytes", "1000 bytes")
    refused(*run(capsys, "compare", work / "q.npy", work / "zeros.pt"), "KEYS", "the file", "zeros.pt", "1000 bytes")
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "2000")
    assert input_files.read_input(work / "zeros.npz", "QUERIES", None, "--queries-key")[0].shape == (50, 5)
    monkeypatch.setenv(input_files.MAX_INPUT_ENV, "lots")
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy"), input_files.MAX_INPUT_ENV, "positive whole number of bytes")
    # documented
    assert input_files.MAX_INPUT_ENV in (command.__doc__ or "")
    monkeypatch.delenv(input_files.MAX_INPUT_ENV)
    code = cli.main(["compare", "--help"])
    assert code == 0 and input_files.MAX_INPUT_ENV in capsys.readouterr().out


# --------------------------------------------------------------------------- #
# 5. messages that mislead
# --------------------------------------------------------------------------- #
def test_messages_say_what_is_wrong(work, capsys):
    before = {p.name for p in work.iterdir()}
    np.save(work / "scalar.npy", np.float32(1.5))
    refused(*run(capsys, "compare", work / "scalar.npy", work / "k.npy"), "QUERIES", "rank 0 (a scalar)")
    torch.save(torch.tensor(1.5), work / "scalar.pt")
    refused(*run(capsys, "compare", work / "q.npy", work / "scalar.pt"), "KEYS", "rank 0 (a scalar)")
    (work / "afile").write_text("x")
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", work / "afile" / "r"),
            "the parent of --out", "afile", "is a file, not a folder")
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", work / "afile" / "x" / "r"),
            "lies under", "afile", "is a file, not a folder")
    # random bytes, a pickle, object arrays: never numpy's or torch's advice to load them unsafely
    (work / "random.npy").write_bytes(np.random.default_rng(0).bytes(300))
    np.save(work / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(work / "objects.npz", queries=np.array([[1.0], "x"], dtype=object))
    (work / "pickle.npy").write_bytes(b"\x80\x04K\x01.")
    torch.save({"queries": torch.zeros(3, 4), "extra": _Custom()}, work / "custom.pt")
    for name, words in (
        ("random.npy", ["is not a .npy array file"]),
        ("objects.npy", ["Python objects", "never unpickles"]),
        ("objects.npz", ["objects.npz [queries]", "never unpickles"]),
        ("pickle.npy", ["is not a .npy array file", "pickle", "never unpickles"]),
        ("custom.pt", ["cannot read", "torch.load(weights_only=True)", "_Custom"]),
    ):
        line = refused(*run(capsys, "compare", work / name, work / "k.npy"), "QUERIES", *words)
        assert "allow_pickle" not in line and "weights_only` set to `False" not in line and "trust" not in line
    # names with terminal escape codes and other control characters are shown escaped
    evil = "q\x1b[31m\x07\u202e.npy"
    (work / evil).symlink_to(work / "q.npy")
    line = refused(*run(capsys, "compare", work / evil, work / "nope\x1b[2J.npy"), "KEYS", "nope\\x1b[2J.npy")
    line = refused(*run(capsys, "compare", work / evil, work / "scalar.npy"), "KEYS", "rank 0")
    np.save(work / "ints\x1b.npy", np.ones((3, 4), dtype=np.int32))
    refused(*run(capsys, "compare", work / "ints\x1b.npy", work / "k.npy"), "ints\\x1b.npy", "integers")
    refused(*run(capsys, "compare", work / "q.npy", work / "k.npy", "--colour\x1b[2J"), "--colour\\x1b[2J")
    assert messages.show(evil) == "q\\x1b[31m\\x07\\u202e.npy" and messages.show(os.fsdecode(b"a\xff")) == "a\\xff"
    for name in ("scalar.npy", "scalar.pt", "afile", "random.npy", "objects.npy", "objects.npz", "pickle.npy",
                 "custom.pt", evil, "ints\x1b.npy"):
        before.add(name)
    untouched(work, before)


class _Custom:
    pass


# --------------------------------------------------------------------------- #
# 6. publishing: atomic, and signal-safe
# --------------------------------------------------------------------------- #
def _new_report(folder: Path, tag: str) -> Path:
    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({"generator": "hypviz", "tag": tag}))
    (folder / "report.html").write_text(tag)
    return folder


@pytest.mark.parametrize("method", ["renameat2", "fallback"])
def test_publish_swaps_a_report_in_one_step(method, tmp_path, monkeypatch):
    if method == "fallback":
        monkeypatch.setattr(publishing, "_RENAMEAT2", False)  # where publish looks it up
    elif not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux's")
    out = tmp_path / "r"
    assert publishing.publish(_new_report(tmp_path / ".r.tmp-a", "first"), out, force=False) == "renamed"
    with pytest.raises(messages.UsageError, match="already exists"):
        publishing.publish(_new_report(tmp_path / ".r.tmp-b", "second"), out, force=False)
    how = publishing.publish(tmp_path / ".r.tmp-b", out, force=True)
    assert how == ("exchanged" if method == "renameat2" else "two renames")
    assert json.loads((out / "metrics.json").read_text())["tag"] == "second"
    assert leftovers(tmp_path) == []


def test_signal_handlers_are_restored_after_a_run(work, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    run(capsys, "compare", work / "q.npy", work / "scalar.npy")
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize("swallowed", [False, True])
def test_an_interruption_wins_over_what_a_library_made_of_it(swallowed, work, capsys, monkeypatch):
    # a signal during an import surfaces as ImportError ("initialization failed"); a library may even swallow it
    from hypviz.reports import writing

    def write(result, folder, options=None):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs in the main thread at the next bytecode boundary
                time.sleep(0.001)
        except BaseException:
            if not swallowed:
                raise ImportError("initialization failed") from None
        (Path(folder) / "metrics.json").write_text(json.dumps({"generator": "hypviz", "tag": "new"}))
        (Path(folder) / "report.html").write_text("new")
        return ["metrics.json", "report.html"]

    monkeypatch.setattr(writing, "write_point_report", write)
    monkeypatch.setattr(point_report, "summary", lambda *a, **k: "summary")
    guard = signal.signal(signal.SIGTERM, lambda *a: None)  # should main not install its handler: no kill of pytest
    try:
        code, out, err = run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", work / "r", *FAST)
        assert signal.getsignal(signal.SIGTERM) is not publishing.on_signal
    finally:
        signal.signal(signal.SIGTERM, guard)
    assert code == 143 and len(err.strip().splitlines()) == 1, err
    if swallowed:  # the write went on and published: the message says so
        assert err.startswith("hypviz compare: interrupted after the new report was published in")
        assert json.loads((work / "r" / "metrics.json").read_text())["tag"] == "new"
    else:
        assert err == "hypviz compare: interrupted; nothing written (SIGTERM)\n" and not (work / "r").exists()
    assert leftovers(work) == []


STAGES = {
    # name: (HYPVIZ_TEST_PAUSE_AT, an old report to replace, exit code, published)
    "tmp, no old report": ("tmp:HUP", False, 129, False),
    "written": ("written", True, 143, False),
    "swapped": ("swapped", True, 143, True),
    "cleaned": ("cleaned:SIGHUP", True, 129, True),
    # after the command has returned (summary printed, exit handlers not yet run): still the signal's code and line
    "finished": ("finished", True, 143, True),
    "finished, SIGINT, no old report": ("finished:INT", False, 130, True),
}


@pytest.fixture(scope="module")
def killed(tmp_path_factory, pts):
    q, k = pts
    jobs = {}
    for name, (stage, old, _, _) in STAGES.items():
        d = tmp_path_factory.mktemp("sig")
        np.save(d / "q.npy", q.numpy())
        np.save(d / "k.npy", k.numpy())
        if old:
            _old_report(d / "r")
        jobs[name] = (d, [sys.executable, "-m", "hypviz.cli", "compare", "q.npy", "k.npy", "--out", "r", "--force", *FAST],
                      {**ENV, publishing.PAUSE_ENV: stage})
    # the children must start with SIGINT at its default, as from a shell: a test runner's worker may
    # ignore it (pytest-xdist's do), and an ignored SIGINT is inherited and, rightly, left ignored by
    # hypviz (nohup); a Python-level handler here becomes the default in a child that execs.  SIGHUP likewise: a
    # suite run under nohup ignores it, and the children would inherit that
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(subprocess.run, cmd, cwd=d, env=env, capture_output=True, text=True, timeout=120)
                       for name, (d, cmd, env) in jobs.items()}
            return {name: (jobs[name][0], f.result()) for name, f in futures.items()}
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGHUP, previous_hup)


@pytest.mark.parametrize("case", list(STAGES))
def test_a_signal_at_any_stage_leaves_the_old_or_the_new_report(case, killed):
    stage, old, code, published = STAGES[case]
    work, proc = killed[case]
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr  # nor one from an atexit handler
    signame = {129: "SIGHUP", 130: "SIGINT"}.get(code, "SIGTERM")
    if published:
        assert lines[0] == (f"hypviz compare: interrupted after the new report was published in {work / 'r'} ({signame}); "
                            "the report is complete")
    else:
        assert lines[0] == f"hypviz compare: interrupted; nothing written ({signame})"
    out = work / "r"
    if published:  # the complete new report
        meta = json.loads((out / "metrics.json").read_text())
        assert meta["generator"] == "hypviz" and meta["command"] == "compare" and "tag" not in meta
        assert (out / "report.html").stat().st_size > 1000 and (out / "rows.npz").exists()
    elif old:  # the complete old one, untouched
        assert json.loads((out / "metrics.json").read_text())["tag"] == "old"
        assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "report.html"]
    else:
        assert not out.exists()
    assert leftovers(work) == [], "a temporary or old folder was left behind"
    assert sorted(p.name for p in work.iterdir()) == sorted(["q.npy", "k.npy", *(["r"] if old or published else [])])


@pytest.mark.parametrize("method", ["renameat2", "fallback"])
@pytest.mark.parametrize("stage", publishing.STAGES)
def test_both_publishing_methods_at_every_stage_in_process(stage, method, work, capsys, monkeypatch):
    # the same promise for the two-rename fallback (and, cheaply, for renameat2 again): a fast stand-in writer
    from hypviz.reports import writing

    def write(result, folder, options=None):
        (Path(folder) / "metrics.json").write_text(json.dumps({"generator": "hypviz", "tag": "new"}))
        (Path(folder) / "report.html").write_text("new")
        return ["metrics.json", "report.html"]

    if method == "fallback":
        monkeypatch.setattr(publishing, "_RENAMEAT2", False)  # where publish looks it up
    monkeypatch.setattr(writing, "write_point_report", write)
    monkeypatch.setenv(publishing.PAUSE_ENV, stage)
    _old_report(work / "r")
    guard = signal.signal(signal.SIGTERM, lambda *a: None)  # should main not install its handler: no kill of pytest
    try:
        code, out, err = run(capsys, "compare", work / "q.npy", work / "k.npy", "--out", work / "r", "--force", *FAST)
    finally:
        signal.signal(signal.SIGTERM, guard)
    published = stage in ("swapped", "cleaned", "finished")
    assert code == 143 and (out == "") == (stage != "finished"), (code, err)  # "finished": after the summary
    if published:
        assert err == (f"hypviz compare: interrupted after the new report was published in {work / 'r'} (SIGTERM); "
                       "the report is complete\n")
    else:
        assert err == "hypviz compare: interrupted; nothing written (SIGTERM)\n"
    assert json.loads((work / "r" / "metrics.json").read_text())["tag"] == ("new" if published else "old")
    assert (work / "r" / "report.html").exists() and leftovers(work) == []
