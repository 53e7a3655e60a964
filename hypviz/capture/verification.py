r"""A capture that checks itself: a layer's output rebuilt from its record and compared with what the layer returned.

For every recorded call, :func:`rebuild` recomputes the layer's output, in float64, from the recorded
queries, keys and values and the map hypviz attributes to the layer (:meth:`hypviz.capture.records.LayerRecord.attention_map`),
with the layer's own aggregation (:data:`AGGREGATIONS`):

* ``"centroid_mean_heads"`` (Hypformer's and HyperCore's full attention): per head the Lorentzian
  centroid of :math:`a_h = A_h V_h`, then the centroid of the heads' mean,

  .. math::

      \mathrm{cent}_k(a) = \frac{\sqrt{k}\,a}{\sqrt{|\langle a, a\rangle_L|}}, \qquad
      o = \mathrm{cent}_k\Bigl(\frac1H \sum_h \mathrm{cent}_k(A_h V_h)\Bigr);

* ``"midpoint_heads"`` (HyboNet): per head :math:`a_h/\sqrt{|\langle a_h, a_h\rangle_L|}` (its
  ``mid_point``, the centroid at :math:`k = 1`), heads concatenated;
* ``"focused_mean_lift"`` (Hypformer's ``linear_focused``): the focused formula with Hypformer's
  :math:`\varepsilon = 10^{-6}` plus its self term :math:`\mathrm{v\_map\_mlp}(V_s)` (recorded at
  capture time), averaged over heads and lifted,
  :math:`o = \mathrm{lift}_k\bigl(\frac1H\sum_h (O_h + \mathrm{v\_map\_mlp}(V_{s,h}))\bigr)`;
* ``"gate_midpoint"`` (the Lorentz GCN gate): :math:`s = (\mathrm{adj} \odot G) X`,
  :math:`o = s/\sqrt{|\langle s, s\rangle_L|}`, the rows of the gate :math:`G` not normalised;
* ``"centroid_heads"`` (heads concatenated after the centroid: Hypformer's, HyperCore's and HELM's
  ``trans_heads_concat``, HELM's HMLA before ``wo``): per head :math:`\mathrm{cent}_k(A_h V_h)`, compared with
  what enters the concatenating map (recorded by the reader, the step named in the record's ``checked``);
* ``"focused_heads"`` (Hypformer's ``linear_focused`` with ``trans_heads_concat``): per head the focused
  formula plus the self term, :math:`O_h + \mathrm{v\_map\_mlp}(V_{s,h})`, compared with what enters
  ``final_linear``;
* ``"gate_centroid"`` (the gate as HyperCore ships it): :math:`s = (\mathrm{adj} \odot G) X`,
  :math:`o = \sqrt{k}\,s/\sqrt{\max(|\langle s, s\rangle_L|, 10^{-6})}` (its :math:`\sqrt{c}` and its clamp);
* ``"gyromidpoint_heads"`` (Poincare-ball attention): per head the weighted Möbius gyromidpoint of
  the values in the ball of radius :math:`\sqrt{k}`, with :math:`\lambda_j = 2k/(k - \|v_j\|^2)`,

  .. math::

      m = \tfrac12 \otimes \frac{\sum_j A_{ij} \lambda_j v_j}{\sum_j A_{ij} (\lambda_j - 1)}, \qquad
      \tfrac12 \otimes y = \sqrt{k}\tanh\Bigl(\tfrac12 \operatorname{artanh}\frac{\|y\|}{\sqrt{k}}\Bigr)\frac{y}{\|y\|}.

:func:`relative_error` is :math:`\max |o_{\mathrm{rebuilt}} - o_{\mathrm{seen}}| / \max(1, \max|o_{\mathrm{seen}}|)`,
held to :func:`tolerance` (:math:`\sqrt{\varepsilon}` of the dtype the model computed in: 1.5e-8 in
float64, 3.5e-4 in float32, 0.031 in float16, 0.088 in bfloat16; any other dtype is not verified).  The map is the
one the layer applies at any norm (:meth:`hypviz.capture.records.LayerRecord.map_of`: a mask enters as
:math:`-\infty` logits before the softmax).  :func:`fit_temperature` measures one :math:`\tau` for a layer call
whose attributes do not give it, and says how precisely the outputs fix it.

**What a re-check proves.**  The capture stores what it compared (``checked_output``) and the SHA-256 of every
field a verdict depends on (:data:`DIGESTED`: the points, map and aggregation, and the layer's name, call, batch
element, dtype, train/eval and mask too); :func:`recheck` compares every digest and rebuilds the stored output from
the stored points and map, to the tolerance of the recorded dtype (never one read from the file).  This detects
accidental and partial edits of a file (a field changed, the digests dropped, points moved without the output);
it does not detect a record rewritten whole, its output rebuilt and its digests recomputed, nor a whole record
copied from another file: the digests are not a signature.  A re-check proves that the record is consistent with
itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, NamedTuple, Sequence

import torch

from hypviz.attention import focused_linear_attention
from hypviz.lorentz import lift

__all__ = ["AGGREGATIONS", "DTYPES", "tolerance", "relative_error", "layer_map", "rebuild", "verify", "TemperatureFit",
           "fit_temperature", "MEASURED_SPREAD", "lorentz_centroid", "gyromidpoint", "DIGESTED", "digests", "seal",
           "recheck"]

#: The aggregations :func:`rebuild` knows (see the module docstring).
AGGREGATIONS: tuple[str, ...] = ("centroid_mean_heads", "midpoint_heads", "focused_mean_lift", "gate_midpoint",
                                 "gyromidpoint_heads", "centroid_heads", "focused_heads", "gate_centroid")
_F64 = torch.float64
_BLOCK_ELEMENTS = 2**23  # float64 map entries rebuilt at a time (64 MiB): rows in blocks, never the whole N x M
_FIT_ROWS = 256  # query rows the temperature is fitted on (then verified on all rows)
_ROWWISE = ("centroid_mean_heads", "midpoint_heads", "gate_midpoint", "gyromidpoint_heads", "centroid_heads",
            "gate_centroid")


#: The dtypes a model may compute in for its records to be verified, with their tolerance :math:`\sqrt{\varepsilon}`.
DTYPES: dict[str, float] = {name: math.sqrt(torch.finfo(getattr(torch, name)).eps)
                            for name in ("float64", "float32", "float16", "bfloat16")}


def tolerance(dtype: str | torch.dtype) -> float:
    r"""The verification tolerance, :math:`\sqrt{\varepsilon}` of the dtype the model computed in (:data:`DTYPES`).

    Raises
    ------
    ValueError
        For any other dtype (float8 included: its rounding is not what hypviz rebuilds to), or None.

    Examples
    --------
    >>> from hypviz.capture.verification import tolerance
    >>> round(tolerance("float32"), 6), round(tolerance("bfloat16"), 4)
    (0.000345, 0.0884)
    >>> tolerance("float8_e5m2")
    Traceback (most recent call last):
        ...
    ValueError: dtype 'float8_e5m2' is not one hypviz verifies a layer in (float64, float32, float16 or bfloat16)
    """
    name = str(dtype).replace("torch.", "") if isinstance(dtype, (str, torch.dtype)) else None
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r:.40} is not one hypviz verifies a layer in (float64, float32, float16 or bfloat16)")
    return DTYPES[name]


def relative_error(rebuilt: torch.Tensor, seen: torch.Tensor) -> float:
    r""":math:`\max|r - s| / \max(1, \max|s|)` in float64 (``inf`` for a shape mismatch or a non-finite value)."""
    r, s = rebuilt.to(_F64), seen.detach().to("cpu", _F64)
    if r.shape != s.shape:
        return math.inf
    err = float((r - s).abs().max()) / max(1.0, float(s.abs().max()))
    return err if math.isfinite(err) else math.inf


def _inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return -a[..., :1] * b[..., :1] + (a[..., 1:] * b[..., 1:]).sum(dim=-1, keepdim=True)


def lorentz_centroid(a: torch.Tensor, *, k: float) -> torch.Tensor:
    r"""``a (..., d + 1)`` rescaled onto :math:`\langle x, x\rangle_L = -k`:
    :math:`\sqrt{k}\,a/\sqrt{|\langle a, a\rangle_L|}`."""
    return math.sqrt(k) * a / _inner(a, a).abs().sqrt()


def gyromidpoint(values_ball: torch.Tensor, weights: torch.Tensor, *, k: float) -> torch.Tensor:
    r"""Weighted Möbius gyromidpoint ``(..., N, d)`` of ball points ``(..., M, d)`` (radius :math:`\sqrt{k}`), weights
    ``(..., N, M)``.

    .. math::

        m = \tfrac12 \otimes \frac{\sum_j w_j \lambda_j v_j}{\sum_j w_j (\lambda_j - 1)},
        \qquad \lambda_j = \frac{2k}{k - \|v_j\|^2}
    """
    lam = 2.0 * k / (k - (values_ball * values_ball).sum(dim=-1, keepdim=True))  # (..., M, 1)
    num = weights @ (lam * values_ball)
    den = weights @ (lam - 1.0)
    y = num / den
    ny = y.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    rk = math.sqrt(k)
    return rk * torch.tanh(0.5 * torch.atanh((ny / rk).clamp(max=1.0 - 1e-16))) * y / ny


def layer_map(rec: Any) -> torch.Tensor:
    r"""The map the layer applies, ``(H, N, M)`` float64: :meth:`LayerRecord.map_of` the record's points in float64
    (a mask as :math:`-\infty` logits before the softmax, a negative ``scale`` as
    :math:`A = \mathrm{softmax}_j(+\tfrac12\|q_i - \kappa_j\|_L^2/|\tau|)`, times the adjacency of a gate)."""
    return rec.map_of(rec.queries.to(_F64), rec.keys.to(_F64))


def rebuild(rec: Any, aux: dict[str, Any] | None = None, *, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's output rebuilt from the record (float64), by ``rec.aggregation``; ``aux`` holds what the
    aggregation needs beyond the record (``"self_term"`` ``(H, N, d)`` for the focused layers, ``"adjacency"``
    ``(N, M)`` for the gate); ``weights`` overrides the map.

    Shapes: ``(N, d + 1)`` for ``centroid_mean_heads``, ``focused_mean_lift`` and ``gate_midpoint``;
    ``(H, N, d + 1)`` for ``midpoint_heads``; ``(H, N, d)`` ball points for ``gyromidpoint_heads``.
    """
    aux = aux or {}
    agg, k = rec.aggregation, rec.k
    if rec.values is None:
        raise ValueError(f"layer {rec.name!r}: no values recorded; the output cannot be rebuilt")
    rows = max(1, _BLOCK_ELEMENTS // max(1, rec.n_heads * rec.n_keys))
    if weights is None and agg in _ROWWISE and rec.n_queries > rows:  # row blocks: every aggregation is row-wise
        parts = [rebuild(_rows(rec, i, i + rows), _rows_aux(aux, i, i + rows)) for i in range(0, rec.n_queries, rows)]
        return torch.cat(parts, dim=-2)
    v = rec.values.to(_F64)
    if agg in ("focused_mean_lift", "focused_heads"):
        if rec.mask is not None:
            raise ValueError(f"layer {rec.name!r}: a mask with the focused map is not rebuilt by hypviz")
        out = focused_linear_attention(rec.queries.to(_F64), rec.keys.to(_F64), v, power=rec.power,
                                       norm_scale=rec.norm_scale, k=k, eps=1e-6)
        if agg == "focused_heads":
            return out + aux["self_term"].to(_F64)
        return lift((out + aux["self_term"].to(_F64)).mean(dim=0), k=k)
    w = layer_map(rec) if weights is None else weights
    if agg == "centroid_mean_heads":
        return lorentz_centroid(lorentz_centroid(w @ v, k=k).mean(dim=0), k=k)
    if agg == "centroid_heads":
        return lorentz_centroid(w @ v, k=k)
    if agg == "gate_centroid":
        s = (w @ v).mean(dim=0)
        return math.sqrt(k) * s / _inner(s, s).abs().clamp_min(1e-6).sqrt()
    if agg == "midpoint_heads":
        a = w @ v
        return a / _inner(a, a).abs().clamp_min(1e-8).sqrt()
    if agg == "gate_midpoint":
        s = (w @ v).mean(dim=0)
        return s / _inner(s, s).abs().clamp_min(1e-8).sqrt()
    if agg == "gyromidpoint_heads":
        rk = math.sqrt(k)  # the ball points of the values (to_poincare without its float64 hyperboloid check)
        return gyromidpoint(rk * v[..., 1:] / (v[..., :1] + rk), w, k=k)
    raise ValueError(f"layer {rec.name!r}: aggregation must be one of {', '.join(AGGREGATIONS)}, got {agg!r}")


def _rows(rec: Any, i: int, j: int) -> Any:
    adj = rec.adjacency
    if adj is not None:
        adj = (adj.to_dense() if adj.layout != torch.strided else adj)[i:j]
    return dataclasses.replace(rec, queries=rec.queries[:, i:j], mask=None if rec.mask is None else rec.mask[:, i:j],
                               adjacency=adj)


def _rows_aux(aux: dict[str, Any], i: int, j: int) -> dict[str, Any]:
    return dict(aux)


def _seen_rows(rec: Any, seen: torch.Tensor, j: int) -> torch.Tensor:
    return seen[:j] if rec.aggregation in ("centroid_mean_heads", "gate_midpoint", "gate_centroid") else seen[:, :j]


def verify(rec: Any, seen: torch.Tensor | None, aux: dict[str, Any] | None = None) -> tuple[float | None, str]:
    """``(error, note)``: the relative error of :func:`rebuild` against ``seen`` (None when it cannot be rebuilt).

    Examples
    --------
    >>> import torch
    >>> from hypviz import capture, toymodel
    >>> model = toymodel.ToyHypformer(8, 4, 2, heads=2, k=1.0, attention_type="full")
    >>> with capture.attention(model) as cap:
    ...     _ = model(torch.linspace(-1.0, 1.0, 240, dtype=torch.float64).reshape(30, 8))
    >>> error, note = capture.verify(cap.layers[0], cap.layers[0].checked_output)   # rebuilt again from the record
    >>> error <= cap.layers[0].verify_tolerance
    True
    """
    if seen is None:
        return None, "not verified: the layer's output was not seen by the hook"
    if rec.aggregation is None:
        return None, "not verified: the layer's aggregation is not known to hypviz"
    if rec.values is None:
        return None, "not verified: no values recorded"
    try:
        err = relative_error(rebuild(rec, aux), seen)
    except Exception as exc:  # any failure to rebuild is a diagnosis, never an error of the model's forward
        return None, f"not verified: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return err, f"output rebuilt by {rec.aggregation}"


class TemperatureFit(NamedTuple):
    r"""What :func:`fit_temperature` measured for one layer call: ``temperature``, the :math:`\tau` whose rebuilt outputs
    are closest to the seen ones; ``error``, the largest relative error over the call's records there (all rows);
    ``low`` and ``high``, the :math:`\tau` at which that error (on the fitted rows) reaches the tolerance: every
    :math:`\tau` between them reproduces the outputs as well as the dtype's rounding can tell."""

    temperature: float
    error: float
    low: float
    high: float

    @property
    def spread(self) -> float:
        r"""``high / low - 1``: how loosely the outputs fix :math:`\tau` (``inf`` when ``low`` is not positive)."""
        return self.high / self.low - 1.0 if self.low > 0 else math.inf


#: The largest :attr:`TemperatureFit.spread` at which a fitted :math:`\tau` is recorded as measured (about +-1 %).
MEASURED_SPREAD = 0.02


def fit_temperature(parts: Sequence[tuple[Any, torch.Tensor, dict[str, Any] | None]], tol: float) -> TemperatureFit:
    r"""ONE :math:`\tau` for one layer call: ``parts`` holds its records (one per batch element) with the output each
    was compared with and its aux, ``(record, seen, aux)``; ``tol`` is the tolerance of the model's dtype.

    The error of a :math:`\tau` is the largest :func:`relative_error` over the call's first 256 query rows (record
    after record).  A grid of 41 values of :math:`\log\tau` over :math:`[\tau_0/100, 100\,\tau_0]` (:math:`\tau_0` = the first
    record's ``temperature``), 40 golden-section steps around the best one (to :math:`10^{-9}`), then bisection outwards for
    ``low`` and ``high``, where the error reaches ``tol`` (to :math:`4 \cdot 10^{-6}` in :math:`\log\tau`; the grid's ends when it
    never does); ``error`` is then taken on all rows.
    A :math:`\tau` is *measured* only when ``error <= tol`` and ``spread <= MEASURED_SPREAD``: otherwise the outputs do
    not fix it above the rounding of the dtype, and no fitted value may stand for the layer's.
    """
    fit, rows = [], 0
    for r, s, aux in parts:  # the first 256 query rows of the call, record after record
        j = min(r.n_queries, _FIT_ROWS - rows)
        fit.append((_rows(r, 0, j), _rows_aux(aux or {}, 0, j), _seen_rows(r, s, j)) if j < r.n_queries else (r, aux, s))
        rows += j
        if rows >= _FIT_ROWS:
            break
    tau0 = float(parts[0][0].temperature)

    def err(logt: float) -> float:
        t = math.exp(logt)
        return max(relative_error(rebuild(dataclasses.replace(r, temperature=t), a), s) for r, a, s in fit)

    span = math.log(100.0)
    grid = [math.log(tau0) + span * (i / 20.0 - 1.0) for i in range(41)]
    errs = [err(g) for g in grid]
    known = dict(zip(grid, errs))
    i = min(range(len(grid)), key=errs.__getitem__)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = err(a), err(b)
    for _ in range(40):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = err(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = err(b)
    best, best_err = (a, fa) if fa < fb else (b, fb)
    if errs[i] < best_err:
        best, best_err = grid[i], errs[i]
    bounds = []
    for end in (grid[0], grid[-1]):  # outwards from the best: the last tau within tol, by bisection
        inside, outside = best, None
        for x in sorted((x for x in grid if (x - best) * (end - best) > 0), key=lambda x: abs(x - best)):
            if known[x] > tol:
                outside = x
                break
            inside = x
        if outside is not None and best_err <= tol:
            for _ in range(16):  # the bracket, one grid step (0.23 in log tau), to 4e-6: far below MEASURED_SPREAD
                mid = 0.5 * (inside + outside)
                inside, outside = (mid, outside) if err(mid) <= tol else (inside, mid)
        bounds.append(best if best_err > tol else inside if outside is None else 0.5 * (inside + outside))
    tau = math.exp(best)
    full = max(relative_error(rebuild(dataclasses.replace(r, temperature=tau), a), s) for r, s, a in parts)
    return TemperatureFit(tau, full, math.exp(bounds[0]), math.exp(bounds[1]))


#: The fields a record's verdict depends on, digested at capture (:func:`digests`) and compared by :func:`recheck`:
#: every field of :class:`hypviz.capture.records.LayerRecord` except the verdict itself (``verify_error``,
#: ``verify_tolerance``, ``verify_note``: redone by :func:`recheck`, never read from a file) and ``digests``.
DIGESTED: tuple[str, ...] = ("name", "call", "batch", "mode", "queries", "keys", "values", "k", "kind", "temperature",
                             "head_temperatures", "temperature_source", "power", "norm_scale", "bias", "scale_sign",
                             "aggregation", "mask", "adjacency", "dtype", "training", "detail", "checked",
                             "checked_output", "self_term")


def _digest(value: Any, field: str) -> str:
    h = hashlib.sha256(f"{field}\0".encode())
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = t.to_dense() if t.layout != torch.strided else t
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


def digests(rec: Any) -> dict[str, str]:
    """SHA-256 (hex) of each field of :data:`DIGESTED` (with the field's name; tensors by dtype, shape and bytes,
    other values by ``repr``).  Not a signature: whoever rewrites a record can recompute them (see the module
    docstring)."""
    return {f: _digest(getattr(rec, f, None), f) for f in DIGESTED}


def seal(rec: Any) -> Any:
    """``rec`` with its :func:`digests` where it holds an output to re-check (``checked_output``), else ``rec``."""
    return rec if rec.checked_output is None else dataclasses.replace(rec, digests=digests(rec))


def recheck(rec: Any) -> Any:
    r"""``rec`` with its verification redone from what it holds (a stored verdict is never trusted).

    Verified only when the record holds the output stored at capture (``checked_output``) and its digests, its
    ``dtype`` is one of :data:`DTYPES` (the tolerance comes from it, never from the file), no field of
    :data:`DIGESTED` differs from its digest, and the stored output is rebuilt from the stored queries, keys, values
    and map (:func:`rebuild`) to that tolerance; otherwise *not verified*, saying why (the edited fields named).
    This proves that the record is consistent with itself: it detects accidental and partial edits, not a record
    rewritten whole with its output rebuilt and its digests recomputed.
    """
    def unverified(note: str, tol: float | None = None) -> Any:
        return dataclasses.replace(rec, verify_error=None, verify_tolerance=tol, verify_note=f"not verified: {note}")

    if rec.checked_output is None:
        old = str(rec.verify_note or "")
        return unverified(old[len("not verified: "):] if old.startswith("not verified: ")
                          else "the record holds no layer output to re-check (a stored verdict is not trusted)")
    if not rec.digests:
        return unverified("the record holds no digests of the fields its check depends on (a record without them is "
                          "not re-checked)")
    try:
        tol = tolerance(rec.dtype if rec.dtype is not None else rec.queries.dtype)
    except ValueError as exc:
        return unverified(str(exc))
    missing = [f for f in DIGESTED if f not in rec.digests]
    if missing:
        return unverified(f"its digests do not cover {', '.join(missing)} (a capture of an older hypviz: capture again)",
                          tol)
    now = digests(rec)
    edited = [f for f in DIGESTED if rec.digests[f] != now[f]]
    if edited:
        return unverified(f"{', '.join(edited)} changed since the capture (digest differs)", tol)
    aux = {"self_term": rec.self_term} if rec.self_term is not None else None
    try:
        err = relative_error(rebuild(rec, aux), rec.checked_output)
    except Exception as exc:  # a record that cannot be rebuilt is a diagnosis, never an error of the report
        return unverified(f"the re-check failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                          tol)
    if err > tol:
        return unverified(f"the re-check from the record differs from the stored output by "
                          f"{'inf' if not math.isfinite(err) else f'{err:.2g}'} (tolerance {tol:.2g})", tol)
    what = rec.checked or "the layer's output"
    return dataclasses.replace(rec, verify_error=err, verify_tolerance=tol,
                               verify_note=f"verified: {what} rebuilt by {rec.aggregation}, re-checked from the record")
