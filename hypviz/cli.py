r"""The ``hypviz`` command: compare the attention maps of your own queries and keys, and write a report.

::

    hypviz compare QUERIES KEYS [--spatial | --model lorentz|poincare] [--k K] [--heads-axis AXIS]
                   [--kinds spatial,focused] [--reference distance] [--temperature TAU]
                   [--power P] [--norm-scale S] [--dtype auto|float32|float64]
                   [--queries-key NAME] [--keys-key NAME] [--device auto|cpu|cuda|cuda:INDEX]
                   [--sample-rows N] [--rows R] [--seed SEED] [--[no-]progress] [--out DIR] [--force]
    hypviz compare CAPTURE.pt [--temperature TAU] [--device ...] [--[no-]progress] [--out DIR] [--force]
    hypviz demo [--device ...] [--sample-rows N] [--rows R] [--seed SEED] [--[no-]progress] [--out DIR] [--force]

The second form reads a file written by :mod:`hypviz.capture` and reports on every attention
layer of the model (:mod:`hypviz.model_report`); of the options above only those shown apply to it.
``hypviz demo`` writes the same report as the first form for built-in data.

Inputs are ``.pt``/``.pth`` files (``torch.load(weights_only=True)``: a dense tensor, or a dict of
tensors), ``.npy`` or ``.npz`` files holding arrays of shape ``(..., N, d + 1)``: full hyperboloid
points, time coordinate first, on :math:`\langle x, x\rangle_L = -k` (checked).  With ``--spatial``
they are spatial parts ``(..., N, d)``, lifted with :math:`x_t = \sqrt{\|x_s\|^2 + k}`; with
``--model poincare`` they are Poincare-ball points ``(..., N, d)``, mapped to the hyperboloid.  A
file holding several arrays (an ``.npz`` or a dict saved with ``torch.save``) is read by name:
``--queries-key`` / ``--keys-key``, else its only array, else the array named ``queries``
(``query``, ``q``, ``Q``) or ``keys`` (``key``, ``k``, ``K``), so one file can hold both:
``hypviz compare qk.npz qk.npz``.  A scalar ``k`` (or ``curvature``) stored in such a file is the
default of ``--k`` (else 1).  Leading axes are heads/batch (they broadcast between queries and
keys); ``--heads-axis`` names the heads axis of a layout such as ``(N, H, d + 1)``.

Points are checked in the dtype they were made in: float32/float64 at that dtype's tolerance
(arrays of either byte order), float16/bfloat16 at theirs (``rtol = 8 eps`` of that dtype, the
arithmetic done in float32 on their exact values).  Where the compute dtype (``--dtype``; by
default the inputs', float32 for half-precision inputs) differs from the dtype they were made in,
the time coordinate is then recomputed from the spatial parts in the compute dtype.  Inputs must be regular files (a FIFO, device or socket
is refused, never read), at most ``HYPVIZ_MAX_INPUT_BYTES`` bytes (default 2 GiB = 2147483648):
for ``.npy``/``.npz`` the size of the array read, taken from its ``.npy`` header before anything
is decompressed or loaded; for ``.pt``/``.pth`` the file size.  hypviz never unpickles anything
but tensors.

Every kind of ``--kinds`` is compared with the ``--reference`` kind by
:func:`hypviz.attention.compare`, each map read against its distance from the uniform row, with a
verdict ("close", "different", "uninformative") per comparison and per head.  Kinds: ``spatial``
(the question-and-answer thread's softmax of :math:`q_s \cdot \kappa_s`), ``distance``
(Hypformer's full attention at ``--temperature`` :math:`k \cdot \mathrm{scale} / 2`),
``lorentz``, ``focused`` (Hypformer's linear map, with ``--power`` and ``--norm-scale``).  The
output folder gets ``report.html`` (self-contained, opens from disk with no network),
``metrics.json``, ``rows.npz`` (per-row statistics) and PNG figures (and, for the demo,
``inputs.npz``).

Publishing.  The report is written into a temporary folder ``.NAME.tmp-XXXXXXXX`` beside ``--out``
(so the name of ``--out`` may be at most the file system's limit, usually 255 bytes, minus 14),
then put in place in one step: renamed with ``renameat2(RENAME_NOREPLACE)``, or, replacing an
existing report with ``--force``, exchanged with it by ``renameat2(RENAME_EXCHANGE)`` (Linux,
called through ctypes: glibc's ``renameat2`` or the raw system call) and the old folder, now at the
temporary name, removed.  So at every instant ``--out`` holds the complete old report or the
complete new one, even under SIGKILL.  Where ``renameat2`` is unavailable (another OS, an old
kernel, a file system without the flag) the old folder is moved into a new folder
``.NAME.old-XXXXXXXX`` and the new one renamed in: two renames with signals deferred across them
(a SIGKILL between them leaves the old report in ``.NAME.old-*``).  SIGTERM, SIGHUP and SIGINT
(while Python's default SIGINT handler is installed) stop a run with one line saying whether the
new report was published, exit code 128 + the signal's number, and the temporary folder removed.
(``HYPVIZ_TEST_PAUSE_AT=STAGE[:SIGNAL]``, for the tests only, makes the command send itself
SIGTERM, or SIGNAL, at one stage: ``tmp``, ``written``, ``swapped``, ``cleaned``.)

Exit codes: 0 success; 2 bad input or usage, or an output the file system refuses (disk full,
read-only, no permission): one line on stderr naming the problem, nothing written; 1 unexpected
internal error (one line; ``HYPVIZ_DEBUG=1`` shows the traceback); 128 + N when stopped by signal N.
File names are shown with undecodable bytes and control characters escaped (``\xff``, ``\x1b``),
in messages and in the report.  Heavy imports (torch, matplotlib, plotly) happen after the cheap
checks.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import platform
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from hypviz import _validate as validate

__all__ = ["main", "build_parser", "UsageError"]

KINDS = ("spatial", "distance", "lorentz", "focused")  # hypviz.attention.KINDS, repeated to keep `--help` free of torch
FORMATS = (".pt", ".pth", ".npy", ".npz")
ROLE_NAMES = {"QUERIES": ("queries", "query", "q", "Q"), "KEYS": ("keys", "key", "k", "K")}
MARKER = "metrics.json"  # a folder holding this file, written by hypviz, may be replaced with --force
DEMO_NORMS = (0.1, 1.0, 3.0, 10.0)  # mean spatial norm of each demo head: from near-uniform maps to sharp ones
MAX_INPUT_ENV = "HYPVIZ_MAX_INPUT_BYTES"
DEFAULT_MAX_INPUT_BYTES = 2 * 1024**3  # 2 GiB: the largest array (.npy/.npz) or file (.pt) read
PAUSE_ENV = "HYPVIZ_TEST_PAUSE_AT"  # tests only: STAGE[:SIGNAL], the command signals itself at that stage
STAGES = ("tmp", "written", "swapped", "cleaned")
TMP_EXTRA = len(".") + len(".tmp-") + 8  # what mkdtemp's ".NAME.tmp-XXXXXXXX" adds to NAME (".old-" is as long)
HALF_RTOL_EPS = 8  # float16/bfloat16 points are checked at rtol = 8 eps of their dtype
HALF = ("float16", "bfloat16")


class UsageError(Exception):
    """Bad input or usage: reported as one line on stderr with exit code 2."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _show(text: Any) -> str:
    """``text`` (a path or name) as it may be printed or stored: bytes that are not UTF-8 and control
    characters (terminal escape codes, bidirectional overrides) escaped, e.g. ``\\xff``, ``\\x1b``."""
    s = os.fspath(text) if isinstance(text, os.PathLike) else text
    if isinstance(s, bytes):
        s = s.decode("utf-8", "backslashreplace")
    s = str(s)
    if not _UNSAFE.search(s):
        return s
    try:
        s = os.fsencode(s).decode("utf-8", "backslashreplace")  # undecodable bytes of a file name: \xNN
    except UnicodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates that are no bytes: \udNNN

    def escape(m: re.Match) -> str:
        o = ord(m.group())
        return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"

    return _UNSAFE.sub(escape, s)


def _fs_len(name: str) -> int:
    try:
        return len(os.fsencode(name))
    except UnicodeError:
        return len(name.encode("utf-8", "surrogatepass"))


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


# --------------------------------------------------------------------------- #
# argument parsing
# --------------------------------------------------------------------------- #
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {_show(_one_line(message))} (see '{self.prog} --help')\n")


def _positive(name: str):
    hint = " (<x,x>_L = -k, curvature -1/k)" if name == "--k" else ""

    def parse(text: str) -> float:
        try:
            return validate.positive(text, name, hint)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

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
        "--sample-rows", type=_count, default=64, metavar="N",
        help="query rows drawn in the heatmaps (default 64); does not change the statistics (see --rows)",
    )
    p.add_argument(
        "--rows",
        type=_count,
        default=None,
        metavar="R",
        help="compute the statistics on R query rows per head drawn uniformly (seeded, --seed) against all keys, "
        "with 95%% confidence intervals on every mean: for very large N (default: every row)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --rows sample (default 0)")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only for long runs on a terminal)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hypviz`` command, with its sub-commands ``compare`` and ``demo``.

    Each option's type checks its value (a positive finite ``--k``, ``--temperature`` and
    ``--power``, a finite ``--norm-scale``, known ``--kinds``) and a usage error is one line with
    exit code 2.  The site's CLI page is generated from this parser, so it lists exactly what the
    command accepts.
    """
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
            "else the array named queries/keys. Points are checked in the dtype they were made in (float16/bfloat16 "
            "at rtol = 8 eps of theirs). Inputs must be regular files of at most HYPVIZ_MAX_INPUT_BYTES bytes "
            "(default 2147483648 = 2 GiB; for .npy/.npz the array's size from its header, for .pt the file's). "
            "The report is written beside --out and put in place in one step (--force: swapped with the old one "
            "by renameat2 RENAME_EXCHANGE where available). Exit codes: 0 ok, 2 bad input (or the disk refuses "
            "the output), 1 internal error (HYPVIZ_DEBUG=1 shows the traceback), 128+N on signal N."
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
# the output folder: checked first, written last, published in one step
# --------------------------------------------------------------------------- #
def _is_report(path: Path) -> bool:
    marker = path / MARKER
    try:
        return marker.is_file() and '"generator": "hypviz"' in marker.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False


def _what(path: Path) -> str:
    """What is at ``path``, in words: "a file", "a folder", "a FIFO (named pipe)", ..."""
    try:
        st = os.stat(path)
    except OSError:
        return "a broken symbolic link" if os.path.islink(path) else "missing"
    mode = st.st_mode
    for test, words in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _pathconf(folder: Path, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError):
        return default
    return value if value and value > 0 else default


def check_out(out: Path, force: bool, inputs: Sequence[Path] = ()) -> Path:
    """Refuse an output folder that exists (without ``--force``), is not a report, holds an input,
    lies under something that is not a folder, or whose name (plus the temporary suffix) is too long."""
    out = Path(os.path.abspath(out))
    if not out.name:
        raise UsageError(f"--out {_show(out)} is the root folder; choose a folder to create")
    parent = out.parent
    if not os.path.isdir(parent):
        probe = parent
        while not os.path.lexists(probe) and probe.parent != probe:
            probe = probe.parent
        if os.path.lexists(probe) and not os.path.isdir(probe):
            where = f"the parent of --out, {_show(probe)}," if probe == parent else f"--out {_show(out)} lies under {_show(probe)}, which"
            raise UsageError(f"{where} is {_what(probe)}, not a folder; choose an --out inside a folder")
        if os.path.isdir(probe) and not os.access(probe, os.X_OK):
            raise UsageError(f"cannot look inside {_show(probe)} (permission denied) for the parent of --out {_show(out)}")
        raise UsageError(f"the parent folder of --out does not exist: {_show(parent)} (create it first)")
    name_max = _pathconf(parent, "PC_NAME_MAX", 255)
    nbytes = _fs_len(out.name)
    if nbytes + TMP_EXTRA > name_max:
        shown = _show(out.name[:20]) + ("..." if len(out.name) > 20 else "")
        raise UsageError(
            f"--out name too long: {shown} is {nbytes} bytes; at most {name_max - TMP_EXTRA} here (the file system "
            f"allows {name_max} per name, and hypviz first writes a temporary folder .NAME.tmp-XXXXXXXX beside it, "
            f"{TMP_EXTRA} bytes longer)"
        )
    path_max = _pathconf(parent, "PC_PATH_MAX", 4096)
    if _fs_len(str(parent)) + 1 + nbytes + TMP_EXTRA >= path_max:
        raise UsageError(f"--out path too long: {_fs_len(str(out))} bytes; the file system allows {path_max} per path "
                         f"including the {TMP_EXTRA} bytes of the temporary name")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"output folder {_show(out)} already exists; pass --force to replace it, or choose another --out")
        if out.is_symlink() or not out.is_dir():
            raise UsageError(f"--out {_show(out)} exists and is {_what(out) if not out.is_symlink() else 'a symbolic link'}, "
                             "not a folder; not replacing it")
        if any(out.iterdir()) and not _is_report(out):
            raise UsageError(
                f"--force would replace {_show(out)}, which is not a hypviz report (no {MARKER} written by hypviz); "
                "remove it yourself or choose another --out"
            )
        cwd = Path(os.path.abspath(os.getcwd()))
        if cwd == out or out in cwd.parents:
            raise UsageError(f"--force would replace {_show(out)}, which holds the current folder; choose another --out")
        for p in inputs:
            p = Path(os.path.abspath(p))
            if out in p.parents:
                raise UsageError(
                    f"--force would replace {_show(out)}, which holds the input {_show(p)}; copy the input elsewhere first"
                )
    return out


def _temp_dir(out: Path) -> Path:
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"cannot write into {_show(out.parent)}: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700 folders; a report is an ordinary folder
    return tmp


# --- signals: what a run has put on disk, and signals deferred across each step that changes it ----------- #
class _Interrupted(BaseException):
    """Raised by the signal handler (SIGTERM, SIGHUP, SIGINT) so that the clean-up paths run."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _RunState:
    """What this run has done (``published``: the new report is at this path) and its signal bookkeeping."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.published: Path | None = None
        self.critical = 0  # > 0: inside a step that must not be cut (a rename and the record of it)
        self.pending: int | None = None  # a signal that arrived inside such a step
        self.done = False  # set once an interruption was raised or the command has finished: later signals are noted only
        self.delivered = 0  # how many signals the handler has seen (the test hook waits for its own)
        self.signal: int | None = None  # the signal an interruption was raised for (even if a library swallowed it)


_RUN = _RunState()


def _on_signal(signum: int, frame: Any) -> None:
    _RUN.delivered += 1
    if _RUN.done:
        return
    if _RUN.critical:
        if _RUN.pending is None:
            _RUN.pending = signum
        return
    _RUN.done, _RUN.signal = True, signum
    raise _Interrupted(signum)


class _Critical:
    """A step that a signal must not cut in two: signals arriving inside are acted on when it ends."""

    def __enter__(self) -> None:
        _RUN.critical += 1

    def __exit__(self, *exc: Any) -> None:
        _RUN.critical -= 1
        if not _RUN.critical and _RUN.pending is not None and not _RUN.done:
            signum, _RUN.pending = _RUN.pending, None
            _RUN.done, _RUN.signal = True, signum
            raise _Interrupted(signum)


def _install_handlers(previous: dict[int, Any]) -> None:
    """Our handler for SIGTERM, SIGHUP and (when it is Python's default) SIGINT; the previous ones go into ``previous``
    as each is replaced (so that they are restored even if a signal arrives in between)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN or (name == "SIGINT" and current is not signal.default_int_handler):
            continue  # ignored on purpose (nohup), or someone else's SIGINT handler (a notebook kernel)
        try:
            previous[signum] = current
            signal.signal(signum, _on_signal)
        except (ValueError, OSError):
            previous.pop(signum, None)


def _restore_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        try:
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _stage(name: str) -> None:
    """Tests only: at stage ``name`` of ``HYPVIZ_TEST_PAUSE_AT=STAGE[:SIGNAL]`` send ourselves the signal."""
    spec = os.environ.get(PAUSE_ENV, "")
    if not spec:
        return
    stage, _, signame = spec.partition(":")
    if stage != name:
        return
    signum = getattr(signal, "SIG" + signame.upper().removeprefix("SIG"), None) if signame else signal.SIGTERM
    if signum is None:
        return
    before = _RUN.delivered
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 5.0
    while _RUN.delivered == before and time.monotonic() < deadline:  # another thread may take it: wait for the handler
        time.sleep(0.001)


def _discard(path: Path | None) -> None:
    """Remove a temporary or swapped-out folder, signals deferred until it is gone."""
    if path is None:
        return
    with _Critical():
        shutil.rmtree(path, ignore_errors=True)


# --- renameat2 through ctypes -------------------------------------------------------------------------------- #
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {  # the system call's number where libc has no renameat2 (glibc < 2.28)
    "x86_64": 316, "amd64": 316, "i386": 353, "i686": 353, "aarch64": 276, "arm64": 276, "riscv64": 276,
    "loongarch64": 276, "armv7l": 382, "armv6l": 382, "ppc64le": 357, "ppc64": 357, "s390x": 347,
}
_RENAMEAT2: Any = None  # resolved on first use: a function (old, new, flags) -> errno (0: done), or False


def _find_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        fn.restype = ctypes.c_int

        def call(old: bytes, new: bytes, flags: int) -> int:
            return 0 if fn(AT_FDCWD, old, AT_FDCWD, new, flags) == 0 else ctypes.get_errno()

        return call
    number = _SYS_RENAMEAT2.get(platform.machine().lower())
    syscall = getattr(libc, "syscall", None)
    if number is None or syscall is None:
        return None
    syscall.restype = ctypes.c_long

    def call_raw(old: bytes, new: bytes, flags: int) -> int:
        r = syscall(ctypes.c_long(number), ctypes.c_long(AT_FDCWD), ctypes.c_char_p(old),
                    ctypes.c_long(AT_FDCWD), ctypes.c_char_p(new), ctypes.c_long(flags))
        return 0 if r == 0 else ctypes.get_errno()

    return call_raw


def _rename2(old: Path, new: Path, flags: int) -> bool:
    """``renameat2(old, new, flags)``: True when done, False where unavailable (no such call, or the file
    system lacks the flag); other failures raise ``OSError``."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        _RENAMEAT2 = _find_renameat2() or False
    if not _RENAMEAT2:
        return False
    err = _RENAMEAT2(os.fsencode(old), os.fsencode(new), flags)
    if err == 0:
        return True
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False  # EPERM: a seccomp filter refusing the call; a real permission problem recurs in the fallback
    raise OSError(err, os.strerror(err), str(old), None, str(new))


def publish(tmp: Path, out: Path, force: bool) -> str:
    """Put the finished ``tmp`` folder at ``out`` in one step; returns how: "renamed", "exchanged", "two renames".

    A new ``out``: ``renameat2(RENAME_NOREPLACE)`` (else a check and ``os.rename``).  An existing one
    (``force``): ``renameat2(RENAME_EXCHANGE)`` swaps the two folders atomically, then the old report, now
    at ``tmp``, is removed; where that is unavailable, ``out`` is renamed to ``.NAME.old-*`` and ``tmp``
    renamed in.  Signals are deferred across each step and the record that it happened (``_RUN.published``),
    so an interruption message always matches what is on disk.
    """
    exists = out.exists() or out.is_symlink()
    if exists and not force:
        raise UsageError(f"output folder {_show(out)} already exists; pass --force to replace it, or choose another --out")
    if not exists:
        with _Critical():
            try:
                done = _rename2(tmp, out, RENAME_NOREPLACE)
            except FileExistsError:
                done = False
            if not done:
                if out.exists() or out.is_symlink():
                    raise UsageError(f"{_show(out)} appeared while the report was being written; not replacing it")
                os.rename(tmp, out)
            _stage("swapped")
            _RUN.published = out
        _stage("cleaned")
        return "renamed"
    old, swapped = None, False
    try:
        with _Critical():
            if _rename2(tmp, out, RENAME_EXCHANGE):
                how, old = "exchanged", tmp  # the old report is now at the temporary name
            else:
                how = "two renames"
                aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
                try:
                    os.replace(out, aside / out.name)
                except BaseException:
                    shutil.rmtree(aside, ignore_errors=True)  # still empty
                    raise
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(aside / out.name, out)  # should this fail, the old report stays in .NAME.old-*
                    shutil.rmtree(aside, ignore_errors=True)
                    raise
                old = aside
            swapped = True
            _stage("swapped")
            _RUN.published = out
    finally:
        if swapped:  # also when a signal that arrived during the swap is raised now
            _discard(old)
    _stage("cleaned")
    return how


_WRITE_ERRNOS = {
    errno.ENOSPC: "free some space or choose another --out",
    errno.EDQUOT: "free some space or choose another --out",
    errno.EROFS: "choose an --out on a writable file system",
    errno.EACCES: "choose an --out you may write to",
    errno.EPERM: "choose an --out you may write to",
    errno.EFBIG: "choose another --out",
    errno.EIO: "choose another --out",
    errno.ENAMETOOLONG: "choose a shorter --out",
    errno.EMLINK: "choose another --out",
}


def _produce(out: Path, force: bool, write: Callable[[Path], list[str]]) -> list[str]:
    """``write(tmp)`` into a temporary folder beside ``out``, then :func:`publish` it; on any failure or
    interruption the temporary folder is removed (and a file system's refusal is reported as bad input)."""
    tmp = _temp_dir(out)
    try:
        _stage("tmp")
        files = write(tmp)
        _stage("written")
        publish(tmp, out, force)
    except OSError as exc:
        _discard(tmp)
        if exc.errno in _WRITE_ERRNOS and _RUN.published is None:
            code = errno.errorcode.get(exc.errno, str(exc.errno))
            raise UsageError(
                f"cannot write the report {_show(out)}: {exc.strerror or exc} ({code}); nothing written, the temporary "
                f"folder removed; {_WRITE_ERRNOS[exc.errno]}"
            ) from None
        raise
    except BaseException:
        _discard(tmp)
        raise
    return files


# --------------------------------------------------------------------------- #
# reading the user's files
# --------------------------------------------------------------------------- #
def check_file(path: str, role: str) -> Path:
    """Refuse a missing file, a folder, anything that is not a regular file (a FIFO would block), an unknown format."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{role}: no such file: {_show(path)}") from None
    except ValueError:  # an embedded NUL
        raise UsageError(f"{role}: the file name {_show(path)} holds a NUL character") from None
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {_show(path)}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{role}: {_show(path)} is a folder; expected a .pt, .pth, .npy or .npz file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"{role}: {_show(path)} is not a regular file (it is {_what(p)}); expected a .pt, .pth, .npy or .npz file "
            "(hypviz does not read from pipes or devices)"
        )
    if p.suffix.lower() not in FORMATS:
        what = f"'{_show(p.suffix)}'" if p.suffix else "no extension"
        raise UsageError(f"{role}: unknown format ({what}) for {_show(path)}; expected .pt, .pth, .npy or .npz")
    return p


def max_input_bytes() -> int:
    """The largest input read: ``HYPVIZ_MAX_INPUT_BYTES`` (a positive number of bytes), default 2 GiB."""
    text = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_INPUT_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{MAX_INPUT_ENV} must be a positive whole number of bytes, got {_show(text)!r}")
    return value


def _too_big(role: str, what: str, nbytes: int, limit: int) -> UsageError:
    return UsageError(
        f"{role}: {what} is {_size(nbytes)} ({nbytes} bytes), above the input limit of {_size(limit)}; "
        f"set {MAX_INPUT_ENV} to a larger number of bytes to read it"
    )


def _pick(entries: dict[str, Any], path: Path, role: str, name: str | None, option: str) -> tuple[Any, str]:
    names = list(entries)
    shown = _show(", ".join(names[:12]) + (", ..." if len(names) > 12 else ""))
    if name is not None:
        if name not in entries:
            raise UsageError(f"{role}: {_show(path)} has no array named {_show(name)!r} (it holds: {shown or 'nothing'})")
        return entries[name], name
    if not names:
        raise UsageError(f"{role}: {_show(path)} holds no arrays of rank 1 or more")
    if len(names) == 1:
        return entries[names[0]], names[0]
    for candidate in ROLE_NAMES[role]:
        if candidate in entries:
            return entries[candidate], candidate
    raise UsageError(f"{role}: {_show(path)} holds {len(names)} arrays ({shown}); choose one with {option} NAME")


def _numpy_detail(exc: BaseException) -> str:
    """numpy's reason, without its advice to load the file unsafely: hypviz never unpickles."""
    text = _first_line(exc)
    if re.search(r"pickle|unsafe|trust", text, re.I):
        return "it holds pickled Python objects, which hypviz never unpickles"
    return f"{type(exc).__name__}: {text}"


def _torch_detail(exc: BaseException) -> str:
    """torch.load's reason, without its advice to load the file with weights_only=False."""
    text = str(exc)
    if "Weights only load failed" in text or "WeightsUnpickler" in text:
        m = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if m:
            return f"it holds a pickled {m.group(1)} object, not only tensors"
        return "it is not a torch.save file of tensors (its pickle is not one torch.load(weights_only=True) accepts)"
    line = _first_line(exc)
    if re.search(r"weights_only\W+(set to\W+)?False|pickle\.load|unsafe|trust", line, re.I):
        line = "the file is not a torch.save file of tensors"
    return f"{type(exc).__name__}: {line}"


def _not_npy(head: bytes) -> str:
    """Why a stream that should be a .npy array is not one, from its first bytes."""
    if not head:
        return "it is empty"
    if head.startswith(b"PK\x03\x04"):
        return "it is a zip archive (an .npz, or a torch.save file: name it .npz or .pt)"
    if head[:1] == b"\x80":
        return "it is a Python pickle (a torch.save file? name it .pt); hypviz never unpickles"
    return "it does not start with the .npy magic string \\x93NUMPY"


def _npy_header(fp, role: str, where: str):
    """``(shape, fortran_order, dtype)`` from the header of a .npy stream, read before any data."""
    import numpy as np

    fmt = np.lib.format
    head = fp.read(8)
    if len(head) < 8 or not head.startswith(b"\x93NUMPY"):
        raise UsageError(f"{role}: {where} is not a .npy array file: {_not_npy(head)}")
    version = (head[6], head[7])
    try:
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fp)
        elif version == (3, 0) and hasattr(fmt, "_read_array_header"):
            shape, fortran, dtype = fmt._read_array_header(fp, version)
        else:
            raise UsageError(f"{role}: {where} is a .npy file of an unknown format version {version[0]}.{version[1]}")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{role}: {where} is not a .npy array file: its header cannot be read ({_numpy_detail(exc)})") from None
    return tuple(int(n) for n in shape), bool(fortran), dtype


def _refuse_header(role: str, what: str, shape: tuple, dtype, limit: int) -> int:
    """Refuse pickled objects and arrays above the limit, from a .npy header; returns the size in bytes."""
    if dtype.hasobject:
        raise UsageError(
            f"{role}: {what} holds Python objects (dtype object, stored as a pickle); hypviz never unpickles: "
            "save float32/float64 arrays"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limit:
        raise _too_big(role, f"{what} holds an array of shape {shape} {dtype} and", nbytes, limit)
    return nbytes


def _load_npy(path: Path, role: str, limit: int):
    import numpy as np

    try:
        with open(path, "rb") as fp:
            shape, _, dtype = _npy_header(fp, role, _show(path))
            nbytes = _refuse_header(role, _show(path), shape, dtype, limit)
            have = os.fstat(fp.fileno()).st_size - fp.tell()
            if have < nbytes:
                raise UsageError(
                    f"{role}: {_show(path)} is truncated: its header promises shape {shape} {dtype} ({nbytes} bytes), "
                    f"the file holds {have} bytes of data"
                )
            fp.seek(0)
            return np.lib.format.read_array(fp, allow_pickle=False)
    except (UsageError, _Interrupted, KeyboardInterrupt):
        raise
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {_show(path)}: {exc.strerror or exc}") from None
    except Exception as exc:
        raise UsageError(f"{role}: cannot read {_show(path)} as .npy: {_numpy_detail(exc)}") from None


def _load_npz(path: Path, role: str, name: str | None, option: str, limit: int):
    """One array of an .npz, found by the members' .npy headers: only the chosen array is decompressed."""
    import numpy as np

    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with open(path, "rb") as fp:
            head = fp.read(8)
        hint = ": it looks like a .npy file, name it .npy" if head.startswith(b"\x93NUMPY") else " (a zip of .npy files)"
        raise UsageError(f"{role}: {_show(path)} is not an .npz archive{hint}") from None
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {_show(path)}: {exc.strerror or exc}") from None
    member = ""
    try:
        with zf:
            headers = {}
            for info in zf.infolist():
                if info.is_dir() or not info.filename.endswith(".npy"):
                    continue
                member = info.filename[:-4]
                with zf.open(info) as fp:
                    shape, _, dtype = _npy_header(fp, role, f"{_show(path)} [{_show(member)}]")
                headers[member] = (info, shape, dtype)
            for key in ("k", "curvature"):  # a scalar k stored beside the arrays
                if key in headers and headers[key][1] == () and headers[key][2].kind in "iuf":
                    member = key
                    with zf.open(headers[key][0]) as fp:
                        _remember_k(path, np.lib.format.read_array(fp, allow_pickle=False))
                    break
            entries = {key: h for key, h in headers.items() if len(h[1]) >= 1}
            (info, shape, dtype), chosen = _pick(entries, path, role, name, option)
            member = chosen
            what = f"{_show(path)} [{_show(chosen)}]"
            nbytes = _refuse_header(role, what, shape, dtype, limit)
            if info.file_size < nbytes:
                raise UsageError(f"{role}: {what} is truncated: its header promises shape {shape} {dtype} ({nbytes} bytes)")
            with zf.open(info) as fp:
                return np.lib.format.read_array(fp, allow_pickle=False), chosen
    except (UsageError, _Interrupted, KeyboardInterrupt):
        raise
    except OSError as exc:
        raise UsageError(f"{role}: cannot read {_show(path)}: {exc.strerror or exc}") from None
    except Exception as exc:
        where = f" [{_show(member)}]" if member else ""
        raise UsageError(f"{role}: cannot read {_show(path)}{where}: {_numpy_detail(exc)}") from None


def _tensor_problem(t) -> str | None:
    """What makes a loaded tensor unusable as coordinates, in words, or None."""
    import torch

    if getattr(t, "is_nested", False):
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a sparse tensor (layout {t.layout})"
    if t.is_meta:
        return "a meta tensor (a shape with no data)"
    if t.is_quantized:
        return f"a quantised tensor (dtype {t.dtype})"
    if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return None
    if "float8" in str(t.dtype):
        return f"a float8 tensor (dtype {t.dtype})"
    if t.is_complex():
        return f"a complex tensor (dtype {t.dtype})"
    if t.dtype == torch.bool or not t.is_floating_point():
        return f"integers (dtype {t.dtype})"
    return f"a tensor of dtype {t.dtype}"


def _ndim(v: Any) -> int:
    try:
        return int(v.ndim)
    except Exception:
        return 1


def _load_torch(path: Path, role: str, name: str | None, option: str, limit: int):
    import numpy as np

    size = os.stat(path).st_size
    if size > limit:
        raise _too_big(role, f"the file {_show(path)}", size, limit)
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (_Interrupted, KeyboardInterrupt):
        raise
    except Exception as exc:  # unpickling errors of many kinds: all mean "not a readable torch file"
        raise UsageError(
            f"{role}: cannot read {_show(path)} with torch.load(weights_only=True), is it a torch.save file of tensors? "
            f"({_torch_detail(exc)})"
        ) from None
    chosen = None
    if isinstance(obj, dict):
        _remember_k(path, obj.get("k", obj.get("curvature")))
        tensors = {str(key): v for key, v in obj.items() if isinstance(v, (torch.Tensor, np.ndarray)) and _ndim(v) >= 1}
        obj, chosen = _pick(tensors, path, role, name, option)
    elif name is not None:
        raise UsageError(f"{role}: {_show(path)} holds a single {type(obj).__name__}, not named arrays; drop {option}")
    made = None
    if isinstance(obj, torch.Tensor):
        problem = _tensor_problem(obj)
        if problem:
            raise UsageError(
                f"{role}: {_show(path)} holds {problem}; expected a dense float16/bfloat16/float32/float64 tensor"
            )
        obj = obj.detach().cpu().resolve_conj().resolve_neg()
        if obj.dtype == torch.bfloat16:  # numpy has no bfloat16: its values exactly, in float32
            obj, made = obj.float(), "bfloat16"
        obj = obj.numpy()
    if not isinstance(obj, np.ndarray):
        raise UsageError(f"{role}: {_show(path)} holds a {type(obj).__name__}; expected a tensor or a dict of tensors")
    return obj, chosen, made


def read_input(path: Path, role: str, name: str | None, option: str):
    """Read one array from ``path``; returns ``(array, chosen_name, made_in)``.

    ``array`` is a native-byte-order float16/float32/float64 numpy array (bfloat16 tensors come as
    float32 holding their exact values), ``made_in`` the name of the dtype the values were made in
    ("bfloat16", "float16", "float32", ...).  ``.npy``/``.npz`` are read with numpy alone (no torch
    import: bad input fails fast), their ``.npy`` headers checked before any data is read;
    ``.pt``/``.pth`` with ``torch.load(weights_only=True)``, a tensor or a dict of tensors.
    """
    limit = max_input_bytes()
    suffix = path.suffix.lower()
    chosen = made = None
    if suffix in (".pt", ".pth"):
        arr, chosen, made = _load_torch(path, role, name, option, limit)
    elif suffix == ".npz":
        arr, chosen = _load_npz(path, role, name, option, limit)
    else:
        if name is not None:
            raise UsageError(f"{role}: {_show(path)} is a single .npy array; drop {option}")
        arr = _load_npy(path, role, limit)
    arr, made_here = _to_float(arr, role, path)
    return arr, chosen, made or made_here


def load_array(path: Path, role: str, name: str | None, option: str):
    """Read one array from ``path`` as a float16/float32/float64 numpy array; returns ``(array, chosen_name)``
    (see :func:`read_input`, which also says the dtype the values were made in)."""
    arr, chosen, _ = read_input(path, role, name, option)
    return arr, chosen


STORED_K: dict[str, float] = {}  # path -> the curvature parameter a .pt dict or .npz stored as "k"


def _remember_k(path: Path, value: Any) -> None:
    """Keep a scalar ``k`` stored beside the arrays (a number or a 0-d/1-element tensor or array)."""
    if value is None:
        return
    try:
        kf = float(value.item() if hasattr(value, "item") else value)
    except Exception:  # a meta or sparse tensor, a string, ...: not a k
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
        shown = ", ".join(f"{_show(p)}: k = {v:g}" for p, v in found.items())
        raise UsageError(f"the input files store different curvature parameters k ({shown}); pass --k")
    if values:
        kf = values.pop()
        return kf, f"using k = {kf:g} stored in {_show(', '.join(sorted(set(found))))} (pass --k to override)"
    return 1.0, ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _native(arr):
    """``arr`` in the native byte order of the same precision (a big-endian float32 stays float32)."""
    if arr.dtype.byteorder not in ("=", "|") and not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _to_float(arr: Any, role: str, path: Path):
    """``(array, made_in)``: float16/float32/float64 in native byte order, C-contiguous, 0-d kept 0-d."""
    import numpy as np

    arr = _native(np.asarray(arr))
    if arr.dtype.kind in "iub":
        raise UsageError(f"{role}: {_show(path)} holds integers (dtype {arr.dtype}); expected float32 or float64 coordinates")
    if arr.dtype.kind != "f":
        raise UsageError(
            f"{role}: {_show(path)} holds an array of dtype {arr.dtype}; expected float32 or float64 coordinates"
        )
    made = arr.dtype.name
    if arr.dtype not in (np.float16, np.float32, np.float64):
        arr = arr.astype(np.float64)  # long double: rounded to float64, checked at float64's tolerance
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        arr = np.array(arr, order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr, made


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
    made_in: Sequence[str | None] = (None, None),
) -> Inputs:
    """Check ranks, axes, dimensions, finiteness, overflow (numpy) and the hyperboloid (torch).

    ``spatial``: the inputs are spatial parts, lifted with ``x_t = sqrt(|x_s|^2 + k)``;
    ``model="poincare"``: they are Poincare-ball points, mapped to the hyperboloid.
    ``made_in``: the dtypes the values of ``q`` and ``kk`` were made in, when not their own (a
    bfloat16 tensor read as float32).  Points are checked in that dtype: float32/float64 at its
    default tolerance, float16/bfloat16 at ``rtol = 8 eps`` of theirs (the arithmetic in float32 on
    the exact values); then the spatial parts are re-lifted in the compute dtype (``dtype``, or by
    default the inputs' promoted, at least float32).
    """
    import numpy as np

    if spatial and model == "poincare":
        raise UsageError("--spatial and --model poincare exclude each other: ball points are not spatial parts")
    if model == "poincare":
        spatial = True  # (..., N, d) arrays: the same shape checks
    try:
        kf = validate.positive(k, "--k", " (<x,x>_L = -k, curvature -1/k)")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    q, kk = _native(np.asarray(q)), _native(np.asarray(kk))
    made = [m or a.dtype.name for m, a in zip(made_in, (q, kk))]
    for a, role in ((q, "QUERIES"), (kk, "KEYS")):
        if a.dtype.kind != "f":
            raise UsageError(f"{role}: an array of dtype {a.dtype}; expected float16, float32 or float64 coordinates")
    q, kk = (a if a.dtype in (np.float16, np.float32, np.float64) else a.astype(np.float64) for a in (q, kk))
    want = "(..., N, d)" if spatial else "(..., N, d + 1)"
    for a, role in ((q, "QUERIES"), (kk, "KEYS")):
        if a.ndim < 2:
            got = "rank 0 (a scalar)" if a.ndim == 0 else f"rank {a.ndim} shape {a.shape}"
            raise UsageError(
                f"{role}: expected shape {want} with N rows{'' if spatial else ', time coordinate first'}, got {got}"
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
    at_least_32 = [np.promote_types(a.dtype, np.float32) for a in (q, kk)]  # half precision is computed in float32
    target = np.dtype(dtype) if dtype != "auto" else np.promote_types(*at_least_32)
    sq_q = _overflow(q, "QUERIES", spatial, kf, target)
    sq_k = _overflow(kk, "KEYS", spatial, kf, target)
    if math.sqrt(sq_q) * math.sqrt(sq_k) * (q.shape[-1] + 3) >= float(np.finfo(target).max):
        raise UsageError(
            f"QUERIES and KEYS: norms too large for {target} attention scores "
            f"(largest |q| = {math.sqrt(sq_q):.3g}, |k| = {math.sqrt(sq_k):.3g}; their product overflows); "
            "pass --dtype float64"
        )
    q = q if q.flags.c_contiguous and q.flags.writeable else np.array(q, order="C")
    kk = kk if kk.flags.c_contiguous and kk.flags.writeable else np.array(kk, order="C")

    import torch

    from hypviz.lorentz import check_k, check_points, from_poincare, lift

    kf = check_k(kf)
    tdtype = getattr(torch, str(target))
    points = []
    try:
        for a, role, m in ((q, "QUERIES", made[0]), (kk, "KEYS", made[1])):
            t = torch.from_numpy(a)
            if model == "poincare" or spatial:
                t = from_poincare(t.to(tdtype), kf) if model == "poincare" else lift(t.to(tdtype), kf)
                points.append(check_points(t, kf, name=role))  # made here, in the compute dtype
            elif m in HALF:
                # the exact half-precision values, in float32 arithmetic (float16 squares overflow beyond |x| = 256),
                # at the tolerance of the dtype they were made in; then re-lifted in the compute dtype
                rtol = HALF_RTOL_EPS * torch.finfo(getattr(torch, m)).eps
                t = check_points(t.to(torch.float32), kf, rtol=rtol, name=f"{role} ({m})")
                points.append(lift(t[..., 1:].to(tdtype), kf))
            else:
                try:
                    t = check_points(t, kf, name=f"{role} ({m})")  # in the dtype they came in, with its tolerance
                except ValueError:
                    # float64 values that are all float32 numbers were made in float32 (e.g. x.double()):
                    # check them there, then re-lift in the compute dtype
                    if m != "float64" or not bool((t.to(torch.float32).to(torch.float64) == t).all()):
                        raise
                    t = check_points(t.to(torch.float32), kf, name=f"{role} (float32 values stored as float64)")
                    points.append(lift(t[..., 1:].to(tdtype), kf))
                    continue
                # another dtype: keep the spatial parts, recompute the time coordinate there (on <x,x>_L = -k to its rounding)
                points.append(t if t.dtype == tdtype else lift(t[..., 1:].to(tdtype), kf))
    except ValueError as exc:
        text = _one_line(exc)
        generic = text.endswith("lift spatial parts with hypviz.lorentz.lift(x_s, k)")
        if generic:
            text = text[: -len("lift spatial parts with hypviz.lorentz.lift(x_s, k)")].rstrip("; ")
        hint = "; pass the spatial parts only with --spatial, or Poincare-ball points with --model poincare" if generic and not spatial else ""
        raise UsageError(f"{text}{hint}") from None
    tq, tk = points
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
    rows: int | None = None  # statistics on a uniform sample of the query rows (None: every row)
    seed: int = 0


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
    q, qname, qmade = read_input(qpath, "QUERIES", args.queries_key, "--queries-key")
    kk, kname, kmade = read_input(kpath, "KEYS", args.keys_key, "--keys-key")
    described = {  # names as they may be shown: undecodable bytes and control characters escaped
        "queries": {"path": _show(qpath), "array": _show(qname) if qname is not None else None,
                    "shape": list(q.shape), "dtype": qmade},
        "keys": {"path": _show(kpath), "array": _show(kname) if kname is not None else None,
                 "shape": list(kk.shape), "dtype": kmade},
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
        made_in=(qmade, kmade),
    )
    if note:
        print(f"hypviz compare: {note}")
    device = _resolve_device(args.device)
    inputs.title = f"{_show(qpath.name)} vs {_show(kpath.name)}" if qpath != kpath else _show(qpath.name)
    settings = Settings(
        kinds=args.kinds,
        reference=args.reference,
        temperature=args.temperature,
        device=str(device),
        sample_rows=args.sample_rows,
        rows=args.rows,
        seed=args.seed,
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
            f"as the only argument; {_show(path.name)} is not one"
        )
    out = check_out(args.out, args.force, (path,))
    _check_device(args.device)
    size, limit = os.stat(path).st_size, max_input_bytes()
    if size > limit:
        raise _too_big("CAPTURE", f"the file {_show(path)}", size, limit)
    from hypviz import capture, model_report

    try:
        records = capture.load(path)
    except ValueError as exc:
        text = _one_line(exc)
        raise UsageError(
            f"KEYS is missing and {_show(path)} is not a readable capture file ({text}); pass a KEYS file"
        ) from None
    device = _resolve_device(args.device)
    results = model_report.analyse(records, temperature=args.temperature, device=str(device), progress=args.progress)
    files = _produce(out, args.force, lambda tmp: model_report.write(results, tmp, {"path": _show(path), "layers": len(records)}))
    print(model_report.summary(results, Path(_show(out)), files))
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
        rows=args.rows,
        seed=args.seed,
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

    def write(tmp: Path) -> list[str]:
        if save_inputs:
            import numpy as np

            np.savez(
                tmp / "inputs.npz",
                queries=inputs.queries.detach().cpu().numpy(),
                keys=inputs.keys.detach().cpu().numpy(),
            )
        return report.write(result, tmp, options=extra_options or {})

    files = _produce(out, force, write)
    print(report.summary(result, Path(_show(out)), files, show_inputs=save_inputs))
    return 0


# --------------------------------------------------------------------------- #
# entry point
# --------------------------------------------------------------------------- #
def _interrupted(prog: str, signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if _RUN.published is not None:
        return f"{prog}: interrupted after the new report was published in {_show(_RUN.published)} ({name})"
    return f"{prog}: interrupted; nothing written ({name})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hypviz`` command on ``argv`` (default ``sys.argv[1:]``) and return its exit code.

    The exit code is 0 on success (also for ``--help`` and ``--version``), 2 for bad input or usage
    (one line on stderr), 1 for an internal error (one line; with ``HYPVIZ_DEBUG=1`` the exception
    propagates instead, with its traceback), 128 + N when stopped by signal N.  Called as the program (``argv`` None:
    the console script, ``python -m hypviz.cli``), an interrupted run ends the process with
    ``os._exit`` right after its one line (streams flushed), so that no atexit handler (torch's
    among them) can print a traceback on the way out.
    """
    debug = os.environ.get("HYPVIZ_DEBUG", "") not in ("", "0")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0): a code, also when called in process
        return exc.code if isinstance(exc.code, int) else 2
    prog = f"hypviz {args.command}"
    _RUN.reset()
    previous: dict[int, Any] = {}
    try:
        code, interrupted = _call(args, prog, debug, previous)
    finally:
        _restore_handlers(previous)
    if interrupted and argv is None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)
    return code


def _call(args: argparse.Namespace, prog: str, debug: bool, previous: dict[int, Any]) -> tuple[int, bool]:
    """``args.func(args)`` with our signal handlers: ``(exit code, interrupted)``, one line on stderr on failure.

    An interruption wins over whatever exception it turned into on the way (an import interrupted
    by a signal raises ``ImportError``, a library may wrap it) and over a normal return.
    """
    try:
        try:
            _install_handlers(previous)
            with warnings.catch_warnings():
                if not debug:
                    warnings.simplefilter("ignore")
                code = args.func(args)
        finally:
            _RUN.done = True  # from here on signals are only counted: what is reported below is what is on disk
    except BaseException as exc:
        signum = getattr(exc, "signum", None) or _RUN.signal
        if signum is None and isinstance(exc, KeyboardInterrupt):
            signum = signal.SIGINT
        if signum is not None:
            print(_interrupted(prog, int(signum)), file=sys.stderr)
            return 128 + int(signum), True
        if isinstance(exc, UsageError):
            print(f"{prog}: error: {_show(_one_line(exc))}", file=sys.stderr)
            return 2, False
        if not isinstance(exc, Exception) or debug:
            raise
        # an internal error: one line unless HYPVIZ_DEBUG is set
        print(
            f"{prog}: internal error: {type(exc).__name__}: {_show(_one_line(exc)[:500])} "
            "(nothing written; set HYPVIZ_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1, False
    if _RUN.signal is not None:  # interrupted, the exception swallowed on the way: still say so
        print(_interrupted(prog, _RUN.signal), file=sys.stderr)
        return 128 + _RUN.signal, True
    return code, False


if __name__ == "__main__":
    sys.exit(main())
