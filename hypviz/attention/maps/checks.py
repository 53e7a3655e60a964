r"""The attention functions' argument checks, done once per public call, and the broadcasting of checked inputs.

Points are ``(..., N, d + 1)``, time first, on :math:`\langle x, x\rangle_L = -k` (checked by
:func:`hypviz.lorentz.check_points`); a bad argument gets one line, ``"<name> must be <expected>, got <value>"``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hypviz.base import kinds, validate
from hypviz.lorentz import as_tensor, check_k, check_points, lift

__all__ = ["check_kind", "check_temperature", "checked_inputs", "resolve_device", "flatten_batch", "check_power",
           "check_norm_scale", "check_eps"]

ArrayLike = Any


def check_kind(kind: Any, name: str = "kind", allowed: tuple[str, ...] | None = None) -> str:
    """``kind`` if it is a registered kind (of ``allowed``, default every registered kind)."""
    return kinds.check(kind, name, allowed)


def check_temperature(temperature: Any, d: int) -> float:
    r""":math:`\tau`, a finite number from :data:`hypviz.base.validate.TEMPERATURE_MIN` (the smallest normal float64)
    up, default :math:`\sqrt{d}`."""
    if temperature is None:
        return math.sqrt(d)
    return validate.temperature(temperature, "temperature", f" (default sqrt(d) = {math.sqrt(d):.4g})")


def check_power(power: Any) -> float:
    return validate.positive(power, "power", " (Hypformer's power_k, default 2)")


def check_norm_scale(norm_scale: Any) -> float:
    return validate.number(norm_scale, "norm_scale")


def check_eps(eps: Any) -> float:
    return validate.number(eps, "eps", minimum=0.0)


def flatten_batch(t: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """``(..., n, c)`` broadcast to ``batch`` and flattened to ``(H, n, c)``."""
    return t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:])


def _points(x: ArrayLike, name: str, rows: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if t.dim() < 2 or t.shape[-1] < 2:
        raise ValueError(
            f"{name}: expected shape (..., {rows}, d + 1) with d >= 1 (time coordinate first), got shape {tuple(t.shape)}"
        )
    if t.numel() == 0:
        raise ValueError(f"{name}: expected at least one point, got the empty shape {tuple(t.shape)}")
    return t


def _heads_first(t: torch.Tensor, heads_axis: int | None, name: str) -> torch.Tensor:
    """Move the heads axis of a ``(..., N, d + 1)`` layout such as ``(N, H, d + 1)`` to the front."""
    if heads_axis is None:
        return t
    heads_axis = validate.integer(heads_axis, "heads_axis", hint=" axis or None")
    if t.dim() < 3:
        raise ValueError(f"heads_axis={heads_axis}: {name} has shape {tuple(t.shape)}, no axis besides (N, d + 1)")
    ax = heads_axis + t.dim() if heads_axis < 0 else heads_axis
    if not 0 <= ax < t.dim() - 1:
        raise ValueError(
            f"heads_axis={heads_axis} is out of range for {name} of shape {tuple(t.shape)} "
            f"(expected 0..{t.dim() - 2}; the last axis holds the coordinates)"
        )
    return t.movedim(ax, 0)


def _on_hyperboloid(t: torch.Tensor, k: float, name: str) -> torch.Tensor:
    """:func:`check_points`, except that float64 points made in float32 are checked there and re-lifted.

    ``x.double()`` of float32 points is off ``<x, x>_L = -k`` by float32 rounding, far above float64's
    tolerance.  When every coordinate is a float32 number and the points pass float32's check, they
    were made in float32: their time coordinate is recomputed from the spatial part in float64.
    """
    try:
        return check_points(t, k=k, name=name)
    except ValueError:
        if t.dtype != torch.float64 or not bool(torch.isfinite(t).all()):
            raise
        as32 = t.to(torch.float32)
        if not torch.equal(as32.to(torch.float64), t):
            raise
        try:
            check_points(as32, k=k, name=name)
        except ValueError:
            raise
        return lift(t[..., 1:], k=k)



def checked_inputs(
    queries: ArrayLike,
    keys: ArrayLike,
    *,
    k: float,
    values: ArrayLike | None = None,
    heads_axis: int | None = None,
    detach: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, float, torch.Size]:
    """Shapes, dtypes, devices, broadcasting and the hyperboloid; returns tensors and the batch shape."""
    k = check_k(k)
    q = _heads_first(_points(queries, "queries", "N"), heads_axis, "queries")
    kappa = _heads_first(_points(keys, "keys", "M"), heads_axis, "keys")
    v = None if values is None else _heads_first(_points(values, "values", "M"), heads_axis, "values")
    if detach:
        q, kappa = q.detach(), kappa.detach()
        v = None if v is None else v.detach()
    if q.shape[-1] != kappa.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same number of coordinates d + 1: "
            f"queries is {tuple(q.shape)}, keys is {tuple(kappa.shape)}"
        )
    if v is not None and v.shape[-2] != kappa.shape[-2]:
        raise ValueError(
            f"values must have one row per key (M = {kappa.shape[-2]}): keys is {tuple(kappa.shape)}, values is {tuple(v.shape)}"
        )
    for t, name in ((kappa, "keys"), (v, "values")):
        if t is None:
            continue
        if t.dtype != q.dtype:
            raise TypeError(f"queries are {q.dtype} but {name} are {t.dtype}; convert them to one dtype")
        if t.device != q.device:
            raise ValueError(f"queries are on {q.device} but {name} are on {t.device}; move them to one device")
    shapes = [q.shape[:-2], kappa.shape[:-2]] + ([] if v is None else [v.shape[:-2]])
    try:
        batch = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        got = ", ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"the leading (head/batch) axes of queries, keys[, values] do not broadcast: {got}") from None
    q = _on_hyperboloid(q, k, "queries")
    kappa = _on_hyperboloid(kappa, k, "keys")
    if v is not None:
        v = _on_hyperboloid(v, k, "values")
    return q, kappa, v, k, batch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The device a computation runs on: ``"auto"`` is CUDA when available, else the CPU.

    ``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` (or a :class:`torch.device`) are accepted.

    Raises
    ------
    ValueError
        For any other device, for CUDA on a machine without it, or for a CUDA index the machine does not have.

    Examples
    --------
    >>> from hypviz.attention import resolve_device
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("auto").type in ("cpu", "cuda", "mps")
    True
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


