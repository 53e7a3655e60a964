"""Fuzz tests (hypothesis) of the contract on hostile input: accepted and usable, or refused in one line.

* The kind registry: random :class:`~hypviz.base.kinds.Kind` specs are refused at construction in one line, or,
  registered, give finite maps (and comparisons) or a one-line ``ValueError``/``TypeError`` when used.
* The input-file reader and the command: random small nested objects saved with ``torch.save`` or arrays with
  ``np.savez`` give exit 0 with finite numbers in ``metrics.json``, or exit 2 with one line.
* The capture-file reader: a capture file with random fields replaced gives exit 0 with finite numbers, or exit 2
  with one line.

Each runs a fixed number of examples (``database=None``: no state between runs, the same examples in every run
of a given hypothesis version and seed), without a deadline.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypviz import attention, cli, data
from hypviz.attention.maps import kernels
from hypviz.base import kinds
from hypviz.capture import records
from hypviz.reports import input_files

FUZZ: dict[str, Any] = dict(deadline=None, database=None, derandomize=True,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                   HealthCheck.function_scoped_fixture])
POINTS = data.lifted_gaussian((7,), 3, 1.0, seed=3)
KEYS = data.lifted_gaussian((5,), 3, 1.0, seed=4)


def _one_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and len(text) < 2500, text
    assert "Traceback" not in text


# --------------------------------------------------------------------------- #
# the registry
# --------------------------------------------------------------------------- #
HOSTILE = st.one_of(st.none(), st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.text(max_size=8), st.just("a\nb"), st.just(("power",)), st.just(["power"]),
                    st.just(("zzz",)), st.just(1j), st.just(10**400))
FIELDS_OF_KIND = ["name", "family", "kernel", "formula", "title", "plain", "html", "description", "rounding", "bias",
                  "constant", "options", "temperature", "comparable"]


@st.composite
def kind_specs(draw) -> dict:
    """A built-in kind's entry renamed, its family, bias, constant, options and flags redrawn, then up to two
    fields replaced by hostile values."""
    import dataclasses

    spec = dataclasses.asdict(kinds.get(draw(st.sampled_from(kinds.BUILT_IN))))
    spec["name"] = draw(st.from_regex(r"\Afuzz_[a-z0-9_]{1,8}\Z"))
    spec["family"] = draw(st.sampled_from([spec["family"], *kinds.FAMILIES]))
    if spec["kernel"] == "bilinear":
        spec["bias"] = draw(st.floats(-1e6, 1e6))
        spec["constant"] = draw(st.floats(-1e3, 1e3))
    declared = sorted({name for kernel in kernels.KERNELS.values() for name in kernel.options})  # every kernel's options
    spec["options"] = tuple(draw(st.lists(st.sampled_from(declared), unique=True, max_size=5)))
    spec["temperature"], spec["comparable"] = draw(st.booleans()), draw(st.booleans())
    for field in draw(st.lists(st.sampled_from(FIELDS_OF_KIND), unique=True, max_size=2)):
        spec[field] = draw(HOSTILE)
    return spec


@settings(max_examples=150, **FUZZ)
@given(kind_specs())
def test_a_random_kind_is_refused_in_one_line_or_usable(spec):
    before = kinds.names()
    try:
        kind = kinds.register(kinds.Kind(**spec))
    except ValueError as exc:
        _one_line(exc)
        assert kinds.names() == before
        return
    try:
        try:
            m = attention.attention_map(POINTS, KEYS, kind.name, k=1.0, temperature=2.0)
        except (ValueError, TypeError) as exc:
            _one_line(exc)
        else:
            assert m.shape == (7, 5) and bool(torch.isfinite(m).all())
            if kind.family != "gate":
                torch.testing.assert_close(m.sum(-1), torch.ones(7, dtype=m.dtype))
        if kind.comparable:
            try:
                c = attention.compare(POINTS, KEYS, kind.name, "distance", k=1.0, temperature=2.0, device="cpu")
            except (ValueError, TypeError) as exc:
                _one_line(exc)
            else:
                assert bool(torch.isfinite(c.tv).all())
    finally:
        kinds.unregister(kind.name)
    assert kinds.names() == before


# --------------------------------------------------------------------------- #
# input files and capture files, through the command
# --------------------------------------------------------------------------- #
def _finite_json(path: Path) -> None:
    def refuse(token: str):
        raise AssertionError(f"{path.name} holds {token}")

    json.loads(path.read_text(), parse_constant=refuse)


def _command(*args: object) -> tuple[int, str]:
    import contextlib
    import io

    input_files.STORED_K.clear()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main([os.fspath(a) if isinstance(a, Path) else str(a) for a in args])
    return code, err.getvalue()


def _contract(code: int, err: str, out: Path) -> None:
    assert code in (0, 2), err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0] and len(lines[0]) < 2500, err
        assert not out.exists()
    else:
        _finite_json(out / "metrics.json")


DTYPES = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool,
                          torch.complex64, torch.uint8])


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(DTYPES)
    kind = draw(st.sampled_from(["points", "points", "random", "special", "empty", "scalar"]))
    if kind == "points":
        n = draw(st.integers(1, 6))
        t = data.lifted_gaussian((n,), draw(st.integers(1, 4)), draw(st.sampled_from([0.1, 1.0, 30.0])), seed=n)
    elif kind == "random":
        shape = draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
        t = torch.from_numpy(np.random.default_rng(len(shape)).normal(size=shape))
    elif kind == "special":
        t = torch.tensor([[1.0, 0.0, 0.0], [draw(st.sampled_from([math.nan, math.inf, -1.0, 1e300, 0.0])), 0.0, 0.0]])
    elif kind == "empty":
        t = torch.zeros(0, 3)
    else:
        t = torch.tensor(draw(st.floats(allow_nan=True, allow_infinity=True)))
    try:
        return t.to(dtype)
    except (RuntimeError, OverflowError):
        return t


LEAVES = st.one_of(tensors(), st.none(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                   st.text(max_size=8), st.booleans())
OBJECTS = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.sampled_from(["queries", "keys", "q", "k", "x", "curvature", "0"]), inner, max_size=3)),
    max_leaves=6)


@pytest.fixture(scope="module")
def work():
    folder = Path(tempfile.mkdtemp(prefix="hypviz-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _fresh(work: Path) -> tuple[Path, Path]:
    case = Path(tempfile.mkdtemp(dir=work))
    return case, case / "r"


FAST = ("--kinds", "spatial", "--sample-rows", "3", "--device", "cpu", "--no-progress")


@settings(max_examples=8, **FUZZ)
@given(junk=st.dictionaries(st.sampled_from(["queries", "keys", "q", "x", "k", "curvature", "0"]), OBJECTS, max_size=2),
       whole=st.one_of(st.none(), OBJECTS), n=st.integers(1, 6), scale=st.sampled_from([0.5, 3.0, 40.0]))
def test_a_random_torch_file_gives_a_report_or_one_line(work, junk, whole, n, scale):
    # most files hold usable queries and keys beside random entries (or in place of them); some are wholly random
    case, out = _fresh(work)
    q = data.lifted_gaussian((n,), 3, scale, seed=n).float()
    torch.save(whole if whole is not None else {"queries": q, "keys": KEYS.float(), **junk}, case / "q.pt")
    _contract(*_command("compare", case / "q.pt", case / "q.pt", *FAST, "--out", out), out)


ARRAYS = st.one_of(
    st.builds(lambda n, s: data.lifted_gaussian((n,), 2, s, seed=n).numpy(), st.integers(1, 5), st.sampled_from([0.5, 20.0])),
    st.builds(lambda shape: np.random.default_rng(0).normal(size=shape), st.lists(st.integers(0, 4), max_size=3)),
    st.sampled_from([np.zeros((2, 3), np.int32), np.array(["a", "b"]), np.zeros((2, 3), ">f4"), np.full((2, 3), np.nan),
                     np.zeros((2, 3), np.float16), np.zeros((2, 3), "datetime64[s]"), np.array(3.0)]),
)


@settings(max_examples=8, **FUZZ)
@given(arrays=st.dictionaries(st.sampled_from(["queries", "keys", "q", "x", "k", "curvature"]), ARRAYS, max_size=3),
       usable=st.booleans())
def test_a_random_npz_file_gives_a_report_or_one_line(work, arrays, usable):
    case, out = _fresh(work)
    if usable:
        arrays = {**arrays, "queries": POINTS.numpy(), "keys": KEYS.numpy()}
    np.savez(case / "q.npz", **arrays)
    _contract(*_command("compare", case / "q.npz", case / "q.npz", *FAST, "--out", out), out)


FIELDS = ["name", "call", "queries", "keys", "values", "k", "mode", "kind", "power", "norm_scale", "temperature",
          "verify_error", "verify_tolerance", "verify_note", "scale_sign", "dtype", "training", "aggregation"]


PLAUSIBLE = st.one_of(
    st.sampled_from([None, 0, 1, -1, 2, 0.5, 2.0, 1e-30, 1e30, -3.0, "distance", "focused", "spatial", "full",
                     "linear_focused", "generic", "float16", "verified", "mean", True, False]),
    st.builds(lambda n, s: data.lifted_gaussian((1, n), 3, s, seed=n), st.integers(1, 6), st.sampled_from([0.5, 50.0])),
)


@settings(max_examples=14, **FUZZ)
@given(changes=st.dictionaries(st.sampled_from(FIELDS), st.one_of(PLAUSIBLE, PLAUSIBLE, LEAVES, OBJECTS), max_size=3),
       dropped=st.lists(st.sampled_from(FIELDS), max_size=1),
       top=st.sampled_from([None, None, None, None, "version", "format", "layers"]))
def test_a_capture_file_with_random_fields_gives_a_report_or_one_line(work, changes, dropped, top):
    case, out = _fresh(work)
    q = data.lifted_gaussian((1, 5), 3, 1.0, seed=1)
    rec = records.LayerRecord(name="l0", queries=q, keys=q, values=None, k=1.0, mode="full", kind="distance",
                              temperature=1.0)
    records.save([rec], case / "cap.pt")
    d = torch.load(case / "cap.pt", weights_only=True)
    layer = {key: v for key, v in d["layers"][0].items() if key not in dropped}
    layer.update(changes)
    d["layers"] = [layer]
    if top is not None:
        d[top] = next(iter(changes.values()), None)
    torch.save(d, case / "cap.pt")
    _contract(*_command("compare", case / "cap.pt", "--device", "cpu", "--no-progress", "--out", out), out)
