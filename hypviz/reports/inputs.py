r"""What ``hypviz compare`` and ``hypviz demo`` compute on: checked points (:class:`Inputs`) and the run's settings
(:class:`Settings`).

:func:`prepare` turns two float arrays (read by :mod:`hypviz.reports.input_files`, or given directly) into
:class:`Inputs`: torch tensors of hyperboloid points ``(*lead, N, d + 1)``, time coordinate first,
on :math:`\langle x, x\rangle_L = -k`.  It checks what is the command's own business (ranks, the
heads axis, dimensions that match, leading axes that broadcast, norms that fit the compute dtype)
and leaves the geometry to :func:`hypviz.lorentz.check_points` (finite coordinates, on the
hyperboloid, upper sheet), in the dtype the points were made in.  :func:`demo_inputs` are the
built-in inputs of ``hypviz demo``.  The reports (:mod:`hypviz.reports.point_report`) read both types; this
module imports neither torch nor numpy until :func:`prepare` runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from hypviz.base import validate
from hypviz.base.messages import UsageError, one_line

if TYPE_CHECKING:
    import torch

__all__ = ["Inputs", "Settings", "prepare", "demo_inputs", "DEMO_NORMS", "HALF_RTOL_EPS", "HALF"]

DEMO_NORMS = (0.1, 1.0, 3.0, 10.0)  # mean spatial norm of each demo head: from near-uniform maps to sharp ones
HALF_RTOL_EPS = 8  # float16/bfloat16 points are checked at rtol = 8 eps of their dtype
HALF = ("float16", "bfloat16")
_LIFT_HINT = "lift spatial parts with hypviz.lorentz.lift(x_s, k=k)"  # check_points' diagnosis when it has no better one


@dataclass
class Inputs:
    """Validated queries and keys, ``(*lead, N, d + 1)`` points (torch), and where they came from.

    Attributes
    ----------
    queries, keys : torch.Tensor
        Points on :math:`\\langle x, x\\rangle_L = -k`, time first, the heads axis (if any) in front;
        the leading axes broadcast between the two.
    k : float
        The curvature parameter.
    spatial : bool
        Whether the inputs were spatial parts (or Poincare-ball points), lifted here.
    described : dict
        ``"queries"`` / ``"keys"`` -> ``{"path", "array", "shape", "dtype"}`` as the report shows them
        (names already escaped for display).
    head_labels : list of str
        One label per flat leading index (``"0"``, ``"(1, 2)"``, or ``"all"`` without leading axes).
    title : str
        The report's title.
    """

    queries: torch.Tensor
    keys: torch.Tensor
    k: float
    spatial: bool
    described: dict[str, dict[str, Any]]
    head_labels: list[str] = field(default_factory=list)
    title: str = ""


@dataclass
class Settings:
    """How a report is computed: the command's options after parsing.

    Attributes
    ----------
    kinds : list of str
        The kinds compared with the reference (from :func:`hypviz.base.kinds.comparable`).
    reference : str
        The reference kind.
    temperature : float or None
        The softmax temperature (None: :math:`\\sqrt{d}`).
    device : str
        Where to compute (``"cpu"``, ``"cuda:0"``, ...).
    sample_rows : int
        Query rows drawn in the heatmaps.
    progress : bool or None
        Progress bar on stderr (None: only for long runs on a terminal).
    command : str
        ``"compare"`` or ``"demo"``.
    rows : int or None
        Statistics on a uniform sample of ``rows`` query rows per head (None: every row).
    seed : int
        The seed of that sample.
    options : dict
        The kernels' options given, by name (:attr:`hypviz.attention.CompareOptions.kernel_options`: ``power``,
        ``norm_scale``, ``features``, the random features' ``seed`` (default 0, not the sample's), a registered
        kernel's own); each kind takes those its kernel reads, the others their defaults.

    The settings of :func:`hypviz.attention.compare` are those of :meth:`compare_options`, one
    :class:`hypviz.attention.CompareOptions` for every comparison of the report.
    """

    kinds: list[str]
    reference: str
    temperature: float | None
    device: str
    sample_rows: int
    progress: bool | None
    command: str
    rows: int | None = None
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def compare_options(self, *, k: float) -> Any:
        """The :class:`hypviz.attention.CompareOptions` of the report's comparisons, at the inputs' curvature ``k``.

        Examples
        --------
        >>> s = Settings(kinds=["focused"], reference="distance", temperature=2.0, device="cpu", sample_rows=8,
        ...              progress=False, command="compare", options={"power": 3.0})
        >>> s.compare_options(k=1.0).kernel_options
        {'seed': 0, 'power': 3.0}
        """
        from hypviz.attention import CompareOptions

        return CompareOptions(k=k, temperature=self.temperature, rows=self.rows, seed=self.seed, device=self.device,
                              progress=self.progress, kernel_options={"seed": 0, **self.options})


# --------------------------------------------------------------------------- #
# checking and preparing the points
# --------------------------------------------------------------------------- #
_BLOCK_ELEMENTS = 1 << 22  # the checks below go through the points in blocks of about this many values (32 MiB in float64)


def _row_blocks(a):
    """``(first_row, block)`` of the ``(rows, d)`` view of ``a``, a few MiB at a time (no copy of the whole array)."""
    flat = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
    step = max(1, _BLOCK_ELEMENTS // max(1, flat.shape[-1]))
    for i in range(0, flat.shape[0], step):
        yield i, flat[i : i + step]


def _finite_parts(a, role: str) -> None:
    """Spatial parts and ball points must be finite: refused here, naming the first bad index, because
    :func:`hypviz.lorentz.lift` and ``from_poincare`` would refuse them without saying where.  (Points
    are left to :func:`hypviz.lorentz.check_points`, which names the row.)  Checked block by block."""
    import numpy as np

    for first, block in _row_blocks(a):
        ok = np.isfinite(block)
        if not ok.all():
            r, c = (int(i) for i in np.argwhere(~ok)[0])
            bad = tuple(int(i) for i in np.unravel_index((first + r) * a.shape[-1] + c, a.shape))
            what = "NaN" if np.isnan(block[r, c]) else "Inf"
            raise UsageError(f"{role} holds {what} (first non-finite value at index {bad}); expected finite coordinates")


def _overflow(a, role: str, spatial: bool, k: float, target) -> float:
    """The largest |x|^2 (Euclidean, in float64) of the finite rows; refuse norms whose squares overflow ``target``.

    Rows holding NaN or Inf are left out: :func:`hypviz.lorentz.check_points` refuses them afterwards.  The
    float64 arithmetic is done block by block, so no float64 copy of the whole input is made.
    """
    import numpy as np

    top = 0.0
    for _, block in _row_blocks(a):
        wide = block.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            sq = np.einsum("...i,...i->...", wide, wide)
        sq = sq[np.isfinite(wide).all(axis=-1)]
        if sq.size:
            top = max(top, float(sq.max()))
    top += k if spatial else 0.0
    big = float(np.finfo(target).max)
    if not top < big:
        norm = math.sqrt(top) if math.isfinite(top) else math.inf
        raise UsageError(
            f"{role}: norms overflow {target} (largest |x| = {norm:.3g}, its square exceeds "
            f"{big:.3g}); save the tensors as float64 or pass --dtype float64"
        )
    return top


def _check_layout(q, kk, spatial: bool, heads_axis: int | None):
    """Ranks, the heads axis, matching dimensions and broadcasting leading axes; returns ``(q, kk, lead)``."""
    import numpy as np

    want = "(..., N, d)" if spatial else "(..., N, d + 1)"
    for a, role in ((q, "QUERIES"), (kk, "KEYS")):
        if a.ndim < 2:
            got = "rank 0 (a scalar)" if a.ndim == 0 else f"rank {a.ndim} shape {a.shape}"
            raise UsageError(
                f"{role}: expected shape {want} with N rows{'' if spatial else ', time coordinate first'}, got {got}"
            )
        if a.size == 0:
            raise UsageError(f"{role}: empty tensor of shape {a.shape}; expected at least one point")
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
    return q, kk, lead


def _usage(exc: ValueError, role: str, spatial: bool) -> UsageError:
    """A :mod:`hypviz.lorentz` refusal as the command's one line, with the command's hint where lorentz has none."""
    text = one_line(exc)
    if text.startswith("p: "):  # from_poincare names the ball points p
        text = f"{role} (Poincare-ball points): {text[3:]}"
    hint = ""
    if text.endswith(_LIFT_HINT):
        text = text[: -len(_LIFT_HINT)].rstrip("; ")
        if not spatial:
            hint = "; pass the spatial parts only with --spatial, or Poincare-ball points with --model poincare"
    elif "with d >= 1" in text and not spatial:
        hint = "; pass --spatial for spatial parts"
    elif "holds NaN or Inf" in text:
        hint = "; expected finite coordinates"
    return UsageError(f"{text}{hint}")


def prepare(
    q,
    keys,
    *,
    k: float,
    spatial: bool,
    heads_axis: int | None,
    dtype: str,
    described: dict[str, dict[str, Any]],
    model: str = "lorentz",
    made_in: Sequence[str | None] = (None, None),
) -> Inputs:
    """Check the layout and the norms (numpy), then the points with :func:`hypviz.lorentz.check_points` (torch).

    ``spatial``: the inputs are spatial parts, lifted with ``x_t = sqrt(|x_s|^2 + k)``;
    ``model="poincare"``: they are Poincare-ball points, mapped to the hyperboloid (both are then
    checked on it).  ``made_in``: the dtypes the values of ``q`` and ``keys`` were made in, when not
    their own (a bfloat16 tensor read as float32).  Points are checked by ``check_points`` in that
    dtype: float32/float64 at its default tolerance, float16/bfloat16 at ``rtol = 8 eps`` of theirs
    (the arithmetic in float32 on the exact values), float64 values that are all float32 numbers at
    float32's; then the spatial parts are re-lifted in the compute dtype (``dtype``, or by default
    the inputs' promoted, at least float32).  Every refusal is a :class:`UsageError` of one line.
    """
    import numpy as np

    from hypviz.reports.input_files import native_order

    if spatial and model == "poincare":
        raise UsageError("--spatial and --model poincare exclude each other: ball points are not spatial parts")
    if model == "poincare":
        spatial = True  # (..., N, d) arrays: the same shape checks
    try:
        kf = validate.positive(k, "--k", " (<x,x>_L = -k, curvature -1/k)")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    q, keys = native_order(np.asarray(q)), native_order(np.asarray(keys))
    made = [m or a.dtype.name for m, a in zip(made_in, (q, keys))]
    for a, role in ((q, "QUERIES"), (keys, "KEYS")):
        if a.dtype.kind != "f":
            raise UsageError(f"{role}: an array of dtype {a.dtype}; expected float16, float32 or float64 coordinates")
    q, keys = (a if a.dtype in (np.float16, np.float32, np.float64) else a.astype(np.float64) for a in (q, keys))
    q, keys, lead = _check_layout(q, keys, spatial, heads_axis)
    if spatial:
        for a, role in ((q, "QUERIES"), (keys, "KEYS")):
            _finite_parts(a, role)
    at_least_32 = [np.promote_types(a.dtype, np.float32) for a in (q, keys)]  # half precision is computed in float32
    target = np.dtype(dtype) if dtype != "auto" else np.promote_types(*at_least_32)
    sq_q = _overflow(q, "QUERIES", spatial, kf, target)
    sq_k = _overflow(keys, "KEYS", spatial, kf, target)
    if math.sqrt(sq_q) * math.sqrt(sq_k) * (q.shape[-1] + 3) >= float(np.finfo(target).max):
        raise UsageError(
            f"QUERIES and KEYS: norms too large for {target} attention scores "
            f"(largest |q| = {math.sqrt(sq_q):.3g}, |k| = {math.sqrt(sq_k):.3g}; their product overflows); "
            "pass --dtype float64"
        )
    q = q if q.flags.c_contiguous and q.flags.writeable else np.array(q, order="C")
    keys = keys if keys.flags.c_contiguous and keys.flags.writeable else np.array(keys, order="C")
    points = [
        _points(a, role, m, kf=kf, spatial=spatial, poincare=model == "poincare", target=str(target))
        for a, role, m in ((q, "QUERIES", made[0]), (keys, "KEYS", made[1]))
    ]
    labels = [_label(i, lead) for i in range(math.prod(lead))] if len(lead) else ["all"]
    return Inputs(queries=points[0], keys=points[1], k=kf, spatial=spatial, described=described, head_labels=labels)


def _points(a, role: str, made: str, *, kf: float, spatial: bool, poincare: bool, target: str) -> torch.Tensor:
    """One checked ``(..., N, d + 1)`` tensor in the compute dtype ``target``, from the numpy array ``a``."""
    import torch

    from hypviz.lorentz import check_points, from_poincare, lift

    tdtype = getattr(torch, target)
    t = torch.from_numpy(a)
    try:
        if spatial:  # made here, in the compute dtype, and checked there
            t = from_poincare(t.to(tdtype), k=kf) if poincare else lift(t.to(tdtype), k=kf)
            return check_points(t, k=kf, name=role)
        if made in HALF:
            # the exact half-precision values, in float32 arithmetic (float16 squares overflow beyond |x| = 256),
            # at the tolerance of the dtype they were made in; then re-lifted in the compute dtype
            rtol = HALF_RTOL_EPS * torch.finfo(getattr(torch, made)).eps
            t = check_points(t.to(torch.float32), k=kf, rtol=rtol, name=f"{role} ({made})")
            return lift(t[..., 1:].to(tdtype), k=kf)
        try:
            t = check_points(t, k=kf, name=f"{role} ({made})")  # in the dtype they came in, with its tolerance
        except ValueError:
            # float64 values that are all float32 numbers were made in float32 (e.g. x.double()):
            # check them there, then re-lift in the compute dtype
            if made != "float64" or not bool((t.to(torch.float32).to(torch.float64) == t).all()):
                raise
            t = check_points(t.to(torch.float32), k=kf, name=f"{role} (float32 values stored as float64)")
            return lift(t[..., 1:].to(tdtype), k=kf)
        # another dtype: keep the spatial parts, recompute the time coordinate there (on <x,x>_L = -k to its rounding)
        return t if t.dtype == tdtype else lift(t[..., 1:].to(tdtype), k=kf)
    except ValueError as exc:
        raise _usage(exc, role, spatial) from None


def _label(flat: int, lead) -> str:
    import numpy as np

    idx = tuple(int(i) for i in np.unravel_index(flat, tuple(lead)))
    return str(idx[0]) if len(idx) == 1 else str(idx)


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
