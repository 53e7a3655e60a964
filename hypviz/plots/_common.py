"""Private helpers of the matplotlib figure functions: where they draw, how they read arrays.

Where: a new figure, or Axes given to them (``ax=`` / ``axes=``).  Every public ``*_mpl``
function of :mod:`hypviz.plots` draws into given Axes when it gets them, puts its figure-level
parts (colourbar, legend, overall title) on the Axes' container (the ``Figure``, or the
``SubFigure`` they belong to, so that several multi-panel figures compose into one ``Figure``
through ``Figure.subfigures``) and returns the root ``Figure``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

import hypviz.plots.style as style

if TYPE_CHECKING:  # matplotlib is imported lazily, inside the functions
    from matplotlib.axes import Axes


def _axes_class() -> type[Axes]:
    from matplotlib.axes import Axes

    return Axes


def check_axes(ax: Any, name: str = "ax", projection: str | None = None) -> Any:
    """``ax`` if it is a matplotlib ``Axes`` (of the given ``projection``, e.g. ``"3d"``)."""
    if not isinstance(ax, _axes_class()):
        raise TypeError(f"{name} must be a matplotlib Axes or None, got {type(ax).__name__}")
    if projection is not None and ax.name != projection:
        raise TypeError(f"{name} must be a matplotlib Axes with projection={projection!r}, got one of kind {ax.name!r}")
    return ax


def single(ax: Any, figsize: tuple[float, float], projection: str | None = None) -> tuple[Any, Any]:
    """``(container, ax)``: a new constrained-layout figure with one Axes, or the given ``ax`` and its container."""
    if ax is None:
        fig = style.new_figure(figsize)
        return fig, (fig.add_subplot(projection=projection) if projection else fig.subplots())
    check_axes(ax, "ax", projection)
    return ax.figure, ax


def panels(axes: Sequence[Any] | None, n: int, figsize: tuple[float, float], name: str = "axes") -> tuple[Any, list[Any]]:
    """``(container, [ax, ...])``: ``n`` side-by-side Axes of a new figure, or the ``n`` given ones."""
    if axes is None:
        fig = style.new_figure(figsize)
        return fig, list(fig.subplots(1, n, squeeze=False)[0])
    given = list(axes.flat) if hasattr(axes, "flat") else list(axes)
    if len(given) != n:
        raise ValueError(f"{name} must be {n} Axes (one per panel), got {len(given)}")
    for i, ax in enumerate(given):
        check_axes(ax, f"{name}[{i}]")
    if len({id(ax.figure) for ax in given}) != 1:
        raise ValueError(f"{name} must all belong to one figure")
    return given[0].figure, given


def root(container: Any) -> Any:
    """The top-level ``Figure`` of a ``Figure`` or ``SubFigure``."""
    return container.get_figure(root=True) if hasattr(container, "get_figure") else container


# --------------------------------------------------------------------------- #
# arrays given to the figures
# --------------------------------------------------------------------------- #
def as_2d(x: Any, name: str) -> np.ndarray:
    """A non-empty ``(N, M)`` float64 array of a map (numpy or torch)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 2-D map (N, M); got shape {arr.shape}")
    return arr


def as_1d(x: Any, name: str) -> np.ndarray:
    """A non-empty flat float64 array (numpy or torch)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty sequence of numbers")
    return arr


def positive(v: np.ndarray) -> np.ndarray:
    """Values for a log axis: non-positive ones are not drawn (NaN)."""
    return np.where(v > 0, v, np.nan)
