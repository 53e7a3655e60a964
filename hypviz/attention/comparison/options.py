r"""The options of a comparison: :class:`CompareOptions`, one frozen record, checked once when it is made.

:func:`hypviz.attention.compare`, :func:`hypviz.attention.plan_compare` and :func:`hypviz.attention.compare_maps`
take it as ``options=`` and, as keyword arguments, any of its fields or any option a registered kernel declares
(:attr:`hypviz.attention.Kernel.options`: ``power``, ``norm_scale``, ``features``, a kernel's own): :func:`gather`
puts the keywords into it, and refuses a name no function reads in one line naming the names that exist.  The
command's compare and the reports pass their settings the same way.  A kernel's option is checked by its kernel
when the kinds that read it are known (:meth:`CompareOptions.kernel_values`); ``k`` with the points; every other
field here.

Examples
--------
>>> from hypviz.attention.comparison.options import CompareOptions, gather
>>> opts = gather(None, {"temperature": 2.0, "rows": 64, "power": 3.0}, "compare")
>>> opts.temperature, opts.rows, opts.kernel_options
(2.0, 64, {'power': 3.0})
>>> gather(opts, {"tempreature": 1.0}, "compare")
Traceback (most recent call last):
    ...
TypeError: compare got an unknown option 'tempreature' (its options: k, temperature, topk, ...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from hypviz.attention.comparison.result import TOPK_MAX
from hypviz.attention.maps.checks import resolve_device
from hypviz.attention.maps.kernels import option_names, unknown_options
from hypviz.attention.maps.kernels import options as kind_options
from hypviz.base import validate
from hypviz.base.kinds import Kind
from hypviz.base.messages import short

__all__ = ["CompareOptions", "COMPARE_READS", "GIVEN_MAPS_READS", "gather"]

_PRECISIONS = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


@dataclasses.dataclass(frozen=True)
class CompareOptions:
    r"""How two attention maps are compared: every setting of :func:`hypviz.attention.compare` and
    :func:`hypviz.attention.compare_maps` besides the maps' inputs, checked once when the record is made.

    Parameters
    ----------
    k : float
        Curvature parameter of the points, :math:`\langle x, x\rangle_L = -k` (compare; checked with the points).
    temperature : float, optional
        :math:`\tau`, default :math:`\sqrt{d}`.  Hypformer's full attention is ``"distance"`` at
        :math:`\tau = k \cdot \mathrm{scale} / 2` (its learned ``scale``, initialised to :math:`\sqrt{d}`).
    topk : int
        The :math:`k` of the top-k agreement (capped at :math:`M`).
    spearman : bool, optional
        Compute the per-row Spearman correlation (:math:`O(N M \log M)`); by default when :math:`M \le 4096`.
    rows : int, optional
        Compute the statistics on ``rows`` :math:`\ge 2` query rows drawn uniformly without replacement (the same rows
        for every head), against all keys; every mean then has a confidence interval.  ``rows >= N``: every row.
    seed : int
        Seed of the ``rows`` drawn, and of a kernel's random draws unless ``rf_seed`` is given.
    rf_seed : int, optional
        Seed of the kernels' random draws (the random features of ``"distance_rf"``; default: ``seed``).
    heads_axis : int, optional
        The heads axis of a layout such as ``(N, H, d + 1)`` (Hypformer's), moved to the front.
    device : str or torch.device
        ``"auto"`` (CUDA when available, else the CPU), ``"cpu"`` or ``"cuda[:i]"``: where the blocks are computed.
    block_rows : int, optional
        Query rows per block (capped at :math:`N`); by default from ``memory_budget``.
    memory_budget : int, optional
        Bytes for the three ``block_rows x M`` buffers (default: cache-sized on the CPU, at most 256 MiB; a quarter
        of the free device memory on CUDA, 256 MiB to 8 GiB).
    progress : bool, optional
        A tqdm bar on stderr; by default only for long runs (64 blocks and :math:`2^{28}` logits) on a terminal.
    atol : float, optional
        Given maps: how far a row's sum may be from 1 and a weight below 0 (and a row's weight off its kept keys);
        default :math:`\sqrt{\varepsilon}` of the coarser dtype (:math:`3.5 \cdot 10^{-4}` for float32,
        :math:`1.5 \cdot 10^{-8}` for float64).
    tolerance : float, optional
        Given maps: the TV below which two rows are *identical*, overriding their rounding level.
    precision : str or torch.dtype, optional
        Given maps: the dtype they were computed in (``"float16"``, ``"bfloat16"``, ``"float32"``, ``"float64"``):
        its rounding of the logits counts (default with ``logit_scale``: each map's storage dtype; with neither,
        only the storage rounding counts).
    logit_scale : float, optional
        Given maps: the size :math:`L` of the products' terms the logits were summed from: for logits
        :math:`x \cdot y_j`, :math:`\max_j \sum_i |x_i y_{j,i}|` or its bound :math:`\max_j \|x\| \|y_j\|` (e.g.
        ``1e4`` for float32 products of 64 terms of size 156), not the size of the logits, which cancellation can
        make much smaller; the rounding of the computation then counts.  Default with ``precision``: per row
        :math:`\max(1, \mathbb{E}_P \log(\max P / P))`, the smallest logit spread that makes the map.
    kernel_options : mapping of str to value
        Options of the kernels (:attr:`hypviz.attention.Kernel.options`), by name: ``power`` and ``norm_scale``
        (``"focused"``), ``features`` (``"distance_rf"``), a registered kernel's own.  Each name must be declared by
        a registered kernel; its value is checked by the kernel of each compared kind that reads it, and ignored
        by the others.

    Raises
    ------
    ValueError
        For a field outside its range, in one line naming it (as the functions that take it).
    TypeError
        For ``kernel_options`` that are not a mapping of option names that a registered kernel declares.

    Examples
    --------
    >>> from hypviz.attention import CompareOptions
    >>> CompareOptions(temperature=2.0, rows=64).rows
    64
    >>> CompareOptions(topk=0)
    Traceback (most recent call last):
        ...
    ValueError: topk must be an integer from 1 to 2147483647, got 0
    """

    k: float = 1.0
    temperature: float | None = None
    topk: int = 5
    spearman: bool | None = None
    rows: int | None = None
    seed: int = 0
    rf_seed: int | None = None
    heads_axis: int | None = None
    device: str | torch.device = "auto"
    block_rows: int | None = None
    memory_budget: int | None = None
    progress: bool | None = None
    atol: float | None = None
    tolerance: float | None = None
    precision: str | torch.dtype | None = None
    logit_scale: float | None = None
    kernel_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        checked = {
            "temperature": None if self.temperature is None else validate.temperature(
                self.temperature, "temperature", " (None: sqrt(d), d the spatial dimension)"),
            "topk": validate.integer(self.topk, "topk", 1, maximum=TOPK_MAX),
            "spearman": _flag(self.spearman, "spearman"),
            "rows": validate.integer(self.rows, "rows", 2, " (query rows to sample; None: all)", allow_none=True),
            "seed": validate.seed(self.seed, "seed"),
            "rf_seed": None if self.rf_seed is None else validate.seed(self.rf_seed, "rf_seed"),
            "heads_axis": validate.integer(self.heads_axis, "heads_axis", hint=" axis or None", allow_none=True),
            "device": resolve_device(self.device),
            "block_rows": validate.integer(self.block_rows, "block_rows", 1, " (None: automatic)", allow_none=True),
            "memory_budget": validate.integer(self.memory_budget, "memory_budget", 1, " (bytes; None: automatic)",
                                              allow_none=True),
            "progress": _flag(self.progress, "progress"),
            "atol": None if self.atol is None else validate.positive(self.atol, "atol"),
            "tolerance": None if self.tolerance is None else validate.number(self.tolerance, "tolerance", 0.0),
            "precision": _precision(self.precision),
            "logit_scale": None if self.logit_scale is None else validate.positive(
                self.logit_scale, "logit_scale", " (the size of the products' terms the logits were summed from)"),
            "kernel_options": _kernel_options(self.kernel_options),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def kernel_values(self, *kinds: Kind) -> dict[str, Any]:
        """The options the ``kinds`` read, checked by their kernels, by name (the others take the kernels' defaults).

        A kernel's ``seed`` is ``kernel_options["seed"]``, else ``rf_seed``, else ``seed``.

        Examples
        --------
        >>> from hypviz.base import kinds
        >>> CompareOptions(kernel_options={"power": 3}).kernel_values(kinds.get("focused"), kinds.get("distance"))
        {'power': 3.0, 'norm_scale': 1.0}
        """
        given, names = dict(self.kernel_options), {}
        if "seed" not in given:
            given["seed"] = self.seed if self.rf_seed is None else self.rf_seed
            names["seed"] = "seed" if self.rf_seed is None else "rf_seed"
        values: dict[str, Any] = {}
        for kind in kinds:
            values.update(kind_options(kind, given, names))
        return values


#: The fields :func:`hypviz.attention.compare` and :func:`hypviz.attention.plan_compare` read.
COMPARE_READS: frozenset[str] = frozenset({"k", "temperature", "topk", "spearman", "rows", "seed", "rf_seed", "heads_axis",
                                           "device", "block_rows", "memory_budget", "progress", "kernel_options"})
#: The fields :func:`hypviz.attention.compare_maps` reads (its maps are given: no kernel, no points).
GIVEN_MAPS_READS: frozenset[str] = frozenset({"topk", "spearman", "atol", "tolerance", "precision", "logit_scale"})

_FIELDS = tuple(f.name for f in dataclasses.fields(CompareOptions))


def gather(options: CompareOptions | None, settings: Mapping[str, Any], caller: str,
           reads: frozenset[str] = COMPARE_READS) -> CompareOptions:
    """``options`` (default: every default) with the keyword ``settings`` in place, checked once.

    Each keyword is a field that ``caller`` reads, or (where ``caller`` reads ``kernel_options``) an option a
    registered kernel declares, added to ``kernel_options``; anything else is a ``TypeError`` naming what ``caller``
    takes.  Fields of ``options`` that ``caller`` does not read are left as they are (one record may serve several
    calls).

    Parameters
    ----------
    options : CompareOptions or None
        The record the keywords replace fields of (None: the defaults).
    settings : mapping of str to value
        The keyword arguments of the call.
    caller : str
        The function's name, for the messages.
    reads : frozenset of str
        The fields ``caller`` reads (:data:`COMPARE_READS`, :data:`GIVEN_MAPS_READS`).

    Returns
    -------
    CompareOptions
        ``options`` itself when no keyword is given, else a new record.

    Raises
    ------
    TypeError
        For ``options`` that are not a :class:`CompareOptions`, or a keyword ``caller`` does not take.
    ValueError
        For a value outside its range (:class:`CompareOptions`).

    Examples
    --------
    >>> gather(None, {"topk": 3, "atol": 1e-6}, "compare_maps", GIVEN_MAPS_READS).topk
    3
    >>> gather(None, {"rows": 8}, "compare_maps", GIVEN_MAPS_READS)
    Traceback (most recent call last):
        ...
    TypeError: compare_maps takes no option 'rows' (it takes: topk, spearman, atol, tolerance, precision, logit_scale)
    """
    if options is not None and not isinstance(options, CompareOptions):
        raise TypeError(f"options must be a hypviz.attention.CompareOptions (or None), got {type(options).__name__}")
    base = CompareOptions() if options is None else options
    fields, extra = {}, {}
    for name, value in settings.items():
        if name in reads:
            fields[name] = value
        elif "kernel_options" in reads and name not in _FIELDS and not unknown_options([name]):
            extra[name] = value
        else:
            raise TypeError(_unknown(name, caller, reads))
    if extra:
        fields["kernel_options"] = {**fields.get("kernel_options", base.kernel_options), **extra}
    return dataclasses.replace(base, **fields) if fields else base


def _unknown(name: str, caller: str, reads: frozenset[str]) -> str:
    """The one line refusing the keyword ``name`` of ``caller``: what it takes, in the record's order."""
    own = ", ".join(f for f in _FIELDS if f in reads)
    other = [f for f in _FIELDS if f not in reads]
    if name in other:
        return f"{caller} takes no option {name!r} (it takes: {own})"
    kernel = "; the registered kernels' options: " + (", ".join(option_names()) or "none")
    return f"{caller} got an unknown option {short(name)} (its options: {own}{kernel if 'kernel_options' in reads else ''})"


def _flag(value: Any, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be True, False or None (automatic), got {value!r}")
    return value


def _precision(value: Any) -> torch.dtype | None:
    if value is None:
        return None
    if isinstance(value, torch.dtype) and value in _PRECISIONS.values():
        return value
    if isinstance(value, str) and value.replace("torch.", "") in _PRECISIONS:
        return _PRECISIONS[value.replace("torch.", "")]
    raise ValueError(f"precision must be one of {', '.join(_PRECISIONS)} (the dtype the maps were computed in), got {value!r}")


def _kernel_options(value: Any) -> dict[str, Any]:
    """``value`` as a dict of kernel options by name, each declared by a registered kernel."""
    if not isinstance(value, Mapping):
        raise TypeError(f"kernel_options must be a mapping of kernel option names to values, got {short(value)}")
    unknown = unknown_options(value)
    if unknown:
        raise TypeError(f"kernel_options: {short(unknown[0])} is no option of a registered kernel (their options: "
                        f"{', '.join(option_names()) or 'none'})")
    return dict(value)
