r"""The ``hypviz`` command: compare the attention maps of your own queries and keys, and write a report.

::

    hypviz compare QUERIES KEYS [--spatial | --model lorentz|poincare] [--k K] [--heads-axis AXIS]
                   [--kinds spatial,focused] [--reference distance] [--temperature T]
                   [--power P] [--norm-scale S] [--features D] [--rf-seed SEED] [--option NAME=VALUE ...]
                   [--dtype auto|float32|float64] [--queries-key NAME] [--keys-key NAME] [--device auto|cpu|cuda|cuda:INDEX]
                   [--sample-rows N] [--rows R] [--seed SEED] [--[no-]progress] [--out DIR] [--force]
    hypviz compare CAPTURE.pt [--temperature T] [--device ...] [--[no-]progress] [--out DIR] [--force]
    hypviz demo [--device ...] [--sample-rows N] [--rows R] [--seed SEED] [--[no-]progress] [--out DIR] [--force]

The second form reads a file written by :mod:`hypviz.capture` and reports on every attention
layer of the model (:mod:`hypviz.reports.model_report`); of the options above only those shown apply to it.
Every form takes ``--plugin MODULE`` (repeatable, before or after the sub-command): the module is imported before
the options are read, so the kinds, kernels and capture readers it registers are known (a capture file made with a
reader of another package names that module; without it the command says so, exit code 2); the entry points of
groups ``hypviz.kinds``, ``hypviz.kernels`` and ``hypviz.readers`` are loaded first, once
(:mod:`hypviz.base.plugins`).  A plugin that fails to load is one line, exit code 2.
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
the time coordinate is then recomputed from the spatial parts in the compute dtype.  Inputs must be regular files
(a FIFO, device or socket is refused, never read).  What a file may make hypviz read is bounded, each limit set by an environment
variable that its one-line error names: ``HYPVIZ_MAX_INPUT_BYTES`` (default 2 GiB = 2147483648; a unit may follow the
number: ``512MiB``, ``2GiB``, ``2GB``, :func:`hypviz.base.messages.byte_count`) bounds
what the arrays take once dense (elements x item size): for ``.npy``/``.npz`` the array read, from its
``.npy`` header before anything is decompressed or loaded; for ``.pt``/``.pth`` (inputs and capture files)
the file, what its zip members decompress to (before loading) and every tensor it holds, a broadcast
(stride-0) one at its full size (before any is made dense).  ``HYPVIZ_MAX_LAYERS`` (default 64) bounds the
layer records of a capture file (its figure is 3.4 inches a layer), ``HYPVIZ_MAX_NAME_CHARS`` (default
256) the names and strings read from one.  The norm checks go through the points block by block (no
float64 copy of the whole input).  hypviz never unpickles anything but tensors, and never relays
torch's advice to load a refused file with ``weights_only=False``.

Every kind of ``--kinds`` is compared with the ``--reference`` kind by
:func:`hypviz.attention.compare`, each map read against its distance from the uniform row, with a
verdict (one of :data:`~hypviz.attention.comparison.result.VERDICTS`, by the rule
:func:`hypviz.attention.verdict_rule` states) per comparison and per head.  The kinds are those
that :func:`hypviz.attention.compare` takes, read from the registry :mod:`hypviz.base.kinds`
(:func:`~hypviz.base.kinds.comparable`; ``hypviz compare --help`` lists each with its one-line
description): among them ``spatial`` (the question-and-answer thread's softmax of
:math:`q_s \cdot \kappa_s`), ``distance`` (Hypformer's full attention at ``--temperature``
:math:`k \cdot \mathrm{scale} / 2`), ``focused`` (Hypformer's linear map, with ``--power`` and
``--norm-scale``) and ``distance_rf`` (``--features`` positive random features drawn from ``--rf-seed``).
``--option NAME=VALUE`` (repeatable) gives any option a compared kind's kernel declares
(:attr:`hypviz.attention.Kernel.options`; a registered kernel's own too): the value is read as an integer, else a
number, else the text, and checked by that kernel; a name no compared kind reads is refused in one line naming those
they read.  The flags ``--power``, ``--norm-scale``, ``--features`` and ``--rf-seed`` are the built-in kernels'
options ``power``, ``norm_scale``, ``features`` and ``seed`` by the same route, and ``metrics.json`` records the options
each comparison's kinds read (``setup.options``, and each comparison's ``plan``).  The
output folder gets ``report.html`` (self-contained, opens from disk with no network),
``metrics.json``, ``rows.npz`` (per-row statistics) and PNG figures (and, for the demo,
``inputs.npz``).

Publishing.  ``--out`` is compared on resolved paths (``os.path.realpath`` of its parent, then device
and inode): ``--force`` refuses to replace a folder that holds an input or the current folder, whatever
symbolic links, ``..`` or second names lead to them.  The report is written into a temporary folder
``.NAME.tmp-XXXXXXXX`` beside ``--out`` (NAME cut, ``.NAM~.tmp-XXXXXXXX``, where the whole would exceed the
file system's limits, so any ``--out`` the file system allows works) and locked (``flock``) while the run
lasts; such folders of the same ``--out`` that no run holds any more (killed runs') are removed by the next
run, and said on stderr.  It is then put in place in one step: renamed with ``renameat2(RENAME_NOREPLACE)``, or, replacing an
existing report with ``--force``, exchanged with it by ``renameat2(RENAME_EXCHANGE)`` (Linux,
called through ctypes: glibc's ``renameat2`` or the raw system call) and the old folder, now at the
temporary name, removed.  So at every instant ``--out`` holds the complete old report or the
complete new one, even under SIGKILL.  Where ``renameat2`` is unavailable (another OS, an old
kernel, a file system without the flag) the old folder is moved into a new folder
``.NAME.old-XXXXXXXX`` and the new one renamed in: two renames with signals deferred across them
(a SIGKILL between them leaves the old report in ``.NAME.old-*``, which later runs report and never
remove).  An old report that cannot be removed after the swap is said on stderr (the run still
succeeds).  SIGTERM, SIGHUP and SIGINT (while Python's default SIGINT handler is installed) stop a run
with one line saying whether the new report was published (and then that it is complete), exit code
128 + the signal's number, and the temporary folder removed; also after the command has finished, up to
the process's exit.  After publishing, a stdout that fails (closed by ``| head``, ``>/dev/full``, no
stdout) does not fail the run: exit code 0 and one line on stderr saying that the report is complete
and its summary could not be printed.
(``HYPVIZ_TEST_PAUSE_AT=STAGE[:SIGNAL]``, for the tests only, makes the command send itself
SIGTERM, or SIGNAL, at one stage: ``tmp``, ``written``, ``swapped``, ``cleaned``, ``finished``.)

Exit codes: 0 success; 2 bad input or usage, or an output the file system refuses (disk full,
read-only, no permission), or not enough memory: one line on stderr naming the problem, nothing written; 1 unexpected
internal error (one line; ``HYPVIZ_DEBUG=1`` shows the traceback; after publishing it says the report is
complete); 128 + N when stopped by signal N.  A report that is complete although its summary could not be
printed is a success (0): the report is the command's output, the summary a copy of its headline.
File names, and every string read from a file (array and layer names), are shown with undecodable
bytes, control characters and lone surrogates escaped (``\xff``, ``\x1b``, ``\ud800``), in messages and
in the report.  Heavy imports (torch, matplotlib, plotly) happen after the cheap
checks.

This module holds the argument parser, the commands and :func:`main`, and nothing else: each command checks its
options, makes one call into :mod:`hypviz.reports.runs` (:func:`~hypviz.reports.runs.compare_report`,
:func:`~hypviz.reports.runs.capture_report`, :func:`~hypviz.reports.runs.demo_report`), which reads the files,
analyses, writes and publishes the report, and prints the lines it returns; :func:`main` turns what happened into
the exit code and the one-line messages, and handles the signals (:mod:`hypviz.reports.publishing`).  The kinds
of ``--kinds`` and ``--reference``, with their one-line descriptions, are read from the registry
:mod:`hypviz.base.kinds` (free of torch, like ``--help``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from hypviz.base import kinds, plugins, validate
from hypviz.base.messages import UsageError, env_limit, env_switch, one_line, show
from hypviz.reports import publishing, runs
from hypviz.reports.inputs import DEMO_NORMS, Settings
from hypviz.reports.publishing import RUN, interrupted_message, say

__all__ = ["main", "build_parser"]

#: The kinds the command compares by default (``--kinds``) and its default ``--reference``.
DEFAULT_KINDS = ("spatial", "focused")
DEFAULT_REFERENCE = "distance"


# --------------------------------------------------------------------------- #
# argument parsing
# --------------------------------------------------------------------------- #
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {show(one_line(message))} (see '{self.prog} --help')\n")


def _number(name: str, check: Any, hint: str = ""):
    """An option's parser: its text read as a float, then checked by the API's own rule (``check``, from
    :mod:`hypviz.base.validate`), so the command and the functions take the same numbers; text that spells no
    number is refused as the string it is."""

    def parse(text: str) -> float:
        try:
            value: Any = float(text)
        except ValueError:
            value = text
        try:
            return check(value, name, hint=hint)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _positive(name: str):
    if name == "--temperature":
        return _number(name, validate.temperature)
    return _number(name, validate.positive, " (<x,x>_L = -k, curvature -1/k)" if name == "--k" else "")


def _finite_number(name: str):
    return _number(name, validate.number)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _rows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 (compare needs two rows to sample), got {text!r}")
    return value


SEED_MAX = validate.SEED_MAX  # torch.Generator.manual_seed takes 0 .. 2**64 - 1


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= SEED_MAX:
        shown = text if len(text) <= 30 else text[:30] + "..."
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**64 - 1 = {SEED_MAX}, got {shown!r}")
    return value


FEATURES_MAX = validate.FEATURES_MAX  # --features: the API's maximum, one constant


def _features(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= FEATURES_MAX:
        shown = text if len(text) <= 30 else text[:30] + "..."
        raise argparse.ArgumentTypeError(
            f"expected an integer from 1 to 2**{FEATURES_MAX.bit_length() - 1} = {FEATURES_MAX} "
            f"(random features of each query and key), got {shown!r}"
        )
    return value


def _option(text: str) -> tuple[str, Any]:
    """``--option NAME=VALUE``: a kernel option's name and its value, read as an integer, else a number, else the text
    (the kernel's own check decides, in the words of the API)."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip().isidentifier():
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (an option of a kernel, e.g. power=3), got {shown!r}")
    for read in (int, float):
        try:
            return name.strip(), read(value)
        except ValueError:
            pass
    return name.strip(), value


def _kinds(text: str) -> list[str]:
    """``--kinds``: a comma-separated list of the kinds :func:`hypviz.attention.compare` takes (the registry's)."""
    allowed = kinds.comparable()
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in chosen if t not in allowed]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(allowed)}, got {text!r}"
        )
    return list(dict.fromkeys(chosen))


def _kinds_help() -> str:
    """The kinds ``--kinds`` and ``--reference`` take, each with its one line (:mod:`hypviz.base.kinds`)."""
    return "; ".join(f"{name}: {kinds.get(name).description}" for name in kinds.comparable()).replace("%", "%%")


def _taken_by(option: str) -> str:
    """The comparable kinds that read ``option`` (:attr:`hypviz.base.kinds.Kind.options`), for the options' help."""
    return ", ".join(n for n in kinds.comparable() if option in kinds.get(n).options) or "no kind"


_PLUGIN_HELP = ("import MODULE first, before the options are read (its import registers kinds, kernels or capture "
                "readers: what a capture file made with a reader of another package needs); repeatable. Installed "
                "entry points of groups hypviz.kinds, hypviz.kernels and hypviz.readers load by themselves")


def _plugin_option(p: argparse.ArgumentParser, top: bool = False) -> None:
    # before or after the sub-command: every --plugin of the command line is read before parsing (see main)
    p.add_argument("--plugin", action="append", metavar="MODULE", default=[] if top else argparse.SUPPRESS,
                   help=_PLUGIN_HELP)


def _plugin_names(argv: Sequence[str]) -> list[str]:
    """The modules of ``--plugin MODULE`` / ``--plugin=MODULE`` in ``argv`` (up to ``--``): imported before the parser
    is built, so that its ``--kinds``, ``--reference`` and ``--help`` know their kinds."""
    names, it = [], iter(argv)
    for token in it:
        if token == "--":
            break
        if token == "--plugin":
            value = next(it, None)
            if value is not None:
                names.append(value)
        elif token.startswith("--plugin="):
            names.append(token.partition("=")[2])
    return names


def _common(p: argparse.ArgumentParser, default_out: str) -> None:
    _plugin_option(p)
    p.add_argument("--out", type=Path, default=Path(default_out), help=f"output folder (default: {default_out})")
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists (a hypviz report)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda or cuda:INDEX")
    p.add_argument(
        "--sample-rows", type=_count, default=64, metavar="N",
        help="query rows drawn in the heatmaps (default 64); does not change the statistics (see --rows)",
    )
    p.add_argument(
        "--rows",
        type=_rows,
        default=None,
        metavar="R",
        help="compute the statistics on R >= 2 query rows per head drawn uniformly (seeded, --seed) against all keys, "
        "with 95%% confidence intervals on every mean: for very large N (default: every row)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the --rows sample, 0 to 2**64 - 1 (default 0)")
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
    _plugin_option(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{compare,demo}")

    _compare_parser(sub)
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


def _compare_parser(sub: Any) -> None:
    """The sub-command ``compare``: its arguments, each checked by its type (see :func:`build_parser`)."""
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
            "(default 2147483648 = 2 GiB) once dense (elements x item size, before anything is expanded or decompressed); "
            "HYPVIZ_MAX_LAYERS (default 64) and HYPVIZ_MAX_NAME_CHARS (default 256) bound capture files. "
            "The report is written beside --out and put in place in one step (--force: swapped with the old one "
            "by renameat2 RENAME_EXCHANGE where available). Exit codes: 0 ok, 2 bad input (or the disk refuses "
            "the output), 1 internal error (HYPVIZ_DEBUG=1 shows the traceback), 128+N on signal N; 0 with a line on "
            "stderr when only the summary could not be printed (the report is complete)."
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
    _kind_arguments(c)
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


def _kind_arguments(c: argparse.ArgumentParser) -> None:
    """What ``compare`` compares: ``--kinds``, ``--reference``, ``--temperature`` and the kernels' options (the flags of
    the built-in ones and ``--option NAME=VALUE``)."""
    c.add_argument(
        "--kinds",
        type=_kinds,
        default=list(DEFAULT_KINDS),
        help=f"kinds compared with the reference (default {','.join(DEFAULT_KINDS)}), from: {_kinds_help()}",
    )
    c.add_argument("--reference", choices=kinds.comparable(), default=DEFAULT_REFERENCE,
                   help=f"the reference kind (default {DEFAULT_REFERENCE}; one of the kinds of --kinds)")
    c.add_argument(
        "--temperature",
        type=_positive("--temperature"),
        default=None,
        metavar="T",
        help="softmax temperature (default sqrt(d)); Hypformer's full attention is distance at k*scale/2",
    )
    c.add_argument(
        "--power", type=_positive("--power"), default=None, metavar="P", help=f"power_k of {_taken_by('power')} (default 2)"
    )
    c.add_argument(
        "--norm-scale", type=_finite_number("--norm-scale"), default=None, metavar="S",
        help=f"norm_scale of {_taken_by('norm_scale')} (default 1)",
    )
    c.add_argument(
        "--features", type=_features, default=None, metavar="D",
        help=f"random features of {_taken_by('features')}, linear-time distance attention, 1 to {FEATURES_MAX} (default 256)"
    )
    c.add_argument("--rf-seed", type=_seed, default=None, help=f"seed of the random features of {_taken_by('seed')} (default 0)")
    c.add_argument(
        "--option", type=_option, action="append", default=None, metavar="NAME=VALUE",
        help="an option of a compared kind's kernel, checked by that kernel (power=3, or a registered kernel's own); "
        "repeatable, the last of a name counts",
    )


# --------------------------------------------------------------------------- #
# the commands
# --------------------------------------------------------------------------- #
_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


def _check_device(device: str) -> str:
    if not _DEVICE.match(device):
        raise UsageError(f"--device must be auto, cpu, cuda or cuda:INDEX, got {device!r}")
    return device


# the built-in kernels' options as flags: (flag, attribute, the option's name in Kernel.options)
_KIND_OPTIONS = (("--power", "power", "power"), ("--norm-scale", "norm_scale", "norm_scale"),
                 ("--features", "features", "features"), ("--rf-seed", "rf_seed", "seed"))


def _kernel_options(args: argparse.Namespace) -> dict[str, Any]:
    """The kernels' options given, by name: the flags, then each ``--option`` (the last of a name counts).

    A flag no compared kind reads is ignored with a warning (one line on stderr); an ``--option`` no compared kind
    reads, or one given as a flag too, is a usage error naming what the compared kinds read.
    """
    compared = [args.reference, *args.kinds]
    read = list(dict.fromkeys(opt for name in compared for opt in kinds.get(name).options))
    ignored = [(flag, opt) for flag, attr, opt in _KIND_OPTIONS if getattr(args, attr) is not None and opt not in read]
    if ignored:
        readers = sorted({n for _, opt in ignored for n in kinds.comparable() if opt in kinds.get(n).options})
        flags = ", ".join(flag for flag, _ in ignored)
        print(
            f"hypviz compare: warning: {flags} ignored: no compared kind reads {'it' if len(ignored) == 1 else 'them'} "
            f"(compared: {', '.join(compared)}; read by {', '.join(readers) or 'no kind'}: "
            f"add {'it' if len(readers) == 1 else 'one'} to --kinds)",
            file=sys.stderr,
        )
    given = {opt: getattr(args, attr) for _, attr, opt in _KIND_OPTIONS if getattr(args, attr) is not None}
    given_as = {opt: flag for flag, _, opt in _KIND_OPTIONS if opt in given}
    options: dict[str, Any] = {}
    for name, value in args.option or []:
        if name not in read:
            raise UsageError(f"--option {name}: no compared kind reads it (the compared kinds read: "
                             f"{', '.join(read) or 'no option'}; compared: {', '.join(compared)})")
        if name in given_as:
            raise UsageError(f"--option {name}: given as {given_as[name]} too; give it once")
        options[name] = value
    return {**given, **options}


def cmd_compare(args: argparse.Namespace) -> int:
    """``hypviz compare QUERIES KEYS``: the options checked, then :func:`hypviz.reports.runs.compare_report`."""
    if args.keys is None:
        return cmd_model(args)
    if args.reference in args.kinds:
        args.kinds.remove(args.reference)
    if not args.kinds:
        raise UsageError(f"--kinds has nothing to compare with the reference {args.reference!r}; add another kind")
    options = _kernel_options(args)
    _check_device(args.device)
    settings = Settings(kinds=args.kinds, reference=args.reference, temperature=args.temperature, device=args.device,
                        sample_rows=args.sample_rows, rows=args.rows, seed=args.seed, progress=args.progress,
                        command="compare", options=options)
    published = runs.compare_report(
        args.queries, args.keys, args.out, settings, force=args.force, k=args.k, spatial=args.spatial,
        model=args.model, heads_axis=args.heads_axis, dtype=args.dtype, queries_key=args.queries_key,
        keys_key=args.keys_key,
    )
    say("\n".join(published.lines))
    return 0


# options of `hypviz compare QUERIES KEYS` that a capture file does not take: (option, attribute, default)
_NOT_FOR_CAPTURES = (("--k", "k", None), ("--kinds", "kinds", list(DEFAULT_KINDS)),
                     ("--reference", "reference", DEFAULT_REFERENCE), ("--power", "power", None),
                     ("--norm-scale", "norm_scale", None), ("--spatial", "spatial", False),
                     ("--model", "model", "lorentz"), ("--heads-axis", "heads_axis", None), ("--dtype", "dtype", "auto"),
                     ("--queries-key", "queries_key", None), ("--keys-key", "keys_key", None),
                     ("--features", "features", None), ("--rf-seed", "rf_seed", None), ("--option", "option", None))


def cmd_model(args: argparse.Namespace) -> int:
    """``hypviz compare CAPTURE.pt``: the options checked, then :func:`hypviz.reports.runs.capture_report`."""
    given = [opt for opt, attr, default in _NOT_FOR_CAPTURES if getattr(args, attr, default) != default]
    if given:
        raise UsageError(
            f"{', '.join(given)}: not for a capture file, whose layers record their own k, kind, temperature, power "
            f"and norm_scale; drop {'it' if len(given) == 1 else 'them'} (a capture file takes --temperature, "
            "--device, --progress, --out, --force)"
        )
    _check_device(args.device)
    published = runs.capture_report(args.queries, args.out, force=args.force, temperature=args.temperature,
                                    device=args.device, progress=args.progress)
    say("\n".join(published.lines))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``hypviz demo``: the options checked, then :func:`hypviz.reports.runs.demo_report`."""
    _check_device(args.device)
    published = runs.demo_report(args.out, force=args.force, device=args.device, sample_rows=args.sample_rows,
                                 rows=args.rows, seed=args.seed, progress=args.progress)
    say("\n".join(published.lines))
    return 0


# --------------------------------------------------------------------------- #
# entry point
# --------------------------------------------------------------------------- #
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
    given = list(sys.argv[1:] if argv is None else argv)
    if not _load_plugins(_plugin_names(given)):
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except SystemExit as exc:  # usage errors (2), --help and --version (0): a code, also when called in process
        return exc.code if isinstance(exc.code, int) else 2
    if not _load_plugins(args.plugin):  # an abbreviated --plug MODULE, found by the parser only
        return 2
    prog = f"hypviz {args.command}"
    RUN.reset()
    RUN.prog = prog
    previous: dict[int, Any] = {}
    try:
        code, interrupted = _call(args, prog, debug, previous)
        if not interrupted:
            publishing.stage("finished")
        if argv is None and not interrupted:
            # the exit handlers (atexit) run now, ours still installed: a signal meanwhile is noted, then acted on
            import atexit

            run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
            if run_exitfuncs is not None:
                run_exitfuncs()
        if argv is None:
            _block_signals()  # from here to os._exit a signal stays pending, never acted on half-way
        if RUN.late is not None and not interrupted:  # a signal after the command had finished (e.g. just after
            print(interrupted_message(prog, RUN.late), file=sys.stderr)  # publishing): its exit code, and what is on disk
            code, interrupted = 128 + RUN.late, True
    finally:
        if argv is not None:
            publishing.restore_handlers(previous)
    if argv is None:
        # the program ends here, streams flushed, with os._exit: no exit handler runs after an interruption (torch's
        # could print a traceback), and no signal can end the process on the way out without its line and code
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)
    return code


def _load_plugins(modules: Sequence[str]) -> bool:
    """The plugins' entry points (once a process), then ``modules`` (``--plugin``); False after one line on stderr
    naming the plugin that failed to load (exit code 2)."""
    try:
        plugins.load_entry_points()
        for name in modules:
            plugins.load_module(name)
    except plugins.PluginError as exc:
        print(f"hypviz: error: {show(one_line(exc))}", file=sys.stderr)
        return False
    return True


def _check_environment() -> None:
    """hypviz's settings read from the environment, checked before any work: a bad one is a usage error (exit 2, one
    line naming the variable), not an internal error half-way through."""
    env_limit("HYPVIZ_BLOCK_BYTES", 1, "bytes")
    env_switch("HYPVIZ_FUSED", "the eager statistics only", "the fused kernel where it runs")


def _block_signals() -> None:
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
    except (AttributeError, ValueError, OSError):
        pass


def _call(args: argparse.Namespace, prog: str, debug: bool, previous: dict[int, Any]) -> tuple[int, bool]:
    """``args.func(args)`` with our signal handlers: ``(exit code, interrupted)``, one line on stderr on failure.

    An interruption wins over whatever exception it turned into on the way (an import interrupted
    by a signal raises ``ImportError``, a library may wrap it) and over a normal return.
    """
    try:
        try:
            publishing.install_handlers(previous)
            with warnings.catch_warnings():
                if not debug:
                    warnings.simplefilter("ignore")
                _check_environment()
                code = args.func(args)
        finally:
            RUN.done = True  # from here on signals are only counted: what is reported below is what is on disk
    except BaseException as exc:
        signum = getattr(exc, "signum", None) or RUN.signal
        if signum is None and isinstance(exc, KeyboardInterrupt):
            signum = signal.SIGINT
        if signum is not None:
            print(interrupted_message(prog, int(signum)), file=sys.stderr)
            return 128 + int(signum), True
        if isinstance(exc, UsageError):
            print(f"{prog}: error: {show(one_line(exc))}", file=sys.stderr)
            return 2, False
        out_of_memory = isinstance(exc, MemoryError) or (
            isinstance(exc, RuntimeError) and re.search(r"can't allocate memory|out of memory", str(exc), re.I)
        )  # torch's allocators raise RuntimeError ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory")
        if out_of_memory and not debug and RUN.published is None:
            # the machine's limit, not hypviz's (those are checked first): say so in one line, like a full disk
            detail = show(one_line(exc)[:200]) or "no detail"
            features = getattr(args, "features", None)  # given: the random features may be what did not fit
            fewer = f"fewer --features (now {features}), " if features is not None else ""
            print(
                f"{prog}: error: not enough memory ({detail}); nothing written; use {fewer}--rows R for fewer query "
                f"rows, smaller inputs, or a machine (or ulimit) with more memory",
                file=sys.stderr,
            )
            return 2, False
        if not isinstance(exc, Exception) or debug:
            raise
        # an internal error: one line unless HYPVIZ_DEBUG is set
        done = "nothing written" if RUN.published is None else f"the report in {show(RUN.published)} is complete"
        print(
            f"{prog}: internal error: {type(exc).__name__}: {show(one_line(exc)[:500])} "
            f"({done}; set HYPVIZ_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1, False
    if RUN.signal is not None:  # interrupted, the exception swallowed on the way: still say so
        print(interrupted_message(prog, RUN.signal), file=sys.stderr)
        return 128 + RUN.signal, True
    return code, False


if __name__ == "__main__":
    sys.exit(main())
