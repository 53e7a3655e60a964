"""The ``hypviz`` command: compare (.npy, .npz, .pt, --spatial, --heads-axis, --force, options), demo,
and bad input (exit code 2, one line on stderr, nothing written).  Inputs are small (2 heads x 24
queries x 20 keys).

The cases run in process through :func:`hypviz.cli.main` (which returns the exit code), with
stdout and stderr captured at both the Python and the file-descriptor level, in their own working
folder.  A subprocess is kept only where the process is what is tested: a bad input refused in a
fresh interpreter before torch (or matplotlib, plotly) is imported, the traceback that
``HYPVIZ_DEBUG=1`` lets out of the interpreter, and the installed ``hypviz`` console script.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import typing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from hypviz import attention, data, lorentz
from hypviz import cli as hypviz_cli
from hypviz.reports import input_files, publishing
from hypviz.reports import inputs as report_inputs
from hypviz.reports import point_report as report

ROOT = Path(__file__).resolve().parent.parent
H, N, M, D = 2, 24, 20, 4
UNSET = ("HYPVIZ_DEBUG", publishing.PAUSE_ENV, input_files.MAX_INPUT_ENV)  # test hooks and switches: off in every run
ENV = {k: v for k, v in os.environ.items() if k not in UNSET}
ENV.update(MPLBACKEND="Agg", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")


@dataclass
class Run:
    """What a run of the command gave: like :class:`subprocess.CompletedProcess`."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Run:
    """``hypviz ARGS`` in ``cwd``, in process: ``hypviz.cli.main(ARGS)`` with stdout and stderr captured
    (what Python writes to ``sys.stdout``/``sys.stderr`` and what anything writes to file descriptors 1
    and 2), ``HYPVIZ_DEBUG`` and the test hooks unset (``env`` sets more), the stored k forgotten."""
    argv = [os.fspath(a) if isinstance(a, Path) else str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        for name in UNSET:
            mp.delenv(name, raising=False)
        mp.setenv("MPLBACKEND", "Agg")
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        mp.chdir(cwd)
        fd_out = stack.enter_context(tempfile.TemporaryFile(mode="w+b"))
        fd_err = stack.enter_context(tempfile.TemporaryFile(mode="w+b"))
        _flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(fd_out.fileno(), 1)
        os.dup2(fd_err.fileno(), 2)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                input_files.STORED_K.clear()
                try:
                    code = hypviz_cli.main(argv)
                finally:
                    input_files.STORED_K.clear()
        finally:
            _flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        fd_out.seek(0)
        fd_err.seek(0)
        stdout = out.getvalue() + fd_out.read().decode("utf-8", "replace")
        stderr = err.getvalue() + fd_err.read().decode("utf-8", "replace")
    return Run(argv, code, stdout, stderr)


def spawn(*args: str | Path, cwd: Path, env: dict | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -m hypviz.cli ARGS`` (or ``python -c CODE ARGS``) in ``cwd``, a fresh interpreter."""
    head = [sys.executable, "-c", code] if code else [sys.executable, "-m", "hypviz.cli"]
    return subprocess.run(
        [*head, *map(str, args)], cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=180
    )


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if re.match(r"^\..*\.(tmp|old)-", p.name))


# --------------------------------------------------------------------------- #
# input files
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    q = data.lifted_gaussian((H, N), D, 1.5, seed=1, dtype=torch.float32)
    k = data.lifted_gaussian((H, M), D, 1.5, seed=2, dtype=torch.float32)
    np.save(d / "q.npy", q.numpy())
    np.save(d / "k.npy", k.numpy())
    np.savez(d / "qk.npz", queries=q.numpy(), keys=k.numpy())
    np.savez(d / "multi.npz", first=q.numpy(), second=k.numpy(), third=k.numpy()[:, :3])
    np.save(d / "q2d.npy", q[0].numpy())
    # heads in the middle, (N, H, d + 1), saved with torch as a dict of tensors
    torch.save({"Q": q.transpose(0, 1).contiguous(), "K": k.transpose(0, 1).contiguous()}, d / "nhd.pt")
    torch.save(q, d / "q.pt")
    # spatial parts for k = 2
    np.savez(d / "spatial.npz", queries=q[..., 1:].numpy(), keys=k[..., 1:].numpy())

    # bad input
    bad = q.numpy().copy()
    bad[1, 3, 2] = np.nan
    np.save(d / "nan.npy", bad)
    bad = q.numpy().copy()
    bad[0, 5, 1] = np.inf
    np.save(d / "inf.npy", bad)
    np.save(d / "rank1.npy", q.numpy()[0, 0])
    np.save(d / "wide.npy", data.lifted_gaussian((H, M), D + 2, 1.0, seed=3, dtype=torch.float32).numpy())
    np.save(d / "spatial_only.npy", q[..., 1:].numpy())  # (H, N, d): not points; off the hyperboloid
    np.save(d / "empty.npy", np.zeros((0, D + 1), dtype=np.float32))
    np.save(d / "huge.npy", lorentz.lift(torch.full((N, D), 1e19, dtype=torch.float64)).float().numpy())
    np.save(d / "ints.npy", np.ones((N, D + 1), dtype=np.int64))
    np.save(d / "three_heads.npy", data.lifted_gaussian((3, M), D, 1.0, seed=4, dtype=torch.float32).numpy())
    bad = q[..., 1:].numpy().copy()
    bad[1, 3, 2] = np.nan
    np.save(d / "spatial_nan.npy", bad)
    np.save(d / "no_space.npy", np.ones((N, 1), dtype=np.float32))  # (N, d + 1) with d = 0
    np.save(d / "ball.npy", np.full((N, D), 0.9, dtype=np.float32))  # |p| = 1.8: outside the ball of k = 1
    (d / "q.txt").write_text("1 2 3\n")
    (d / "garbage.pt").write_bytes(b"this is not a torch file")
    return d


# --------------------------------------------------------------------------- #
# bad input: exit code 2, one line naming the problem, no output
# --------------------------------------------------------------------------- #
#: An unknown kind that stays unknown: the registry refuses the name (not a word), so no kind can ever take it.
NOT_A_KIND = "not-a-kind"


def test_the_unknown_kind_here_can_never_be_registered():
    from hypviz.base import kinds

    with pytest.raises(ValueError, match=r"^Kind name must be a word .*, got 'not-a-kind'$"):
        kinds.Kind(**{**vars(kinds.get("distance")), "name": NOT_A_KIND})


ERRORS = {
    # name: (arguments, words the one-line message must contain)
    "missing file": (["compare", "nope.npy", "k.npy"], ["QUERIES", "no such file", "nope.npy"]),
    "unknown format": (["compare", "q.txt", "k.npy"], ["unknown format", ".txt"]),
    "folder as input": (["compare", ".", "k.npy"], ["is a folder"]),
    "garbage .pt": (["compare", "garbage.pt", "k.npy"], ["cannot read", "garbage.pt", "torch.load"]),
    # NaN and Inf in points: found by lorentz.check_points, which names the row and shows its values
    "NaN": (["compare", "nan.npy", "k.npy"], ["QUERIES (float32)", "row (1, 3)", "NaN", "expected finite coordinates"]),
    "Inf": (["compare", "q.npy", "inf.npy"], ["KEYS (float32)", "row (0, 5)", "Inf", "expected finite coordinates"]),
    # in spatial parts (which check_points does not see): found before they are lifted, naming the index
    "NaN in spatial parts": (["compare", "spatial_nan.npy", "spatial_nan.npy", "--spatial"],
                             ["QUERIES", "NaN", "index (1, 3, 2)", "expected finite coordinates"]),
    "no spatial coordinate": (["compare", "no_space.npy", "no_space.npy"], ["QUERIES", "d >= 1", "--spatial"]),
    "outside the Poincare ball": (["compare", "ball.npy", "ball.npy", "--model", "poincare"],
                                  ["QUERIES (Poincare-ball points)", "inside the ball", "|p| = 1.8"]),
    "wrong rank": (["compare", "rank1.npy", "k.npy"], ["QUERIES", "rank 1", "(..., N, d + 1)"]),
    "mismatched dims": (["compare", "q.npy", "wide.npy"], ["different feature dimensions", "d = 4", "d = 6"]),
    "off the hyperboloid": (["compare", "spatial_only.npy", "spatial_only.npy"], ["off the hyperboloid", "--spatial"]),
    "k = 0": (["compare", "q.npy", "k.npy", "--k", "0"], ["--k", "positive"]),
    "k < 0": (["compare", "q.npy", "k.npy", "--k=-1"], ["--k", "positive"]),
    "k = nan": (["compare", "q.npy", "k.npy", "--k", "nan"], ["--k", "positive"]),
    "temperature <= 0": (["compare", "q.npy", "k.npy", "--temperature", "0"], ["--temperature", "positive"]),
    "empty": (["compare", "empty.npy", "k.npy"], ["QUERIES", "empty"]),
    "float32 overflow": (["compare", "huge.npy", "k.npy"], ["QUERIES", "overflow", "float32", "float64"]),
    "integers": (["compare", "ints.npy", "k.npy"], ["integers"]),
    "ambiguous npz": (["compare", "multi.npz", "k.npy"], ["3 arrays", "--queries-key"]),
    "unknown npz key": (["compare", "qk.npz", "qk.npz", "--keys-key", "nope"], ["no array named 'nope'", "queries, keys"]),
    "heads do not broadcast": (["compare", "q.npy", "three_heads.npy"], ["do not broadcast", "--heads-axis"]),
    "heads axis out of range": (["compare", "q.npy", "k.npy", "--heads-axis", "2"], ["--heads-axis 2", "out of range"]),
    "heads axis on rank 2": (["compare", "q2d.npy", "q2d.npy", "--heads-axis", "0"], ["--heads-axis 0", "no axis besides"]),
    "unknown kind": (["compare", "q.npy", "k.npy", "--kinds", f"spatial,{NOT_A_KIND}"], ["--kinds", NOT_A_KIND]),
    "nothing to compare": (["compare", "q.npy", "k.npy", "--kinds", "distance"], ["nothing to compare"]),
    "bad device": (["compare", "q.npy", "k.npy", "--device", "tpu"], ["--device", "tpu"]),
    "unknown option": (["compare", "q.npy", "k.npy", "--colour", "red"], ["unrecognized arguments", "--colour"]),
    "missing KEYS": (["compare", "q.npy"], ["KEYS is missing", "capture"]),
    "no command": ([], ["required"]),
    "parent folder missing": (["compare", "q.npy", "k.npy", "--out", "no/such/place"], ["parent folder", "does not exist"]),
}
if not torch.cuda.is_available():
    ERRORS["cuda without CUDA"] = (["compare", "q.npy", "k.npy", "--device", "cuda"], ["CUDA is not available"])


def _error_work(case: str, files: Path, folder: Path) -> tuple[Path, list[str]]:
    """A working folder holding (links to) the input files, and the arguments of ``case`` run there."""
    args = ERRORS[case][0]
    folder.mkdir(parents=True, exist_ok=True)
    for f in files.iterdir():
        (folder / f.name).symlink_to(f)
    extra = [] if any(a.startswith("--out") for a in args) or not args else ["--out", "report"]
    return folder, [*args, *extra]


@pytest.fixture(scope="module")
def error_runs(files, tmp_path_factory) -> dict[str, tuple[Path, Run]]:
    results = {}
    for name in ERRORS:
        work, args = _error_work(name, files, tmp_path_factory.mktemp("err"))
        results[name] = (work, cli(*args, cwd=work))
    return results


def _check_refused(case: str, work: Path, proc: Run | subprocess.CompletedProcess, files: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    assert lines[0].startswith("hypviz"), lines[0]
    assert "Traceback" not in proc.stderr
    for word in ERRORS[case][1]:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert proc.stdout == ""
    names = {p.name for p in work.iterdir()}
    assert names == {f.name for f in files.iterdir()}, f"something was written: {names - {f.name for f in files.iterdir()}}"


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, error_runs, files):
    work, proc = error_runs[case]
    _check_refused(case, work, proc, files)


# a fresh interpreter (``python -m hypviz.cli``, run by runpy as -m does) that reports, once it has exited,
# which heavy modules were imported: cheap checks must refuse bad input before torch, matplotlib, plotly
FRESH = (
    "import atexit, runpy, sys\n"
    "marker = sys.argv.pop(1)\n"
    "def note():\n"
    "    with open(marker, 'w') as f:\n"
    "        f.write(' '.join(m for m in ('torch', 'matplotlib', 'plotly') if m in sys.modules))\n"
    "atexit.register(note)\n"
    "sys.argv[0] = 'hypviz'\n"
    "runpy.run_module('hypviz.cli', run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.parametrize("case", ["missing file", "k = 0"])
def test_bad_input_is_refused_in_a_fresh_interpreter_before_torch_is_imported(case, files, tmp_path):
    work, args = _error_work(case, files, tmp_path / "work")
    marker = tmp_path / "imported.txt"
    proc = spawn(marker, *args, cwd=work, code=FRESH)
    _check_refused(case, work, proc, files)
    assert marker.read_text() == "", f"imported before refusing: {marker.read_text()}"


def test_help_imports_nothing_heavy(tmp_path):
    marker = tmp_path / "imported.txt"
    proc = spawn(marker, "compare", "--help", cwd=tmp_path, code=FRESH)
    assert proc.returncode == 0 and "--out" in proc.stdout, proc.stderr
    assert marker.read_text() == "", f"imported for --help: {marker.read_text()}"


def test_existing_output_folder_is_kept_without_force(files, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    proc = cli("compare", files / "q.npy", files / "k.npy", "--out", out, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "already exists" in proc.stderr and "--force" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "keep me"
    # --force does not replace a folder that is not a hypviz report
    proc = cli("compare", files / "q.npy", files / "k.npy", "--out", out, "--force", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a hypviz report" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- #
# successful runs (each once, shared by the tests below)
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def runs(files, tmp_path_factory) -> dict[str, tuple[Path, Run]]:
    work = tmp_path_factory.mktemp("ok")
    jobs = {
        "npy": ["compare", files / "q.npy", files / "k.npy", "--out", work / "npy", "--device", "cpu"],
        "spatial": ["compare", files / "spatial.npz", files / "spatial.npz", "--spatial", "--k", "2", "--out",
                    work / "spatial", "--kinds", "spatial,distance,lorentz", "--reference", "lorentz",
                    "--temperature", "0.5"],
        "pt-heads": ["compare", files / "nhd.pt", files / "nhd.pt", "--heads-axis", "1", "--out", work / "pt-heads"],
        "pt-mixed": ["compare", files / "q.pt", files / "multi.npz", "--keys-key", "second", "--dtype", "float64",
                     "--out", work / "pt-mixed", "--sample-rows", "5", "--kinds", "spatial", "--no-progress"],
        "demo": ["demo", "--out", work / "demo"],
    }
    return {name: (work / name, cli(*args, cwd=work)) for name, args in jobs.items()}


def _ok(runs, name):
    out, proc = runs[name]
    assert proc.returncode == 0, proc.stderr
    return out, proc, json.loads((out / "metrics.json").read_text())


def _expected(files, kind="spatial", ref="distance", **kw):
    q, k = torch.from_numpy(np.load(files / "q.npy")), torch.from_numpy(np.load(files / "k.npy"))
    return attention.compare(q, k, kind, ref, device="cpu", **kw)


def test_compare_npy_writes_the_whole_report(runs, files):
    out, proc, meta = _ok(runs, "npy")
    assert sorted(p.name for p in out.iterdir()) == [
        "difference.png", "heatmaps.png", "metrics.json", "report.html", "rows.npz", "rows.png"
    ]
    assert leftovers(out.parent) == []
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert meta["generator"] == "hypviz" and meta["command"] == "compare"
    setup = meta["setup"]
    assert (setup["n_queries"], setup["n_keys"], setup["dim"], setup["heads_shape"]) == (N, M, D, [H])
    assert setup["k"] == 1.0 and setup["temperature"] == pytest.approx(D**0.5) and setup["device"] == "cpu"
    assert meta["inputs"]["queries"]["shape"] == [H, N, D + 1] and meta["inputs"]["spatial"] is False
    assert [(c["a"], c["b"]) for c in meta["comparisons"]] == [("spatial", "distance"), ("focused", "distance")]

    # the numbers are attention.compare's, with the verdict and the uniform baselines
    expected = _expected(files)
    spatial = meta["comparisons"][0]
    assert spatial["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-6)
    assert spatial["summary"]["max_kl"] == pytest.approx(expected.max_kl, rel=1e-6)
    assert [h["head"] for h in spatial["heads"]] == ["0", "1"]
    for h, head in enumerate(spatial["heads"]):
        assert head["mean_tv"] == pytest.approx(float(expected.tv[h].double().mean()), rel=1e-6)
        assert head["bound_met_fraction"] == 1.0
        # each head's verdict is the rule applied to that head's rows (not to its means)
        assert (head["verdict"], head["row_verdicts"]) == expected.head_verdicts()[h]
    assert spatial["summary"]["verdict"] == expected.verdict
    assert spatial["summary"]["mean_tv_uniform_b"] == pytest.approx(expected.mean_tv_uniform_b, rel=1e-6)
    focused = meta["comparisons"][1]
    exp_f = _expected(files, "focused")
    assert focused["summary"]["mean_tv"] == pytest.approx(exp_f.mean_tv, rel=1e-6)
    assert focused["summary"]["bound_applies"] is False and focused["heads"][0]["bound_met_fraction"] is None
    assert set(meta["verdict_rule"]) == set(attention.VERDICTS)
    rows = np.load(out / "rows.npz")
    assert rows["spatial_vs_distance_tv"].shape == (H, N)
    np.testing.assert_allclose(rows["spatial_vs_distance_tv"], expected.tv.numpy(), rtol=1e-6)
    assert rows["spatial_vs_distance_bound_met"].all()
    assert "focused_vs_distance_tv_uniform_a" in rows and "focused_vs_distance_delta" not in rows

    # self-contained page: PNGs inline, plotly.js once, nothing from the network
    page = (out / "report.html").read_text()
    assert page.count("<img src=\"data:image/png;base64,") == 3
    assert page.count("Plotly.newPlot") == 1 and page.count("<script") == 2
    assert not re.search(r"<(script|link|img)[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert "spatial vs distance" in page and "q.npy vs k.npy" in page

    # one screen of summary
    lines = proc.stdout.strip().splitlines()
    assert 5 <= len(lines) <= 24
    assert "spatial vs distance" in proc.stdout and f"theory check {H * N}/{H * N}" in proc.stdout
    assert "focused vs distance" in proc.stdout and "theory check n/a" in proc.stdout
    assert expected.verdict in proc.stdout
    assert str(out / "report.html") in proc.stdout
    assert proc.stderr == ""


def test_spatial_parts_are_lifted_with_k(runs, files):
    out, proc, meta = _ok(runs, "spatial")
    assert meta["inputs"]["spatial"] is True and meta["setup"]["k"] == 2.0
    assert meta["setup"]["temperature"] == 0.5 and meta["setup"]["reference"] == "lorentz"
    assert [(c["a"], c["b"]) for c in meta["comparisons"]] == [("spatial", "lorentz"), ("distance", "lorentz")]
    s = np.load(files / "spatial.npz")
    q, k = lorentz.lift(s["queries"], k=2.0), lorentz.lift(s["keys"], k=2.0)
    expected = attention.compare(q, k, "spatial", "lorentz", k=2.0, temperature=0.5, device="cpu")
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-5)
    assert "(spatial parts, lifted)" in proc.stdout


def test_pt_dict_with_heads_axis_matches_the_head_first_layout(runs, files):
    _, _, meta = _ok(runs, "pt-heads")
    _, _, ref = _ok(runs, "npy")
    assert meta["inputs"]["queries"]["shape"] == [N, H, D + 1] and meta["inputs"]["heads_axis"] == 1
    assert meta["inputs"]["queries"]["array"] == "Q" and meta["inputs"]["keys"]["array"] == "K"
    assert meta["setup"]["heads_shape"] == [H]
    for mine, theirs in zip(meta["comparisons"][0]["heads"], ref["comparisons"][0]["heads"]):
        assert mine["mean_tv"] == pytest.approx(theirs["mean_tv"], rel=1e-6)
        assert mine["max_kl"] == pytest.approx(theirs["max_kl"], rel=1e-6)


def test_pt_tensor_with_npz_key_dtype_and_kinds(runs, files):
    _, proc, meta = _ok(runs, "pt-mixed")
    assert meta["inputs"]["keys"]["array"] == "second" and meta["setup"]["dtype"] == "float64"
    assert [(c["a"], c["b"]) for c in meta["comparisons"]] == [("spatial", "distance")]
    assert len(meta["setup"]["shown_rows"]) == 5 and "lorentz" not in proc.stdout
    # checked in float32, then the time coordinate recomputed in float64
    q64 = lorentz.lift(torch.from_numpy(np.load(files / "q.npy"))[..., 1:].double())
    k64 = lorentz.lift(torch.from_numpy(np.load(files / "k.npy"))[..., 1:].double())
    expected = attention.compare(q64, k64, "spatial", "distance", device="cpu")
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-9)


def test_demo_writes_a_report_and_its_inputs(runs):
    out, proc, meta = _ok(runs, "demo")
    assert meta["command"] == "demo" and meta["setup"]["heads_shape"] == [4]
    assert {"report.html", "metrics.json", "rows.npz", "inputs.npz", "heatmaps.png"} <= {p.name for p in out.iterdir()}
    heads = meta["comparisons"][0]["heads"]
    tv = [h["mean_tv"] for h in heads]
    assert tv == sorted(tv) and tv[0] < 1e-3 < 0.1 < tv[-1]  # the approximation degrades with the norm
    assert all(h["bound_met_fraction"] == 1.0 for h in heads)
    assert "hypviz compare" in proc.stdout and "inputs.npz" in proc.stdout
    with np.load(out / "inputs.npz") as z:
        assert z["queries"].shape == (4, 256, 33) and z["keys"].shape == (4, 256, 33)


def test_force_replaces_a_report_and_demo_inputs_reload(runs, tmp_path):
    out, _, _ = _ok(runs, "demo")
    target = tmp_path / "again"
    shutil.copytree(out, target)
    (target / "stale.txt").write_text("from an older report")
    # one .npz holding both (picked by name), into an existing report with --force
    proc = cli(
        "compare", out / "inputs.npz", out / "inputs.npz", "--out", target, "--force", "--kinds", "lorentz", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((target / "metrics.json").read_text())
    assert meta["command"] == "compare" and [c["a"] for c in meta["comparisons"]] == ["lorentz"]
    assert meta["inputs"]["queries"]["array"] == "queries" and meta["inputs"]["keys"]["array"] == "keys"
    assert not (target / "stale.txt").exists() and not (target / "inputs.npz").exists()
    assert leftovers(tmp_path) == []
    # --force refuses to replace the folder its input lives in
    proc = cli("compare", target / "rows.npz", target / "rows.npz", "--out", target, "--force", cwd=tmp_path)
    assert proc.returncode == 2 and "holds the input" in proc.stderr and (target / "rows.npz").exists()


def test_internal_errors_are_one_line_exit_1_and_write_nothing(files, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("injected failure")

    args = ("compare", files / "q.npy", files / "k.npy", "--out", tmp_path / "out")
    from hypviz.reports import figures as report_figures

    with monkeypatch.context() as mp:
        mp.setattr(report_figures, "figures", boom)  # the figures the report's files are drawn from
        proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "internal error" in proc.stderr and "injected failure" in proc.stderr
    assert "HYPVIZ_DEBUG" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_hypviz_debug_lets_the_traceback_out_of_the_process(files, tmp_path):
    # a subprocess: what is tested is the interpreter printing the traceback and exiting with 1
    inject = (
        "import sys, hypviz.reports.figures as r\n"
        "def boom(*a, **k):\n    raise RuntimeError('injected failure')\n"
        "r.figures = boom\n"
        "import hypviz.cli as c\n"
        "sys.argv[0] = 'hypviz'\n"
        "sys.exit(c.main(sys.argv[1:]))\n"
    )
    args = ("compare", files / "q.npy", files / "k.npy", "--out", tmp_path / "out")
    proc = spawn(*args, cwd=tmp_path, code=inject, env={**ENV, "HYPVIZ_DEBUG": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "injected failure" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_console_script_help_and_version(tmp_path):
    exe = Path(sys.executable).with_name("hypviz")
    if not exe.exists():
        pytest.skip(f"the console script is not installed next to {sys.executable} (pip install -e . creates it)")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("hypviz ")
    helps = {}
    for sub in ("compare", "demo"):
        proc = helps[sub] = subprocess.run([exe, sub, "--help"], capture_output=True, text=True, env=ENV, timeout=60)
        assert proc.returncode == 0 and "--out" in proc.stdout and "--force" in proc.stdout
    proc = helps["compare"]  # the same command's output, not run twice
    for option in ("--spatial", "--k", "--heads-axis", "--kinds", "--temperature", "--device", "--queries-key"):
        assert option in proc.stdout


# --------------------------------------------------------------------------- #
# the command split by job: names where they were, typed results, pages from templates, figures from plots
# --------------------------------------------------------------------------- #
def test_each_name_has_one_home_and_no_old_path_remains():
    import hypviz.cli.command as command
    from hypviz.reports import html as report_html
    from hypviz.reports import model_report

    # the command's package exports the command and nothing re-exported for an older layout
    assert hypviz_cli.__all__ == ["main", "build_parser"] and command.__all__ == ["main", "build_parser"]
    public = {n for n in vars(hypviz_cli) if not n.startswith("_")}
    assert public == {"main", "build_parser", "command"}, public
    for old in ("Inputs", "Settings", "prepare", "read_input", "STORED_K", "publish", "check_out", "STAGES", "KINDS"):
        assert not hasattr(hypviz_cli, old), old
    for old in ("STORED_K", "publish", "STAGES", "PAUSE_ENV", "MAX_INPUT_ENV", "DEFAULT_MAX_INPUT_BYTES", "HALF", "KINDS"):
        assert not hasattr(command, old), old  # names the command does not use: they live in their own homes only
    assert not hasattr(command, "_REEXPORTED") and not hasattr(command, "_on_signal")
    # the reports: the pages live in html only, the files are written by writing only
    for module, old in ((report, "page"), (report, "_ROW_FIELDS"), (report, "write"), (model_report, "page"),
                        (model_report, "write"), (model_report, "figure")):
        assert not hasattr(module, old), f"{module.__name__}.{old}"
    assert report_html.page.__module__ == report_html.model_page.__module__ == "hypviz.reports.html"
    hints = typing.get_type_hints(report.Result)  # real types, importable by the report (no import of the CLI)
    assert hints["inputs"] is report_inputs.Inputs and hints["settings"] is report_inputs.Settings


def test_the_cli_kinds_come_from_the_registry():
    from hypviz.base import kinds

    parser = hypviz_cli.build_parser()
    compare = next(a for a in parser._subparsers._group_actions[0].choices["compare"]._actions if a.dest == "reference")
    assert tuple(compare.choices) == kinds.comparable()
    text = parser._subparsers._group_actions[0].choices["compare"].format_help()
    for name in kinds.comparable():
        assert kinds.get(name).description.split()[0] in text, name
    for name in set(kinds.names()) - set(kinds.comparable()):  # a kind compare does not take is not offered
        assert name not in compare.choices
    # a kind registered at run time is offered by the next parser, with its one line, and nowhere hand-copied
    kinds.register(kinds.Kind(name="cli_probe", family="features", kernel="focused", formula="x", title="x", plain="x",
                              html="x", description="a probe kind of the CLI test (100% made up)", rounding="x",
                              options=("power", "norm_scale")))
    try:
        sub = hypviz_cli.build_parser()._subparsers._group_actions[0].choices["compare"]
        assert "cli_probe" in next(a for a in sub._actions if a.dest == "reference").choices
        assert "a probe kind of the CLI test (100% made up)" in " ".join(sub.format_help().split())
        assert next(a for a in sub._actions if a.dest == "kinds").type("cli_probe, spatial") == ["cli_probe", "spatial"]
    finally:
        kinds.unregister("cli_probe")
    assert "cli_probe" not in next(a for a in hypviz_cli.build_parser()._subparsers._group_actions[0].choices["compare"]
                                   ._actions if a.dest == "reference").choices


def test_the_pages_come_from_templates_installed_with_the_package():
    import importlib.resources
    import string

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    from hypviz.reports import html as report_html

    for name in ("report.html", "model_report.html"):
        assert importlib.resources.files("hypviz.reports").joinpath("templates", name).is_file()
        assert isinstance(report_html.template(name), string.Template)
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "templates/*.html" in setup["package-data"]["hypviz.reports"]
    packages = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "hypviz").rglob("__init__.py")}
    assert set(setup["packages"]) == packages, "pyproject.toml [tool.setuptools] packages must list every package"


def test_the_rows_figure_draws_the_bound_with_plots(files, monkeypatch):
    import hypviz.plots.curves as curves
    from hypviz.reports import figures as report_figures

    q, k = np.load(files / "q.npy"), np.load(files / "k.npy")
    inputs = report_inputs.prepare(q, k, k=1.0, spatial=False, heads_axis=None, dtype="auto", described={})
    settings = report_inputs.Settings(kinds=["distance", "lorentz", "focused"], reference="spatial", temperature=None,
                                   device="cpu", sample_rows=4, progress=False, command="compare")
    result = report.analyse(inputs, settings)
    calls, original = [], curves.bound_scatter_mpl

    def counted(*args, **kwargs):
        calls.append(kwargs["ax"])
        return original(*args, **kwargs)

    monkeypatch.setattr(curves, "bound_scatter_mpl", counted)
    fig = report_figures.rows_figure(result)
    _, right = fig.axes
    assert calls == [right, right]  # one call per softmax comparison (focused has no bound)
    labels = [t.get_text() for t in right.get_legend().get_texts()]
    assert labels == [f"distance vs spatial: {H * N} rows", f"lorentz vs spatial: {H * N} rows", "bound ($y = x$)"]
    assert right.get_xscale() == right.get_yscale() == "log" and "tanh" in right.get_xlabel()
