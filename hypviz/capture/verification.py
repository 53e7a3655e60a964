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
float64, 3.5e-4 in float32, 0.031 in float16, 0.088 in bfloat16).  :func:`fit_temperature` measures
:math:`\tau` from the output when the attribute-derived one does not reproduce it (a fork whose
logits are divided by :math:`2\,\mathrm{scale}` is caught this way).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Callable

import torch

from hypviz.attention import attention_map, focused_linear_attention
from hypviz.attention.kernels import distance_logits
from hypviz.lorentz import lift

__all__ = ["AGGREGATIONS", "tolerance", "relative_error", "layer_map", "rebuild", "verify", "fit_temperature",
           "lorentz_centroid", "gyromidpoint", "DIGESTED", "digests", "recheck"]

#: The aggregations :func:`rebuild` knows (see the module docstring).
AGGREGATIONS: tuple[str, ...] = ("centroid_mean_heads", "midpoint_heads", "focused_mean_lift", "gate_midpoint",
                                 "gyromidpoint_heads", "centroid_heads", "focused_heads", "gate_centroid")
_F64 = torch.float64
_BLOCK_ELEMENTS = 2**23  # float64 map entries rebuilt at a time (64 MiB): rows in blocks, never the whole N x M
_FIT_ROWS = 256  # query rows the temperature is fitted on (then verified on all rows)
_ROWWISE = ("centroid_mean_heads", "midpoint_heads", "gate_midpoint", "gyromidpoint_heads", "centroid_heads",
            "gate_centroid")


def tolerance(dtype: str | torch.dtype | None) -> float:
    r"""The verification tolerance, :math:`\sqrt{\varepsilon}` of the dtype the model computed in (float32 if unknown)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, torch.float32)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        dtype = torch.float32
    return math.sqrt(torch.finfo(dtype).eps)


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
    r"""``a (..., d + 1)`` rescaled onto :math:`\langle x, x\rangle_L = -k`: :math:`\sqrt{k}\,a/\sqrt{|\langle a, a\rangle_L|}`."""
    return math.sqrt(k) * a / _inner(a, a).abs().sqrt()


def gyromidpoint(values_ball: torch.Tensor, weights: torch.Tensor, *, k: float) -> torch.Tensor:
    r"""Weighted Möbius gyromidpoint ``(..., N, d)`` of ball points ``(..., M, d)`` (radius :math:`\sqrt{k}`), weights ``(..., N, M)``.

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
    r"""The map the layer applies, ``(H, N, M)`` float64: :meth:`LayerRecord.attention_map` on float64 points (with
    the record's mask or adjacency, :meth:`LayerRecord.applied`).

    With a negative ``scale`` (``scale_sign = -1``) the distance logits change sign,
    :math:`A = \mathrm{softmax}_j(+\tfrac12\|q_i - \kappa_j\|_L^2/|\tau|)`.
    """
    q, kk = rec.queries.to(_F64), rec.keys.to(_F64)
    if rec.scale_sign < 0:
        if rec.kind != "distance":
            raise ValueError(f"layer {rec.name!r}: a negative scale is handled for kind 'distance' only, got {rec.kind!r}")
        half_sq = distance_logits(q, kk, k=rec.k, temperature=-1.0)  # +1/2 |q - kappa|^2_L >= 0, the kernels' stable operands
        tau = rec.temperature if rec.head_temperatures is None else \
            torch.tensor(rec.head_temperatures, dtype=_F64).reshape(-1, 1, 1)
        return rec.applied(torch.softmax(half_sq / tau, dim=-1))
    return rec.applied(rec.unmasked_map(q, kk))


def rebuild(rec: Any, aux: dict[str, Any] | None = None, *, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The layer's output rebuilt from the record (float64), by ``rec.aggregation``; ``aux`` holds what the
    aggregation needs beyond the record (``"self_term"`` ``(H, N, d)`` for the focused layers, ``"adjacency"``
    ``(N, M)`` for the gate); ``weights`` overrides the map (used by :func:`fit_temperature`).

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


def fit_temperature(rec: Any, seen: torch.Tensor, aux: dict[str, Any] | None = None,
                    make: Callable[[float], Any] | None = None) -> tuple[float, float]:
    r"""The :math:`\tau` whose rebuilt output is closest to ``seen``: ``(temperature, error)``.

    A grid of 41 values of :math:`\log\tau` over :math:`[\tau_0/100, 100\,\tau_0]` (:math:`\tau_0` =
    ``rec.temperature``), then 60 golden-section steps around the best one, on the first 256 query
    rows; the error returned is that of all rows at the fitted :math:`\tau`.  ``make(temperature)`` returns the
    record at that temperature (default: ``dataclasses.replace(rec, temperature=temperature)``).
    """
    full, full_aux, full_seen = rec, aux, seen
    if rec.n_queries > _FIT_ROWS:
        rec, aux, seen = _rows(rec, 0, _FIT_ROWS), _rows_aux(aux or {}, 0, _FIT_ROWS), _seen_rows(rec, seen, _FIT_ROWS)
    make = make or (lambda t: dataclasses.replace(rec, temperature=t))
    tau0 = float(rec.temperature)

    def err(logt: float) -> float:
        return relative_error(rebuild(make(math.exp(logt)), aux), seen)

    grid = [math.log(tau0) + math.log(100.0) * (i / 20.0 - 1.0) for i in range(41)]
    errs = [err(g) for g in grid]
    i = min(range(len(grid)), key=errs.__getitem__)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = err(a), err(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = err(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = err(b)
    best = (a, fa) if fa < fb else (b, fb)
    if errs[i] < best[1]:
        best = (grid[i], errs[i])
    tau = math.exp(best[0])
    if full is not rec:
        return tau, relative_error(rebuild(dataclasses.replace(full, temperature=tau), full_aux), full_seen)
    return tau, best[1]


#: The fields a record's check depends on, digested at capture (:func:`digests`) and re-checked by :func:`recheck`.
DIGESTED: tuple[str, ...] = ("queries", "keys", "values", "k", "kind", "temperature", "head_temperatures", "power",
                             "norm_scale", "bias", "scale_sign", "aggregation", "mask", "adjacency", "dtype",
                             "checked_output", "self_term")


def _digest(value: Any) -> str:
    h = hashlib.sha256()
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = t.to_dense() if t.layout != torch.strided else t
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


def digests(rec: Any) -> dict[str, str]:
    """SHA-256 (hex) of each field of :data:`DIGESTED` (tensors by dtype, shape and bytes; other values by ``repr``)."""
    return {f: _digest(getattr(rec, f, None)) for f in DIGESTED}


def recheck(rec: Any) -> Any:
    r"""``rec`` with its verification redone from what it holds (a stored verdict is never trusted).

    Verified only when the output stored at capture (``checked_output``) is rebuilt from the stored queries,
    keys, values and map (:func:`rebuild`) to :func:`tolerance` of the model's dtype and no field of
    :data:`DIGESTED` differs from its digest at capture; otherwise *not verified*, naming the edited fields,
    or saying that the record holds no output to re-check, or by how much the re-check failed.
    """
    tol = tolerance(rec.dtype)

    def unverified(note: str) -> Any:
        return dataclasses.replace(rec, verify_error=None, verify_tolerance=tol, verify_note=f"not verified: {note}")

    if rec.checked_output is None:
        old = str(rec.verify_note or "")
        return unverified(old[len("not verified: "):] if old.startswith("not verified: ")
                          else "the record holds no layer output to re-check (a stored verdict is not trusted)")
    if rec.digests is not None:
        now = digests(rec)
        edited = [f for f in DIGESTED if rec.digests.get(f) != now[f]]
        if edited:
            return unverified(f"{', '.join(edited)} changed since the capture (digest differs)")
    aux = {"self_term": rec.self_term} if rec.self_term is not None else None
    try:
        err = relative_error(rebuild(rec, aux), rec.checked_output)
    except Exception as exc:  # a record that cannot be rebuilt is a diagnosis, never an error of the report
        return unverified(f"the re-check failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if err > tol:
        return unverified(f"the re-check from the record differs from the stored output by "
                          f"{'inf' if not math.isfinite(err) else f'{err:.2g}'} (tolerance {tol:.2g})")
    what = rec.checked or "the layer's output"
    return dataclasses.replace(rec, verify_error=err, verify_tolerance=tol,
                               verify_note=f"verified: {what} rebuilt by {rec.aggregation}, re-checked from the record")
