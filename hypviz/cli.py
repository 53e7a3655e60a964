"""The ``hypviz`` command: compare the attention maps of your own queries and keys.

::

    hypviz compare CAPTURE.pt [--out DIR]            (a file written by hypviz.capture: the whole model)
    hypviz compare QUERIES KEYS [--spatial] [--k K] [--heads-axis AXIS] [--kinds spatial,focused]
                   [--reference distance] [--temperature TAU] [--power P] [--norm-scale S]
                   [--device auto|cpu|cuda]
                   [--dtype auto|float32|float64] [--queries-key NAME] [--keys-key NAME]
                   [--sample-rows 64] [--out DIR] [--force] [--[no-]progress]
    hypviz demo [--out DIR] [--force] [--device ...]

Inputs are ``.pt``/``.pth`` (``torch.load(weights_only=True)``: a tensor, or a dict of tensors),
``.npy`` or ``.npz`` files holding arrays of shape ``(..., N, d + 1)``: full hyperboloid points,
time coordinate first, on ``<x, x>_L = -k`` (checked); with ``--spatial`` they are spatial parts
``(..., N, d)``, lifted with ``x_t = sqrt(|x_s|^2 + k)``.  A file holding several arrays (an
``.npz`` or a dict saved with ``torch.save``) is read by name: ``--queries-key`` / ``--keys-key``,
else its only array, else the array named ``queries`` (``query``, ``q``) or ``keys`` (``key``,
``k``), so one file can hold both: ``hypviz compare qk.npz qk.npz``.  Leading axes are
heads/batch (they broadcast between queries and keys); ``--heads-axis`` names the heads axis
of a layout such as ``(N, H, d + 1)``.

Every kind of ``--kinds`` is compared with the ``--reference`` kind by
:func:`hypviz.attention.compare`, each map read against its distance from the uniform row, with a
verdict ("close", "different", "uninformative") per comparison and per head.  Kinds: ``spatial``
(the question-and-answer thread's softmax of ``q_s . kappa_s``), ``distance`` (Hypformer's full
attention at ``--temperature k*scale/2``), ``lorentz``, ``focused`` (Hypformer's linear map, with
``--power`` and ``--norm-scale``).  The output folder gets ``report.html`` (self-contained, opens
from disk with no network), ``metrics.json``, ``rows.npz`` (per-row statistics) and PNG figures;
it is written to a temporary folder beside it and renamed into place, so it is never
half-written, and an existing folder is replaced only with ``--force``.

Exit codes: 0 success; 2 bad input or usage (one line on stderr naming the problem, nothing
written); 1 unexpected internal error (one line; ``HYPVIZ_DEBUG=1`` shows the traceback).
Heavy imports (torch, matplotlib, plotly) happen after the cheap checks.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main", "UsageError"]

KINDS = ("spatial", "distance", "lorentz", "focused")  # hypviz.attention.KINDS, repeated to keep `--help` free of torch
FORMATS = (".pt", ".pth", ".npy", ".npz")
ROLE_NAMES = {"QUERIES": ("queries", "query", "q", "Q"), "KEYS": ("keys", "key", "k", "K")}
MARKER = "metrics.json"  # a folder holding this file, written by hypviz, may be replaced with --force
DEMO_NORMS = (0.1, 1.0, 3.0, 10.0)  # mean spatial norm of each demo head: from near-uniform maps to sharp ones


class UsageError(Exception):
    """Bad input or usage: reported as one line on stderr with exit code 2."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- #
# argument parsing
# --------------------------------------------------------------------------- #
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see '{self.prog} --help')\n")


def _positive(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            hint = " (<x,x>_L = -k, curvature -1/k)" if name == "--k" else ""
            raise argparse.ArgumentTypeError(f"{name} must be a positive finite number{hint}, got {text!r}")
        return value

    return parse


def _finite_number(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {text!r}")
        return value

    return parse


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _kinds(text: str) -> list[str]:
    kinds = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in kinds if t not in KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(KINDS)}, got {text!r}"
        )
    return list(dict.fromkeys(kinds))


def _common(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument("--out", type=Path, default=Path(default_out), help=f"output folder (default: {default_out})")
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists (a hypviz report)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda or cuda:INDEX")
    p.add_argument(
        "--sample-rows", type=_count, default=64, metavar="N", help="query rows drawn in the heatmaps (default 64)"
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only for long runs on a terminal)",
    )


def build_parser() -> argparse.ArgumentParser:
    from hypviz import __version__

    parser = _Parser(
        prog="hypviz",
        description="Compare hyperbolic attention maps (spatial dot products vs Lorentzian distance) and write a report.",
    )
    parser.add_argument("--version", action="version", version=f"hypviz {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{compare,demo}")

    c = sub.add_parser(
        "compare",
        help="compare the attention maps of your own queries and keys",
        description=(
            "Compare attention maps of your queries and keys: every kind of --kinds against --reference, "
            "row by row (TV, KL, each map's TV from the uniform row, rank agreement, a verdict, and the softmax bound), "
            "and write report.html, metrics.json, rows.npz and PNG figures."
        ),
        epilog=(
            "Files: .pt/.pth (torch.load(weights_only=True); a tensor or a dict of tensors), .npy, .npz. "
            "Shapes (..., N, d + 1), time coordinate first (or (..., N, d) with --spatial); leading axes are "
            "heads/batch. A file with several arrays is read by --queries-key/--keys-key, else its only array, "
            "else the array named queries/keys. Exit codes: 0 ok, 2 bad input, 1 internal error "
            "(HYPVIZ_DEBUG=1 shows the traceback)."
        ),
    )
    c.add_argument("queries", metavar="QUERIES", help="file of queries: .pt, .pth, .npy or .npz")
    c.add_argument(
        "keys",
        metavar="KEYS",
        nargs="?",
        default=None,
        help="file of keys: .pt, .pth, .npy or .npz (may be the same file); omit it when QUERIES is a file written by "
        "hypviz.capture (Capture.save): one report for the whole model",
    )
    c.add_argument(
        "--spatial", action="store_true", help="the inputs are spatial parts (..., N, d), lifted with x_t = sqrt(|x_s|^2 + k)"
    )
    c.add_argument(
        "--k",
        type=_positive("--k"),
        default=None,
        help="curvature parameter k > 0: <x,x>_L = -k (default: the 'k' stored in a .pt/.npz input, else 1)",
    )
    c.add_argument(
        "--model",
        choices=("lorentz", "poincare"),
        default="lorentz",
        help="lorentz: hyperboloid points (default); poincare: Poincare-ball points of curvature parameter k "
        "(..., N, d), mapped to the hyperboloid",
    )
    c.add_argument(
        "--heads-axis", type=int, default=None, metavar="AXIS", help="axis of the inputs holding heads, e.g. 1 for (N, H, d + 1)"
    )
    c.add_argument(
        "--kinds",
        type=_kinds,
        default=["spatial", "focused"],
        help="kinds compared with the reference (default spatial,focused; from spatial, distance, lorentz, focused)",
    )
    c.add_argument("--reference", choices=KINDS, default="distance", help="the reference kind (default distance)")
    c.add_argument(
        "--temperature",
        type=_positive("--temperature"),
        default=None,
        metavar="TAU",
        help="softmax temperature (default sqrt(d)); Hypformer's full attention is distance at k*scale/2",
    )
    c.add_argument(
        "--power", type=_positive("--power"), default=2.0, metavar="P", help="the focused map's power_k (default 2)"
    )
    c.add_argument(
        "--norm-scale", type=_finite_number("--norm-scale"), default=1.0, metavar="S", help="the focused map's norm_scale (default 1)"
    )
    c.add_argument(
        "--dtype",
        choices=("auto", "float32", "float64"),
        default="auto",
        help="compute in this dtype (default: the inputs'); points are checked in their own dtype, then their time "
        "coordinate is recomputed from the spatial parts in the new one",
    )
    c.add_argument("--queries-key", default=None, metavar="NAME", help="array to read from a multi-array QUERIES file")
    c.add_argument("--keys-key", default=None, metavar="NAME", help="array to read from a multi-array KEYS file")
    _common(c, "hypviz-report")
    c.set_defaults(func=cmd_compare)

    d = sub.add_parser(
        "demo",
        help="the same report on built-in data (no files needed)",
        description=(
            "Write the compare report for built-in queries and keys: 4 heads of lifted Gaussian points with mean "
            f"spatial norms {', '.join(f'{r:g}' for r in DEMO_NORMS)} (d = 32, 256 queries and keys, float32), "
            "from nearly uniform maps (where every comparison is uninformative) to sharp ones."
        ),
    )
    _common(d, "hypviz-demo")
    d.set_defaults(func=cmd_demo)
    return parser


# --------------------------------------------------------------------------- #
# the output folder: checked first, written last, atomically
# --------------------------------------------------------------------------- #
def _is_report(path: Path) -> bool:
    marker = path / MARKER
    try:
        return marker.is_file() and '"generator": "hypviz"' in marker.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False


def check_out(out: Path, force: bool, inputs: Sequence[Path] = ()) -> Path:
    """Refuse an output folder that exists (without ``--force``), is not a report, or holds an input."""
    out = Path(os.path.abspath(out))
    if not out.parent.is_dir():
        raise UsageError(f"the parent folder of --out does not exist: {out.parent} (create it first)")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"output folder {out} already exists; pass --force to replace it, or choose another --out")
        if out.is_symlink() or not out.is_dir():
            raise UsageError(f"--out {out} exists and is not a folder; not replacing it")
        if any(out.iterdir()) and not _is_report(out):
            raise UsageError(
                f"--force would replace {out}, which is not a hypviz report (no {MARKER} written by hypviz); "
                "remove it yourself or choose another --out"
            )
        cwd = Path(os.path.abspath(os.getcwd()))
        if cwd == out or out in cwd.parents:
            raise UsageError(f"--force would replace {out}, which holds the current folder; choose another --out")
        for p in inputs:
            p = Path(os.path.abspath(p))
            if out in p.parents:
                raise UsageError(f"--force would replace {out}, which holds the input {p}; copy the input elsewhere first")
    return out


def _temp_dir(out: Path) -> Path:
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"cannot write into {out.parent}: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; a report is an ordinary folder
    return tmp


def publish(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished ``tmp`` folder to ``out``; with ``force`` an existing ``out`` is swapped out first."""
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"output folder {out} already exists; pass --force to replace it, or choose another --out")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
        try:
            os.replace(tmp, out)
        except BaseException:
            os.replace(old / out.name, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


# --------------------------------------------------------------------------- #
# reading the user's files
# --------------------------------------------------------------------------- #
def check_file(path: str, role: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{role}: no such file: {path}")
    if p.is_dir():
        raise UsageError(f"{role}: {path} is a folder; expected a .pt, .pth, .npy or .npz file")
    if p.suffix.lower() not in FORMATS:
        what = f"'{p.suffix}'" if p.suffix else "no extension"
        raise UsageError(f"{role}: unknown format ({what}) for {path}; expected .pt, .pth, .npy or .npz")
    return p


def _pick(entries: dict[str, Any], path: Path, role: str, name: str | None, option: str) -> tuple[Any, str]:
    names = list(entries)
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    if name is not None:
        if name not in entries:
            raise UsageError(f"{role}: {path} has no array named {name!r} (it holds: {shown or 'nothing'})")
        return entries[name], name
    if not names:
        raise UsageError(f"{role}: {path} holds no arrays")
    if len(names) == 1:
        return entries[names[0]], names[0]
    for candidate in ROLE_NAMES[role]:
        if candidate in entries:
            return entries[candidate], candidate
    raise UsageError(f"{role}: {path} holds {len(names)} arrays ({shown}); choose one with {option} NAME")


def load_array(path: Path, role: str, name: str | None, option: str):
    """Read one array from ``path`` as a float32/float64 numpy array; returns ``(array, chosen_name)``.

    ``.npy``/``.npz`` are read with numpy alone (no torch import: bad input fails fast);
    ``.pt``/``.pth`` with ``torch.load(weights_only=True)``, a tensor or a dict of tensors.
    """
    import numpy as np

    suffix = path.suffix.lower()
    chosen = None
    if suffix in (".pt", ".pth"):
        import torch

        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # unpickling errors of many kinds: all mean "not a readable torch file"
            raise UsageError(
                f"{role}: cannot read {path} with torch.load(weights_only=True), is it a torch.save file? "
                f"({type(exc).__name__}: {_first_line(exc)})"
            ) from None
        if isinstance(obj, dict):
            _remember_k(path, obj.get("k", obj.get("curvature")))
            tensors = {
                str(key): v for key, v in obj.items() if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim >= 1
            }
            obj, chosen = _pick(tensors, path, role, name, option)
        elif name is not None:
            raise UsageError(f"{role}: {path} holds a single {type(obj).__name__}, not named arrays; drop {option}")
        if isinstance(obj, torch.Tensor):
            obj = obj.detach().cpu()
            if obj.dtype in (torch.float16, torch.bfloat16):
                obj = obj.float()
            if obj.is_complex():
                raise UsageError(f"{role}: {path} holds a tensor of dtype {obj.dtype}; expected float32 or float64 coordinates")
            obj = obj.numpy()
        if not isinstance(obj, np.ndarray):
            raise UsageError(f"{role}: {path} holds a {type(obj).__name__}; expected a tensor or a dict of tensors")
        arr = obj
    else:
        try:
            loaded = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise UsageError(f"{role}: cannot read {path} as {suffix}: {type(exc).__name__}: {_first_line(exc)}") from None
        if suffix == ".npz":
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise UsageError(f"{role}: {path} is not an .npz archive")
            with loaded:
                try:
                    entries = {key: loaded[key] for key in loaded.files}
                    scalars = {key: v for key, v in entries.items() if v.ndim == 0}
                    _remember_k(path, scalars.get("k", scalars.get("curvature")))
                    entries = {key: v for key, v in entries.items() if v.ndim >= 1}
                except Exception as exc:
                    raise UsageError(f"{role}: cannot read {path}: {type(exc).__name__}: {_first_line(exc)}") from None
            arr, chosen = _pick(entries, path, role, name, option)
        else:
            if not isinstance(loaded, np.ndarray):
                raise UsageError(f"{role}: {path} is not a single .npy array")
            if name is not None:
                raise UsageError(f"{role}: {path} is a single .npy array; drop {option}")
            arr = loaded
    return _to_float(arr, role, path), chosen


STORED_K: dict[str, float] = {}  # path -> the curvature parameter a .pt dict or .npz stored as "k"


def _remember_k(path: Path, value: Any) -> None:
    """Keep a scalar ``k`` stored beside the arrays (a number or a 0-d/1-element tensor or array)."""
    if value is None:
        return
    try:
        kf = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return
    if math.isfinite(kf) and kf > 0:
        STORED_K[str(path)] = kf


def resolve_k(given: float | None, paths: Sequence[Path]) -> tuple[float, str]:
    """``--k`` when given, else the ``k`` stored in an input file (both files must agree), else 1."""
    if given is not None:
        return given, ""
    found = {str(p): STORED_K[str(p)] for p in paths if str(p) in STORED_K}
    values = set(found.values())
    if len(values) > 1:
        raise UsageError(f"the input files store different curvature parameters k: {found}; pass --k")
    if values:
        kf = values.pop()
        return kf, f"using k = {kf:g} stored in {', '.join(sorted(set(found)))} (pass --k to override)"
    return 1.0, ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _to_float(arr: Any, role: str, path: Path):
    import numpy as np

    if arr.dtype.kind in "iub":
        raise UsageError(f"{role}: {path} holds integers (dtype {arr.dtype}); expected float32 or float64 coordinates")
    if arr.dtype.kind != "f":
        raise UsageError(f"{role}: {path} holds an array of dtype {arr.dtype}; expected float32 or float64 coordinates")
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    elif arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    return np.ascontiguousarray(arr)


# --------------------------------------------------------------------------- #
# checking and preparing the points
# --------------------------------------------------------------------------- #
@dataclass
class Inputs:
    """Validated queries and keys, ``(*lead, N, d + 1)`` points (torch), and where they came from."""

    queries: Any
    keys: Any
    k: float
    spatial: bool
    described: dict[str, dict[str, Any]]
    head_labels: list[str] = field(default_factory=list)
    title: str = ""


def _finite(a, role: str) -> None:
    import numpy as np

    ok = np.isfinite(a)
    if not ok.all():
        bad = tuple(int(i) for i in np.argwhere(~ok)[0])
        what = "NaN" if np.isnan(a).any() else "Inf"
        raise UsageError(f"{role} holds {what} (first non-finite value at index {bad}); expected finite coordinates")


def _overflow(a, role: str, spatial: bool, k: float, target) -> float:
    """The largest |x|^2 (Euclidean, in float64); refuse norms whose squares overflow the ``target`` dtype."""
    import numpy as np

    wide = a.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sq = float(np.einsum("...i,...i->...", wide, wide).max()) + (k if spatial else 0.0)
    big = float(np.finfo(target).max)
    if not sq < big:
        norm = math.sqrt(sq) if math.isfinite(sq) else math.inf
        raise UsageError(
            f"{role}: norms overflow {target} (largest |x| = {norm:.3g}, its square exceeds "
            f"{big:.3g}); save the tensors as float64 or pass --dtype float64"
        )
    return sq


def prepare(
    q,
    kk,
    *,
    k: float,
    spatial: bool,
    heads_axis: int | None,
    dtype: str,
    described: dict[str, dict[str, Any]],
    model: str = "lorentz",
) -> Inputs:
    """Check ranks, axes, dimensions, finiteness, overflow (numpy) and the hyperboloid (torch).

    ``spatial``: the inputs are spatial parts, lifted with ``x_t = sqrt(|x_s|^2 + k)``;
    ``model="poincare"``: they are Poincare-ball points, mapped to the hyperboloid.
    """
    import numpy as np

    if spatial and model == "poincare":
        raise UsageError("--spatial and --model poincare exclude each other: ball points are not spatial parts")
    if model == "poincare":
        spatial = True  # (..., N, d) arrays: the same shape checks
    kf = float(k)
    if not (math.isfinite(kf) and kf > 0):
        raise UsageError(f"--k must be a positive finite number (<x,x>_L = -k, curvature -1/k), got {k!r}")
    q, kk = np.asarray(q), np.asarray(kk)
    want = "(..., N, d)" if spatial else "(..., N, d + 1)"
    for a, role in ((q, "QUERIES"), (kk, "KEYS")):
        if a.ndim < 2:
            raise UsageError(
                f"{role}: expected shape {want} with N rows{'' if spatial else ', time coordinate first'}, "
                f"got rank {a.ndim} shape {a.shape}"
            )
        if a.size == 0:
            raise UsageError(f"{role}: empty tensor of shape {a.shape}; expected at least one point")
        if not spatial and a.shape[-1] < 2:
            raise UsageError(
                f"{role}: expected (..., N, d + 1) with d >= 1 (time first), got shape {a.shape}; "
                "pass --spatial for spatial parts"
            )
    if heads_axis is not None:
        moved = []
        for a, role in ((q, "QUERIES"), (kk, "KEYS")):
            if a.ndim < 3:
                raise UsageError(f"--heads-axis {heads_axis}: {role} has shape {a.shape}, no axis besides (N, d)")
            ax = heads_axis + a.ndim if heads_axis < 0 else heads_axis
            if not 0 <= ax < a.ndim - 1:
                raise UsageError(
                    f"--heads-axis {heads_axis} is out of range for {role} of shape {a.shape} "
                    f"(expected 0..{a.ndim - 2}; the last axis holds the coordinates)"
                )
            moved.append(np.ascontiguousarray(np.moveaxis(a, ax, 0)))
        q, kk = moved
    else:
        for a, role in ((q, "QUERIES"), (kk, "KEYS")):
            if a.ndim >= 3 and a.shape[-3] > a.shape[-2]:
                raise UsageError(
                    f"{role}: shape {a.shape} reads as {a.shape[-3]} heads x {a.shape[-2]} points (more heads than "
                    f"points): for a layout (N, H, {'d' if spatial else 'd + 1'}) such as Hypformer's pass "
                    f"--heads-axis {a.ndim - 2}; if the heads really come first, pass --heads-axis 0"
                )
    if q.shape[-1] != kk.shape[-1]:
        extra = 0 if spatial else 1
        raise UsageError(
            f"QUERIES and KEYS have different feature dimensions: QUERIES is {q.shape} (d = {q.shape[-1] - extra}), "
            f"KEYS is {kk.shape} (d = {kk.shape[-1] - extra})"
        )
    try:
        lead = np.broadcast_shapes(q.shape[:-2], kk.shape[:-2])
    except ValueError:
        raise UsageError(
            f"the leading (head/batch) axes of QUERIES {q.shape} and KEYS {kk.shape} do not broadcast; "
            "use --heads-axis if the heads are not in front"
        ) from None
    for a, role in ((q, "QUERIES"), (kk, "KEYS")):
        _finite(a, role)
    target = np.dtype(dtype) if dtype != "auto" else np.promote_types(q.dtype, kk.dtype)
    sq_q = _overflow(q, "QUERIES", spatial, kf, target)
    sq_k = _overflow(kk, "KEYS", spatial, kf, target)
    if math.sqrt(sq_q) * math.sqrt(sq_k) * (q.shape[-1] + 3) >= float(np.finfo(target).max):
        raise UsageError(
            f"QUERIES and KEYS: norms too large for {target} attention scores "
            f"(largest |q| = {math.sqrt(sq_q):.3g}, |k| = {math.sqrt(sq_k):.3g}; their product overflows); "
            "pass --dtype float64"
        )

    import torch

    from hypviz.lorentz import check_k, check_points, lift

    kf = check_k(kf)
    tdtype = getattr(torch, str(target))
    from hypviz.lorentz import from_poincare

    tq, tk = torch.from_numpy(q), torch.from_numpy(kk)
    try:
        if model == "poincare":
            tq, tk = from_poincare(tq.to(tdtype), kf), from_poincare(tk.to(tdtype), kf)
        elif spatial:
            tq, tk = lift(tq.to(tdtype), kf), lift(tk.to(tdtype), kf)
        tq = check_points(tq, kf, name="QUERIES")  # in the dtype they came in, with its tolerance
        tk = check_points(tk, kf, name="KEYS")
    except ValueError as exc:
        text = _one_line(exc)
        generic = text.endswith("lift spatial parts with hypviz.lorentz.lift(x_s, k)")
        if generic:
            text = text[: -len("lift spatial parts with hypviz.lorentz.lift(x_s, k)")].rstrip("; ")
        hint = "; pass the spatial parts only with --spatial, or Poincare-ball points with --model poincare" if generic and not spatial else ""
        raise UsageError(f"{text}{hint}") from None
    # another dtype: keep the spatial parts, recompute the time coordinate there (on <x,x>_L = -k to its rounding)
    if tq.dtype != tdtype:
        tq = lift(tq[..., 1:].to(tdtype), kf)
    if tk.dtype != tdtype:
        tk = lift(tk[..., 1:].to(tdtype), kf)
    labels = [_label(i, lead) for i in range(math.prod(lead))] if len(lead) else ["all"]
    return Inputs(queries=tq, keys=tk, k=kf, spatial=spatial, described=described, head_labels=labels)


def _label(flat: int, lead) -> str:
    import numpy as np

    idx = tuple(int(i) for i in np.unravel_index(flat, tuple(lead)))
    return str(idx[0]) if len(idx) == 1 else str(idx)


# --------------------------------------------------------------------------- #
# the commands
# --------------------------------------------------------------------------- #
@dataclass
class Settings:
    kinds: list[str]
    reference: str
    temperature: float | None
    device: str
    sample_rows: int
    progress: bool | None
    command: str
    power: float = 2.0
    norm_scale: float = 1.0


_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


def _check_device(device: str) -> str:
    if not _DEVICE.match(device):
        raise UsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {device!r}")
    return device


def _resolve_device(device: str):
    from hypviz.attention import resolve_device

    try:
        return resolve_device(device)
    except ValueError as exc:
        raise UsageError(f"--device: {_one_line(exc)}") from None


def cmd_compare(args: argparse.Namespace) -> int:
    if args.keys is None:
        return cmd_model(args)
    if args.reference in args.kinds:
        args.kinds.remove(args.reference)
    if not args.kinds:
        raise UsageError(f"--kinds has nothing to compare with the reference {args.reference!r}; add another kind")
    qpath, kpath = check_file(args.queries, "QUERIES"), check_file(args.keys, "KEYS")
    out = check_out(args.out, args.force, (qpath, kpath))
    _check_device(args.device)
    q, qname = load_array(qpath, "QUERIES", args.queries_key, "--queries-key")
    kk, kname = load_array(kpath, "KEYS", args.keys_key, "--keys-key")
    described = {
        "queries": {"path": str(qpath), "array": qname, "shape": list(q.shape), "dtype": str(q.dtype)},
        "keys": {"path": str(kpath), "array": kname, "shape": list(kk.shape), "dtype": str(kk.dtype)},
    }
    kf, note = resolve_k(args.k, (qpath, kpath))
    inputs = prepare(
        q,
        kk,
        k=kf,
        spatial=args.spatial,
        heads_axis=args.heads_axis,
        dtype=args.dtype,
        described=described,
        model=args.model,
    )
    if note:
        print(f"hypviz compare: {note}")
    device = _resolve_device(args.device)
    inputs.title = f"{qpath.name} vs {kpath.name}" if qpath != kpath else qpath.name
    settings = Settings(
        kinds=args.kinds,
        reference=args.reference,
        temperature=args.temperature,
        device=str(device),
        sample_rows=args.sample_rows,
        power=args.power,
        norm_scale=args.norm_scale,
        progress=args.progress,
        command="compare",
    )
    return _run(
        inputs, settings, out, args.force, extra_options={"heads_axis": args.heads_axis, "dtype": args.dtype, "model": args.model}
    )


def cmd_model(args: argparse.Namespace) -> int:
    """``hypviz compare CAPTURE.pt``: one report for every attention layer a :mod:`hypviz.capture` file holds."""
    path = check_file(args.queries, "CAPTURE")
    if path.suffix.lower() not in (".pt", ".pth"):
        raise UsageError(
            f"KEYS is missing: pass a KEYS file, or a capture file (.pt written by hypviz.capture's Capture.save) "
            f"as the only argument; {path.name} is not one"
        )
    out = check_out(args.out, args.force, (path,))
    _check_device(args.device)
    from hypviz import capture, model_report

    try:
        records = capture.load(path)
    except ValueError as exc:
        text = _one_line(exc)
        raise UsageError(f"KEYS is missing and {path} is not a readable capture file ({text}); pass a KEYS file") from None
    device = _resolve_device(args.device)
    results = model_report.analyse(records, temperature=args.temperature, device=str(device), progress=args.progress)
    tmp = _temp_dir(out)
    try:
        files = model_report.write(results, tmp, {"path": str(path), "layers": len(records)})
        publish(tmp, out, args.force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(model_report.summary(results, out, files))
    return 0


def demo_inputs() -> Inputs:
    """Built-in queries and keys: one head per mean spatial norm of ``DEMO_NORMS``, float32, k = 1."""
    import torch

    from hypviz import data

    n, d = 256, 32
    qs = [data.lifted_gaussian(n, d, r, seed=2 * i, dtype=torch.float32) for i, r in enumerate(DEMO_NORMS)]
    ks = [data.lifted_gaussian(n, d, r, seed=2 * i + 1, dtype=torch.float32) for i, r in enumerate(DEMO_NORMS)]
    q, kk = torch.stack(qs).numpy(), torch.stack(ks).numpy()
    described = {
        "queries": {"path": "built-in demo (inputs.npz)", "array": "queries", "shape": list(q.shape), "dtype": "float32"},
        "keys": {"path": "built-in demo (inputs.npz)", "array": "keys", "shape": list(kk.shape), "dtype": "float32"},
    }
    inputs = prepare(q, kk, k=1.0, spatial=False, heads_axis=None, dtype="auto", described=described)
    inputs.head_labels = [f"{i} (|x_s| ~ {r:g})" for i, r in enumerate(DEMO_NORMS)]
    inputs.title = "built-in demo: lifted Gaussian queries and keys, one head per mean spatial norm"
    return inputs


def cmd_demo(args: argparse.Namespace) -> int:
    out = check_out(args.out, args.force)
    _check_device(args.device)
    inputs = demo_inputs()
    device = _resolve_device(args.device)
    settings = Settings(
        kinds=["spatial", "focused", "lorentz"],
        reference="distance",
        temperature=None,
        device=str(device),
        sample_rows=args.sample_rows,
        progress=args.progress,
        command="demo",
    )
    return _run(inputs, settings, out, args.force, save_inputs=True)


def _run(
    inputs: Inputs,
    settings: Settings,
    out: Path,
    force: bool,
    *,
    save_inputs: bool = False,
    extra_options: dict[str, Any] | None = None,
) -> int:
    from hypviz import report

    result = report.analyse(inputs, settings)
    tmp = _temp_dir(out)
    try:
        if save_inputs:
            import numpy as np

            np.savez(
                tmp / "inputs.npz",
                queries=inputs.queries.detach().cpu().numpy(),
                keys=inputs.keys.detach().cpu().numpy(),
            )
        files = report.write(result, tmp, options=extra_options or {})
        publish(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(report.summary(result, out, files, show_inputs=save_inputs))
    return 0


# --------------------------------------------------------------------------- #
# entry point
# --------------------------------------------------------------------------- #
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hypviz`` command; returns the exit code (0 ok, 2 bad input, 1 internal error)."""
    debug = os.environ.get("HYPVIZ_DEBUG", "") not in ("", "0")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0): a code, also when called in process
        return exc.code if isinstance(exc.code, int) else 2
    prog = f"hypviz {args.command}"
    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.simplefilter("ignore")
            return args.func(args)
    except UsageError as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; nothing written", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal error: one line unless HYPVIZ_DEBUG is set
        if debug:
            raise
        print(
            f"{prog}: internal error: {type(exc).__name__}: {_one_line(exc)[:500]} "
            "(nothing written; set HYPVIZ_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
