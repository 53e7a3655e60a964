"""Attention maps on the hyperboloid: score kinds, Hypformer's focused linear attention, streaming comparison.

Inputs are points of the Lorentz model, time coordinate first: ``queries`` of shape
``(..., N, d + 1)``, ``keys`` (and ``values``) of shape ``(..., M, d + 1)``, with optional
leading head/batch axes that broadcast.  The curvature parameter is ``k``
(``<x, x>_L = -k``), exactly as in :mod:`hypviz.lorentz`.

Score kinds (``scores``, ``attention_map``, ``compare``)::

    "spatial"   s_ij = q_s . k_s                    (Hypformer's linear attention looks only at this)
    "distance"  s_ij = -1/2 |q - k|^2_L             (never positive)
    "lorentz"   s_ij = <q, k>_L = -q_t k_t + q_s . k_s

They are related exactly (MATH.md identities 4 and 5)::

    q_s . k_s = -1/2 |q - k|^2_L + q_t k_t - k        <q, k>_L = -1/2 |q - k|^2_L - k

so inside a row softmax "lorentz" equals "distance" exactly, while "spatial" is "distance"
plus a key-dependent bias ``q_t k_t / tau``.  :func:`compare` measures how far two kinds'
maps are apart, row by row, and checks MATH.md's bound on it.

Every public function validates its inputs once (one-line ``ValueError``/``TypeError``)
and then computes with unchecked internals.  Pairwise results are built with matrix
products, in row blocks, never by broadcasting ``N x M x d``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any, Callable

import torch

from hypviz.lorentz import as_tensor, check_k, check_points, distance_operands

__all__ = [
    "KINDS",
    "scores",
    "attention_map",
    "focused_linear_map",
    "focused_linear_attention",
    "compare",
    "Comparison",
    "resolve_device",
    "peak_tensor_memory",
]

ArrayLike = Any

KINDS: tuple[str, ...] = ("spatial", "distance", "lorentz")
# coefficient c of the key-norm bias: logits(kind) = -1/2 |q - k|^2_L + c * q_t k_t + (row constant)
_BIAS = {"spatial": 1.0, "distance": 0.0, "lorentz": 0.0}
_FEATURE_EPS = 1e-6  # Hypformer's offsets in phi: (relu(x) + 1e-6) / (|norm_scale| + 1e-6)
_COMPARE_BLOCK_BYTES = 16 * 2**20  # compare on CPU: bytes per logit buffer by default (within the budget)
_DEFAULT_BUDGET = 256 * 2**20  # compare: working memory for the row-block buffers
_TILT_MAX_GAP = 30.0  # compare: rows with a wider logit gap use the direct log-softmax formulas


# --------------------------------------------------------------------------- #
# validation: done once per public call
# --------------------------------------------------------------------------- #
def _check_kind(kind: Any, name: str = "kind") -> str:
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"{name} must be one of {', '.join(repr(k) for k in KINDS)}, got {kind!r}")
    return kind


def _check_positive(value: Any, name: str, hint: str = "") -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive finite number{hint}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number{hint}, got {value!r}") from None
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be a positive finite number{hint}, got {value!r}")
    return v


def _temperature(temperature: Any, d: int) -> float:
    if temperature is None:
        return math.sqrt(d)
    return _check_positive(temperature, "temperature", f" (default sqrt(d) = {math.sqrt(d):.4g})")


def _points(x: ArrayLike, name: str, rows: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if t.dim() < 2 or t.shape[-1] < 2:
        raise ValueError(
            f"{name}: expected shape (..., {rows}, d + 1) with d >= 1 (time coordinate first), got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(f"{name}: expected at least one point, got the empty shape {tuple(t.shape)}")
    return t


def _validate(
    queries: ArrayLike, keys: ArrayLike, k: float, values: ArrayLike | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, float, torch.Size]:
    """Shapes, dtypes, devices, broadcasting and the hyperboloid; returns tensors and the batch shape."""
    kf = check_k(k)
    q = _points(queries, "queries", "N")
    kk = _points(keys, "keys", "M")
    v = None if values is None else _points(values, "values", "M")
    if q.shape[-1] != kk.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same number of coordinates d + 1: "
            f"queries is {tuple(q.shape)}, keys is {tuple(kk.shape)}"
        )
    if v is not None and v.shape[-2] != kk.shape[-2]:
        raise ValueError(
            f"values must have one row per key (M = {kk.shape[-2]}): keys is {tuple(kk.shape)}, values is {tuple(v.shape)}"
        )
    for t, name in ((kk, "keys"), (v, "values")):
        if t is None:
            continue
        if t.dtype != q.dtype:
            raise TypeError(f"queries are {q.dtype} but {name} are {t.dtype}; convert them to one dtype")
        if t.device != q.device:
            raise ValueError(f"queries are on {q.device} but {name} are on {t.device}; move them to one device")
    shapes = [q.shape[:-2], kk.shape[:-2]] + ([] if v is None else [v.shape[:-2]])
    try:
        batch = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        got = ", ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"the leading (head/batch) axes of queries, keys[, values] do not broadcast: {got}") from None
    q = check_points(q, kf, name="queries")
    kk = check_points(kk, kf, name="keys")
    if v is not None:
        v = check_points(v, kf, name="values")
    return q, kk, v, kf, batch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The device a computation runs on: ``"auto"`` is CUDA when available, else the CPU.

    ``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` (or a :class:`torch.device`) are accepted;
    asking for CUDA on a machine without it raises a one-line ``ValueError``.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {device!r}") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>', got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available on this machine "
            "(torch.cuda.is_available() is False); use device='auto' or 'cpu'"
        )
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


# --------------------------------------------------------------------------- #
# unchecked kernels: logits as ONE matrix product of augmented operands
# --------------------------------------------------------------------------- #
def _operands(q: torch.Tensor, kk: torch.Tensor, kind: str, kf: float, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(A, B)`` with ``A @ B^T = scale * scores(q, kk, kind)`` (before the distance clamp).

    ``A`` is ``(..., N, c)``, ``B`` is ``(..., M, c)``; the distance operands are
    :func:`hypviz.lorentz.distance_operands` (one product with ``d + 3`` columns).
    """
    if kind == "spatial":
        return q[..., 1:] * scale, kk[..., 1:]
    if kind == "lorentz":
        return torch.cat([-q[..., :1], q[..., 1:]], dim=-1) * scale, kk
    return distance_operands(q, kk, kf, scale)


def _finish_(logits: torch.Tensor, kind: str) -> torch.Tensor:
    """In place: the distance logits are never positive (``|q - k|^2_L >= 0``)."""
    if kind == "distance":
        logits.clamp_max_(0.0)
    return logits


def _softmax_rows_(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a contiguous tensor, in place: no new ``N x M`` allocation.

    On the CPU this is torch's fused last-dimension softmax kernel (max, exp and sum while the row
    is in cache, one parallel loop) writing over its input, which that kernel supports (it reads a
    row's maximum before writing and then works element by element).  Elsewhere, or should a
    future torch refuse the aliasing, the max-shifted formula runs as in-place passes.
    """
    if x.device.type == "cpu" and x.is_contiguous():
        try:
            return torch.ops.aten._softmax.out(x, -1, False, out=x)
        except RuntimeError:  # pragma: no cover - depends on the torch build
            pass
    x.sub_(x.amax(dim=-1, keepdim=True)).exp_()
    return x.div_(x.sum(dim=-1, keepdim=True))


def _flatten_batch(t: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    return t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:])


def _rows_for(nbytes: int, m: int, itemsize: int) -> int:
    return max(1, nbytes // max(1, m * itemsize))


def _logit_error(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row rounding bound of ``A @ B^T``: ``gamma_c * sum_c |A_ic| max_j |B_jc|`` (any summation order)."""
    c = a.shape[-1]
    gamma = (c + 3) * torch.finfo(a.dtype).eps
    col_max = b.abs().amax(dim=-2, keepdim=True)  # (..., 1, c)
    return gamma * (a.abs() * col_max).sum(dim=-1)


# --------------------------------------------------------------------------- #
# dense maps
# --------------------------------------------------------------------------- #
def scores(queries: ArrayLike, keys: ArrayLike, kind: str, *, k: float = 1.0) -> torch.Tensor:
    """Attention scores between every query and every key, shape ``(..., N, M)``.

    ========== ============================== =====================================
    kind       ``s_ij``                       note
    ========== ============================== =====================================
    spatial    ``q_s . k_s``                  what Hypformer's linear attention uses
    distance   ``-1/2 |q - k|^2_L``           never positive (clamped at 0)
    lorentz    ``<q, k>_L``                   ``= -1/2 |q - k|^2_L - k`` exactly
    ========== ============================== =====================================

    Parameters
    ----------
    queries : ``(..., N, d + 1)`` points on ``<x, x>_L = -k``, time first.
    keys : ``(..., M, d + 1)`` points; leading axes broadcast against those of ``queries``.
    kind : ``"spatial"``, ``"distance"`` or ``"lorentz"``.
    k : curvature parameter, ``<x, x>_L = -k``.

    Returns
    -------
    torch.Tensor of shape ``(..., N, M)``, dtype and device of the inputs, built by one matrix
    product (``"distance"`` uses the shifted-time form of identity 1, see ``_operands``).
    """
    _check_kind(kind)
    q, kk, _, kf, _ = _validate(queries, keys, k)
    a, b = _operands(q, kk, kind, kf, 1.0)
    return _finish_(a @ b.transpose(-1, -2), kind)


def attention_map(
    queries: ArrayLike, keys: ArrayLike, kind: str, *, k: float = 1.0, temperature: float | None = None
) -> torch.Tensor:
    """Row-softmax attention map ``A_ij = softmax_j(s_ij / tau)``, shape ``(..., N, M)``; rows sum to 1.

    ``s`` are the :func:`scores` of ``kind``; ``tau = temperature`` defaults to ``sqrt(d)``,
    ``d`` the spatial dimension.  Computed in row blocks that fit in cache: one matrix product
    into the output, then an in-place max-shifted softmax, so no second ``N x M`` array exists.
    """
    _check_kind(kind)
    q, kk, _, kf, batch = _validate(queries, keys, k)
    tau = _temperature(temperature, q.shape[-1] - 1)
    a, b = _operands(q, kk, kind, kf, 1.0 / tau)
    logits = _finish_(a @ b.transpose(-1, -2), kind)  # (..., N, M): the only N x M allocation
    if logits.device.type != "cpu":
        return torch.softmax(logits, dim=-1)
    return _softmax_rows_(logits)


# --------------------------------------------------------------------------- #
# Hypformer's focused linear attention
# --------------------------------------------------------------------------- #
def _check_power(power: Any) -> float:
    return _check_positive(power, "power", " (Hypformer's power_k, default 2)")


def _check_norm_scale(norm_scale: Any) -> float:
    try:
        s = float(norm_scale)
    except (TypeError, ValueError):
        raise ValueError(f"norm_scale must be a finite number, got {norm_scale!r}") from None
    if not math.isfinite(s) or isinstance(norm_scale, bool):
        raise ValueError(f"norm_scale must be a finite number, got {norm_scale!r}")
    return s


def _check_eps(eps: Any) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}") from None
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return e


def _feature_map(xs: torch.Tensor, power: float, norm_scale: float) -> torch.Tensor:
    """Hypformer's ``phi(x) = fp((relu(x) + 1e-6) / (|norm_scale| + 1e-6), p)``, ``fp(y, p) = |y| y^p / |y^p|``.

    ``fp`` is evaluated as ``|y| z / |z|`` with ``z = (y / max(y))^p``: the same value (``fp`` only
    depends on the direction of ``y^p``), but ``y^p`` can no longer overflow or underflow.
    """
    y = (torch.relu(xs) + _FEATURE_EPS) / (abs(norm_scale) + _FEATURE_EPS)
    if power == 1.0:
        return y
    z = (y / y.amax(dim=-1, keepdim=True)).pow_(power)
    ratio = torch.linalg.vector_norm(y, dim=-1, keepdim=True) / torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    return z.mul_(ratio)


def focused_linear_map(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    power: float = 2.0,
    norm_scale: float = 1.0,
    k: float = 1.0,
    eps: float = 0.0,
) -> torch.Tensor:
    """Hypformer's implicit attention map ``A_ij = phi(q_i) . phi(k_j) / sum_l phi(q_i) . phi(k_l)``.

    ``phi(x) = fp((relu(x_s) + 1e-6) / (|norm_scale| + 1e-6), power)`` with the focusing function
    ``fp(y, p) = (|y| / |y^p|) y^p`` (element-wise power), on the spatial parts only and without
    ``1/sqrt(d)``, as in Hypformer's ``TransConvLayer``.  All entries are positive and each row
    sums to 1 (for ``eps = 0``; ``eps`` is added to the normaliser, Hypformer uses ``1e-6``).
    Since ``fp`` is positively homogeneous, ``norm_scale`` cancels from the map (exactly when
    ``eps = 0``).  Hypformer never forms this ``(..., N, M)`` map; it costs ``O(N M d)``.

    ``queries (..., N, d + 1)`` and ``keys (..., M, d + 1)`` are checked to lie on
    ``<x, x>_L = -k``; only their spatial parts enter.
    """
    q, kk, _, _, _ = _validate(queries, keys, k)
    p, s, e = _check_power(power), _check_norm_scale(norm_scale), _check_eps(eps)
    fq, fk = _feature_map(q[..., 1:], p, s), _feature_map(kk[..., 1:], p, s)
    a = fq @ fk.transpose(-1, -2)
    return a.div_(a.sum(dim=-1, keepdim=True).add_(e))


def focused_linear_attention(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike,
    *,
    power: float = 2.0,
    norm_scale: float = 1.0,
    k: float = 1.0,
    eps: float = 0.0,
) -> torch.Tensor:
    """Hypformer's aggregated spatial output ``phi(Q) (phi(K)^T V_s) / (phi(Q) sum_j phi(k_j) + eps)``.

    Computed right to left in ``O(N d d_v)`` time and ``O((N + M) (d + d_v) + d d_v)`` memory,
    no ``N x M`` array.  By associativity it equals ``focused_linear_map(queries, keys) @ V_s``
    (to rounding: relative 1e-5 in float32).  ``values (..., M, d_v + 1)`` are points; the result
    is the spatial output ``(..., N, d_v)`` (Hypformer then adds a learned map of ``V_s``, averages
    heads and lifts with ``hypviz.lorentz.lift(out, k)``).  ``eps = 1e-6`` reproduces Hypformer's
    normaliser exactly; the default 0 makes the identity with the map exact.
    """
    q, kk, v, _, _ = _validate(queries, keys, k, values)
    p, s, e = _check_power(power), _check_norm_scale(norm_scale), _check_eps(eps)
    fq, fk = _feature_map(q[..., 1:], p, s), _feature_map(kk[..., 1:], p, s)
    kv = fk.transpose(-1, -2) @ v[..., 1:]  # (..., d, d_v)
    numerator = fq @ kv  # (..., N, d_v)
    normaliser = fq @ fk.sum(dim=-2).unsqueeze(-1)  # (..., N, 1)
    return numerator.div_(normaliser.add_(e))


# --------------------------------------------------------------------------- #
# streaming comparison
# --------------------------------------------------------------------------- #
def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclasses.dataclass(repr=False)
class Comparison:
    """Row-by-row comparison of two attention maps, ``P_a = softmax(s_a / tau)`` and ``P_b``.

    Per-row fields have shape ``(..., N)`` (the broadcast leading axes, then the queries):

    ``kl``           ``KL(P_b || P_a)``
    ``tv``           total variation ``1/2 sum_j |P_b - P_a|``
    ``logit_gap``    spread of the row-centred logit difference ``g = (s_b - s_a) / tau``,
                     ``max_j g_j - min_j g_j`` (twice its sup-distance to the nearest constant)
    ``delta``        MATH.md's bound ``Delta = |c_a - c_b| q_t (max_j k_t - min_j k_t) / tau``
    ``tv_bound``     ``tanh(Delta / 4)``;  ``kl_bound``: ``Delta^2 / 8``
    ``allowance``    rigorous floating-point allowance on the gap (0 in exact arithmetic)
    ``bound_met``    ``tv <= tanh((Delta + allowance) / 4)`` and ``kl <= (Delta + allowance)^2 / 8``
                     (plus a few ulps of the summation)
    ``top1``         whether both maps put their largest weight on the same key
    ``topk_overlap`` ``|top-k(P_a) & top-k(P_b)| / k``

    ``c`` is each kind's coefficient of the key-norm bias ``q_t k_t`` (spatial 1, distance 0,
    lorentz 0; identities 4 and 5), so ``Delta`` is MATH.md's bound for spatial vs distance and
    spatial vs lorentz, and exactly 0 for lorentz vs distance and for a kind against itself
    (the maps are then equal, up to rounding).
    """

    a: str
    b: str
    k: float
    temperature: float
    topk: int
    device: str
    dtype: str
    batch_shape: tuple[int, ...]
    n_queries: int
    n_keys: int
    dim: int
    block_rows: int
    n_blocks: int
    kl: torch.Tensor
    tv: torch.Tensor
    logit_gap: torch.Tensor
    delta: torch.Tensor
    tv_bound: torch.Tensor
    kl_bound: torch.Tensor
    allowance: torch.Tensor
    bound_met: torch.Tensor
    top1: torch.Tensor
    topk_overlap: torch.Tensor
    elapsed_s: float = 0.0

    # ---- summaries (Python floats) ----
    @property
    def mean_tv(self) -> float:
        return float(self.tv.double().mean())

    @property
    def max_tv(self) -> float:
        return float(self.tv.max())

    @property
    def mean_kl(self) -> float:
        return float(self.kl.double().mean())

    @property
    def max_kl(self) -> float:
        return float(self.kl.max())

    @property
    def max_delta(self) -> float:
        return float(self.delta.max())

    @property
    def mean_delta(self) -> float:
        return float(self.delta.double().mean())

    @property
    def bound_met_fraction(self) -> float:
        return float(self.bound_met.double().mean())

    @property
    def all_bounds_met(self) -> bool:
        return bool(self.bound_met.all())

    @property
    def top1_agreement(self) -> float:
        return float(self.top1.double().mean())

    @property
    def topk_agreement(self) -> float:
        return float(self.topk_overlap.double().mean())

    @property
    def n_rows(self) -> int:
        return int(self.tv.numel())

    def to_dict(self) -> dict[str, Any]:
        """Scalars only (JSON-ready): the set-up and the row statistics."""
        return {
            "a": self.a,
            "b": self.b,
            "k": self.k,
            "temperature": self.temperature,
            "device": self.device,
            "dtype": self.dtype,
            "batch_shape": list(self.batch_shape),
            "n_queries": self.n_queries,
            "n_keys": self.n_keys,
            "dim": self.dim,
            "block_rows": self.block_rows,
            "n_blocks": self.n_blocks,
            "mean_tv": self.mean_tv,
            "max_tv": self.max_tv,
            "mean_kl": self.mean_kl,
            "max_kl": self.max_kl,
            "max_delta": self.max_delta,
            "bound_met_fraction": self.bound_met_fraction,
            "top1_agreement": self.top1_agreement,
            "topk": self.topk,
            "topk_agreement": self.topk_agreement,
            "elapsed_s": self.elapsed_s,
        }

    def summary(self, show_device: bool = True) -> str:
        """A readable multi-line summary, numbers rounded to 4 significant digits (no addresses, no timings)."""
        lead = f"{self.batch_shape} x " if self.batch_shape else ""
        where = f" on {self.device}" if show_device else ""
        met = self.bound_met.sum().item()
        lines = [
            f"Comparison {self.a!r} (P_a) vs {self.b!r} (P_b): {lead}{self.n_queries} queries x {self.n_keys} keys, "
            f"d = {self.dim}, k = {_fmt(self.k)}, tau = {_fmt(self.temperature)}, {self.dtype}{where}",
            f"  TV(P_a, P_b)   mean {_fmt(self.mean_tv)}  max {_fmt(self.max_tv)}",
            f"  KL(P_b || P_a) mean {_fmt(self.mean_kl)}  max {_fmt(self.max_kl)}",
            f"  logit gap      max {_fmt(float(self.logit_gap.max()))}   bound Delta max {_fmt(self.max_delta)}",
            f"  bound met (TV <= tanh(Delta/4), KL <= Delta^2/8) on {met} of {self.n_rows} rows",
            f"  top-1 agreement {_fmt(self.top1_agreement)}   top-{self.topk} overlap {_fmt(self.topk_agreement)}",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython
        p.text(self.summary())


def _dot_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sum_j x_ij y_ij`` per row (real tensors), fused: no ``B x M`` temporary."""
    return torch.linalg.vecdot(x, y, dim=-1)


def _direct_stats(la: torch.Tensor, lb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(P_b || P_a) and TV from log-softmax (used for rows with a very wide logit gap)."""
    lpa, lpb = torch.log_softmax(la, dim=-1), torch.log_softmax(lb, dim=-1)
    pb = lpb.exp()
    kl = (pb * (lpb - lpa)).sum(dim=-1).clamp_min_(0.0)
    tv = 0.5 * (pb - lpa.exp()).abs().sum(dim=-1)
    return kl, tv


def _block_rows_for(m: int, itemsize: int, budget: int) -> int:
    # two (rows x M) buffers live across the block, plus ~1 for top-k / fallback temporaries
    return max(1, budget // (3 * m * itemsize))


def compare(
    queries: ArrayLike,
    keys: ArrayLike,
    a: str = "spatial",
    b: str = "distance",
    *,
    k: float = 1.0,
    temperature: float | None = None,
    device: str | torch.device = "auto",
    block_rows: int | None = None,
    topk: int = 5,
    memory_budget: int | None = None,
    progress: bool | None = None,
) -> Comparison:
    """Compare the attention maps of two score kinds row by row, streaming over row blocks.

    With ``P_a = softmax(s_a / tau)`` and ``P_b = softmax(s_b / tau)`` (see :func:`scores`), each
    query row ``i`` gets ``KL(P_b || P_a)``, the total variation, the spread of the logit difference,
    MATH.md's bound ``Delta_i`` and whether the row met it, and the top-1 / top-k agreement
    (see :class:`Comparison`).  For ``a="spatial", b="distance"``: ``KL(P || S) = log E_P[e^b] - E_P[b]
    <= Delta^2/8`` (Hoeffding) and ``TV <= tanh(Delta/4)``, ``Delta = q_t (max_j k_t - min_j k_t) / tau``.

    Parameters
    ----------
    queries, keys : ``(..., N, d + 1)``, ``(..., M, d + 1)`` points on ``<x, x>_L = -k``.
    a, b : score kinds (``"spatial"``, ``"distance"``, ``"lorentz"``).
    k : curvature parameter.
    temperature : softmax temperature ``tau``, default ``sqrt(d)``.
    device : ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda[:i]"``.  Blocks are
        moved there; the per-row results come back on the inputs' device; ``result.device`` says
        where it ran.
    block_rows : query rows per block; default from ``memory_budget`` so that the working memory
        is ``O(block_rows x M)`` whatever ``N``.
    topk : the ``k`` of the top-k agreement (capped at ``M``).
    memory_budget : bytes for the block buffers.  Default: on the CPU 256 MiB, with blocks of at most
        about 16 MiB per logit buffer (cache-friendlier); on CUDA a quarter of the free device
        memory, at least 256 MiB and at most 8 GiB.
    progress : show a tqdm bar; default: only for long runs on a terminal.

    Notes
    -----
    The statistics use the tilted form: with ``h = g - E_{P_b}[g]``, ``KL = E_{P_b}[h] + log E_{P_b}[e^{-h}]``
    and ``TV = 1/2 E_{P_b}|e^{-h} / E_{P_b}[e^{-h}] - 1|`` (``expm1``/``log1p``), accurate to the
    rounding of the logits, not of ``log N``; rows whose logit gap exceeds 30 use the direct
    log-softmax formulas.
    """
    start = time.perf_counter()
    _check_kind(a, "a")
    _check_kind(b, "b")
    q, kk, _, kf, batch = _validate(queries, keys, k)
    d = q.shape[-1] - 1
    tau = _temperature(temperature, d)
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ValueError(f"topk must be a positive integer, got {topk!r}")
    if block_rows is not None and (isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1):
        raise ValueError(f"block_rows must be a positive integer or None (automatic), got {block_rows!r}")
    if memory_budget is not None and (
        isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < 1
    ):
        raise ValueError(f"memory_budget must be a positive number of bytes or None, got {memory_budget!r}")
    dev = resolve_device(device)

    n, m = q.shape[-2], kk.shape[-2]
    dtype, itemsize = q.dtype, q.element_size()
    t_k = min(topk, m)
    if block_rows is None:
        budget = memory_budget
        if budget is None:
            budget = _DEFAULT_BUDGET
            if dev.type == "cuda":
                budget = max(budget, min(8 * 2**30, torch.cuda.mem_get_info(dev)[0] // 4))
            else:
                budget = min(budget, 3 * m * itemsize * _rows_for(_COMPARE_BLOCK_BYTES, m, itemsize))
        block_rows = _block_rows_for(m, itemsize, budget)
    rows = min(block_rows, n)

    qf, kfl = _flatten_batch(q, batch), _flatten_batch(kk, batch)
    heads = qf.shape[0]
    aa, ba = _operands(qf, kfl, a, kf, 1.0 / tau)
    ab, bb = _operands(qf, kfl, b, kf, 1.0 / tau)

    # the bound, per row, and the floating-point allowance on the logit gap
    kt = kfl[..., 0]
    spread = (kt.amax(dim=-1) - kt.amin(dim=-1)).unsqueeze(-1)
    delta = abs(_BIAS[a] - _BIAS[b]) * qf[..., 0] * spread / tau
    eps = torch.finfo(dtype).eps
    if a == b:
        allowance = torch.zeros_like(delta)
    else:
        allowance = 2.0 * (_logit_error(aa, ba) + _logit_error(ab, bb)) + 4.0 * eps * delta

    out = {name: torch.empty(heads, n, dtype=dtype, device=dev) for name in ("kl", "tv", "gap", "overlap")}
    top1 = torch.empty(heads, n, dtype=torch.bool, device=dev)
    buf_a = torch.empty(rows, m, dtype=dtype, device=dev)
    buf_b = torch.empty(rows, m, dtype=dtype, device=dev)

    n_blocks = heads * math.ceil(n / rows)
    show = progress
    if show is None:
        show = n_blocks >= 64 and n * m * heads >= 2**28 and sys.stderr.isatty()
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=n_blocks, desc=f"compare {a} vs {b}", unit="block", leave=False, file=sys.stderr)
    try:
        for h in range(heads):
            ba_t = ba[h].to(dev).transpose(0, 1)
            bb_t = bb[h].to(dev).transpose(0, 1)
            for i in range(0, n, rows):
                j = min(i + rows, n)
                la, lb = buf_a[: j - i], buf_b[: j - i]
                qa, qb = aa[h, i:j].to(dev), ab[h, i:j].to(dev)
                _finish_(torch.mm(qa, ba_t, out=la), a)
                _finish_(torch.mm(qb, bb_t, out=lb), b)
                _block_stats(la, lb, t_k, out, top1, h, i, j, (qa, ba_t, a), (qb, bb_t, b))
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    home = q.device
    shape = (*batch, n)

    def back(t: torch.Tensor) -> torch.Tensor:
        return t.to(home).reshape(shape)

    delta_out = delta.to(dtype)
    kl, tv, gap = back(out["kl"]), back(out["tv"]), back(out["gap"])
    d_eff = (delta + allowance).to(home).reshape(shape)
    ulps = 8.0 * eps * math.log2(m + 1)
    met = (tv <= torch.tanh(d_eff / 4) * (1 + ulps) + ulps) & (kl <= d_eff.square() / 8 + ulps * (d_eff + eps))
    return Comparison(
        a=a,
        b=b,
        k=kf,
        temperature=tau,
        topk=t_k,
        device=str(dev),
        dtype=str(dtype).replace("torch.", ""),
        batch_shape=tuple(batch),
        n_queries=n,
        n_keys=m,
        dim=d,
        block_rows=rows,
        n_blocks=n_blocks,
        kl=kl,
        tv=tv,
        logit_gap=gap,
        delta=delta_out.to(home).reshape(shape),
        tv_bound=torch.tanh(delta_out / 4).to(home).reshape(shape),
        kl_bound=(delta_out.square() / 8).to(home).reshape(shape),
        allowance=allowance.to(dtype).to(home).reshape(shape),
        bound_met=met,
        top1=back(top1),
        topk_overlap=back(out["overlap"]),
        elapsed_s=time.perf_counter() - start,
    )


def _block_stats(
    la: torch.Tensor,
    lb: torch.Tensor,
    t_k: int,
    out: dict[str, torch.Tensor],
    top1: torch.Tensor,
    h: int,
    i: int,
    j: int,
    op_a: tuple[torch.Tensor, torch.Tensor, str],
    op_b: tuple[torch.Tensor, torch.Tensor, str],
) -> None:
    """Statistics of one row block; overwrites the logit buffers ``la``, ``lb``."""
    ia = torch.topk(la, t_k, dim=-1).indices
    ib = torch.topk(lb, t_k, dim=-1).indices
    top1[h, i:j] = ia[:, 0] == ib[:, 0]
    out["overlap"][h, i:j] = (ia.unsqueeze(-1) == ib.unsqueeze(-2)).any(dim=-1).sum(dim=-1).to(la.dtype) / t_k

    g = torch.sub(la, lb, out=la)  # g' = (s_a - s_b) / tau = -g
    gap = g.amax(dim=-1) - g.amin(dim=-1)
    out["gap"][h, i:j] = gap
    pb = _softmax_rows_(lb)
    g.sub_(_dot_rows(pb, g).unsqueeze(-1))  # -h, centred under P_b
    s = _dot_rows(pb, g)  # E_Pb[-h] (zero up to rounding)
    wide = gap > _TILT_MAX_GAP
    any_wide = bool(wide.any())
    if any_wide:
        g.masked_fill_(wide.unsqueeze(-1), 0.0)
    e = g.expm1_()  # e^{-h} - 1
    m1 = _dot_rows(pb, e)  # E_Pb[e^{-h}] - 1
    out["kl"][h, i:j] = (torch.log1p(m1) - s).clamp_min_(0.0)
    e.sub_(m1.unsqueeze(-1)).abs_()
    out["tv"][h, i:j] = 0.5 * _dot_rows(pb, e) / (1.0 + m1)
    if any_wide:  # recompute those rows' logits and use log-softmax directly
        idx = wide.nonzero().squeeze(-1)
        (qa, ba_t, ka), (qb, bb_t, kb) = op_a, op_b
        kl_w, tv_w = _direct_stats(_finish_(qa[idx] @ ba_t, ka), _finish_(qb[idx] @ bb_t, kb))
        out["kl"][h, i + idx] = kl_w
        out["tv"][h, i + idx] = tv_w


# --------------------------------------------------------------------------- #
# measuring memory honestly: bytes of the tensors an operation allocates
# --------------------------------------------------------------------------- #
def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Run ``fn(*args, **kwargs)`` and return ``(result, peak)``: the peak tensor memory it allocated, in bytes.

    Every aten operation run by ``fn`` is observed (a ``TorchDispatchMode``); an output whose storage
    aliases none of the operation's inputs is a new allocation, counted with its ``nbytes`` until
    its storage is freed.  ``peak`` is the largest total of such storages alive at once.  The inputs,
    allocated before, do not count; scratch space inside a single kernel (e.g. BLAS packing
    buffers) is not visible.  Deterministic, unlike the resident set size, and cheap enough for
    a notebook.
    """
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    state = {"live": 0, "peak": 0}
    tracked: set[int] = set()

    def release(ptr: int, nbytes: int) -> None:
        state["live"] -= nbytes
        tracked.discard(ptr)

    def storage_ptrs(tree: Any) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)}

    class _Meter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            inputs = storage_ptrs((args, kwargs))
            out = func(*args, **kwargs)
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                ptr, nbytes = st.data_ptr(), st.nbytes()
                if nbytes == 0 or ptr in inputs or ptr in tracked:
                    continue
                tracked.add(ptr)
                state["live"] += nbytes
                state["peak"] = max(state["peak"], state["live"])
                weakref.finalize(st, release, ptr, nbytes)
            return out

    with _Meter():
        result = fn(*args, **kwargs)
    return result, state["peak"]
