r"""A captured attention layer and its file: :class:`LayerRecord`, :func:`save`, :func:`load`.

A record holds one call of one attention layer: its queries, keys and values (points of the
Lorentz model, time coordinate first, heads first) and what the layer computes from them (the
kind and its parameters), enough to run :func:`hypviz.attention.attention_map` and
:func:`hypviz.attention.compare` on it.  Records are made by :mod:`hypviz.capture`; a file
written by :func:`save` is one ``torch.save`` dictionary, read back (validated, with
``weights_only=True``) by :func:`load`.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import numbers
import os
import platform
import re
import uuid
import warnings
import zipfile
from pathlib import Path
from typing import IO, Any, Literal, Mapping, Sequence, cast, overload

import torch

from hypviz.attention import attention_map
from hypviz.attention.maps import kernels
from hypviz.attention.maps.kernels import distance_logits, kernel_for
from hypviz.base import kinds as registry
from hypviz.base import plugins as plugin_loader
from hypviz.base.messages import short, torch_load_reason
from hypviz.lorentz import as_tensor, check_k, check_points

__all__ = ["FORMAT", "VERSION", "MODES", "MODELS", "LayerRecord", "save", "load", "parse", "modes", "add_mode", "masked_softmax",
           "made_by"]

#: The ``"format"`` entry of a file written by :func:`save`.
FORMAT = "hypviz.capture"
#: The file format's version; :func:`load` refuses newer ones.
VERSION = 1
#: The modes every hypviz knows: a Hypformer-style layer's ``attention_type`` and ``"generic"`` (``layers=``); the
#: families of the registered readers are added by :func:`add_mode` (:func:`modes` lists all of them).
MODES: tuple[str, ...] = ("linear_focused", "full", "generic")
_MODES: list[str] = list(MODES)


def add_mode(mode: str) -> str:
    """Make ``mode`` (a registered reader's ``family``) a valid :attr:`LayerRecord.mode`; returns it."""
    if not isinstance(mode, str) or not mode.isidentifier():
        raise ValueError(f"mode must be a name (letters, digits, underscores), got {short(mode)}")
    if mode not in _MODES:
        _MODES.append(mode)
    return mode


def modes() -> tuple[str, ...]:
    """The valid :attr:`LayerRecord.mode` s now: :data:`MODES` and the families of the registered readers.

    Examples
    --------
    >>> from hypviz.capture import modes
    >>> {"linear_focused", "full", "generic", "hypercore", "poincare"} <= set(modes())
    True
    """
    return tuple(_MODES)


def made_by(reader: type, kind: str) -> dict[str, Any]:
    """The fields of a record saying what made it: ``reader``, the reader's class as ``"module.Class"``, and
    ``plugins``, the modules another process must load to read the record back (the reader's module and the module
    that registered ``kind``, those outside hypviz), None when hypviz's own.

    Examples
    --------
    >>> from hypviz.capture import READERS
    >>> from hypviz.capture.records import made_by
    >>> made_by(READERS[-1], "poincare")
    {'reader': 'hypviz.capture.family_readers.PoincareReader', 'plugins': None}
    """
    module = getattr(reader, "__module__", None) or ""
    found = [module, registry.provider(kind)]
    mods = [m for m in dict.fromkeys(found) if plugin_loader.is_module_name(m) and m != "hypviz" and not m.startswith("hypviz.")]
    return {"reader": f"{module}.{reader.__qualname__}", "plugins": mods or None}


#: The ``model=`` choices, what named modules output: hyperboloid points or Poincare-ball points.
MODELS: tuple[str, ...] = ("lorentz", "poincare")
HYPFORMER_KIND = {"linear_focused": "focused", "full": "distance"}
ROLES = ("queries", "keys", "values")
# optional fields of a record (file version 1 without them reads as before)
_EXTRA_FIELDS = ("bias", "scale_sign", "aggregation", "verify_error", "verify_tolerance", "verify_note", "dtype",
                 "training", "temperature_source", "mask", "adjacency", "batch", "detail", "checked", "head_temperatures",
                 "checked_output", "self_term", "digests", "reader", "plugins")
NAME_MAX = 256  # characters of a record's reader
#: The file names a capture is saved under: what ``hypviz compare CAPTURE`` reads.
EXTENSIONS: tuple[str, ...] = (".pt", ".pth")


def recorded_options(kind: str) -> dict[str, bool]:
    """The options of ``kind`` a record holds as fields, and whether a record of it must give each: as its kernel
    declares them (:class:`hypviz.attention.maps.kernels.Option`'s ``recorded``; an optional one that is None reads as its
    default)."""
    kd = registry.get(kind)
    declared = kernel_for(kd).options
    recorded = {o: declared[o].recorded for o in kd.options if o in declared}
    return {o: r for o, r in recorded.items() if r is not None}


@overload
def opt_float(value: Any, name: str, *, positive: bool = False, none_ok: Literal[False]) -> float: ...
@overload
def opt_float(value: Any, name: str, *, positive: bool = False, none_ok: bool = True) -> float | None: ...
def opt_float(value: Any, name: str, *, positive: bool = False, none_ok: bool = True) -> float | None:
    """``value`` as a float: a real number (a Python or numpy int or float; never a bool, a string or a tensor),
    finite (and > 0 with ``positive``), or None with ``none_ok``; else a one-line ``ValueError`` (wrong value) or
    ``TypeError`` (wrong type) naming ``name``."""
    what = ("a positive finite number" if positive else "a finite number") + (" or None" if none_ok else "")
    if value is None and none_ok:
        return None
    if value is None or isinstance(value, bool):
        raise ValueError(f"{name} must be {what}, got {short(value)}")
    if not isinstance(value, numbers.Real):  # a string, a tensor (even of one value), a complex number ...
        raise TypeError(f"{name} must be {what}, got {_what(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be {what}, got {short(value)}") from None
    if not math.isfinite(v) or (positive and v <= 0.0):
        raise ValueError(f"{name} must be {what}, got {short(value)}")
    return v


def _what(value: Any) -> str:
    """A wrong-typed value, named by its type (and shape, for a tensor), in a message."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {short(value)}"


def masked_softmax(logits: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    r"""Row softmax of ``logits`` ``(..., N, M)`` over the keys ``keep`` (True = attended, broadcast) lets each row attend.

    .. math::

        A_{ij} = \frac{\exp s_{ij}}{\sum_{l:\,\mathrm{keep}_{il}} \exp s_{il}} \ \text{where kept}, \qquad
        A_{ij} = 0 \ \text{elsewhere}:

    the masked logits are set to :math:`-\infty` *before* the softmax, as the families do (``masked_fill(mask, -1e18)``),
    never the softmax of all keys renormalised after it (at large norms every kept weight of that softmax underflows
    beside a masked key).  A row that keeps no key is uniform over all :math:`M` keys: what ``masked_fill(mask, -1e18)``
    then a softmax computes (every logit of the row equal).

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture.records import masked_softmax
    >>> s = torch.tensor([[0.0, -2000.0, -2001.0], [5.0, 1.0, 0.0]], dtype=torch.float64)
    >>> keep = torch.tensor([[False, True, True], [False, False, False]])
    >>> masked_softmax(s, keep).round(decimals=4).tolist()   # row 0 kept keys 1, 2: softmax(-2000, -2001)
    [[0.0, 0.7311, 0.2689], [0.3333, 0.3333, 0.3333]]
    """
    if keep is None:
        return torch.softmax(logits, dim=-1)
    keep = keep.to(logits.device)
    none = ~keep.any(dim=-1, keepdim=True)  # a row that keeps no key: every logit equal, as masked_fill leaves it
    s = torch.where(keep, logits, torch.full((), -math.inf, dtype=logits.dtype, device=logits.device))
    return torch.softmax(torch.where(none, torch.zeros((), dtype=logits.dtype, device=logits.device), s), dim=-1)


@dataclasses.dataclass(eq=False, repr=False)
class LayerRecord:
    r"""The queries, keys and values of one call of one attention layer, and what the layer computes.

    All tensors are detached CPU tensors; :meth:`to_dict` gives tensors and plain Python values
    only (readable by ``torch.load(weights_only=True)``), :meth:`from_dict` reads them back.
    Construction validates the fields (shapes, dtypes, a ``kind`` matching the ``mode``, the
    parameters the kind needs) and raises a one-line ``ValueError`` or ``TypeError``; the points
    themselves are checked by :meth:`check`.

    Attributes
    ----------
    name : str
        The layer's qualified name in ``model.named_modules()`` (for ``layers=``: the key given).
    queries : torch.Tensor
        ``(H, N, d + 1)`` points on :math:`\langle x, x\rangle_L = -k`, time first, heads first
        (``H = 1`` without a head axis).
    keys : torch.Tensor
        ``(H, M, d + 1)`` points.
    values : torch.Tensor or None
        ``(H, M, d_v + 1)`` points.
    k : float
        Curvature parameter of the points (curvature :math:`-1/k`).
    mode : str
        ``"linear_focused"`` or ``"full"`` (a Hypformer-style layer), ``"generic"`` (``layers=``).
    kind : str
        The map the layer computes, a kind of :mod:`hypviz.attention`: ``"focused"`` for
        ``linear_focused``, ``"distance"`` for ``full``.
    call : int
        0, 1, ... when the same layer ran several times.
    power, norm_scale : float or None
        The focused map's ``power_k`` and ``norm_scale`` (kind ``"focused"`` only, else None).
    temperature : float or None
        The softmax temperature :math:`\tau` of a softmax kind (``full``:
        :math:`k\,\mathrm{scale}/2`, or :math:`\mathrm{scale}/2`, see the module docstring), else None.
    bias : float or None
        The gate's bias :math:`b` (kind ``"sigmoid"``).
    scale_sign : int
        -1 when the layer's learned ``scale`` is negative: its logits are then
        :math:`+\tfrac12\|q - \kappa\|_L^2/\tau` (far keys favoured), with ``temperature`` :math:`|\tau|`.
    aggregation : str or None
        How the layer combines its values (:data:`hypviz.capture.verification.AGGREGATIONS`), None if unknown.
    verify_error, verify_tolerance, verify_note : float, float, str or None
        The relative error of the layer's output rebuilt from the record against the output the hook saw
        (:mod:`hypviz.capture.verification`), the tolerance it was held to, and what was done (or why not).
    dtype : str or None
        The dtype the model computed in (``"bfloat16"``, ``"float16"``: the points are stored in float32).
    training : bool or None
        Whether the layer was in training mode when recorded.
    temperature_source : str or None
        ``"attributes"``, ``"measured"`` (one per layer call, fitted to its outputs where no attribute gives it),
        ``"given"`` or ``"default"``.
    mask : torch.Tensor or None
        Boolean ``(N, M)`` or ``(H, N, M)`` (``H`` may be 1): True where the layer lets query :math:`i` attend
        to key :math:`j` (a padding or causal mask as the layer applied it); None when every key is attended.
        A softmax map is then :math:`A_{ij} = \mathrm{softmax}_{j:\,\mathrm{mask}_{ij}}(s_{ij}/\tau)`, zero
        elsewhere, exact at any norm (:func:`masked_softmax`); a row with no key left is uniform over all keys, as the
        layers' ``masked_fill(-1e18)`` makes it.
    adjacency : torch.Tensor or None
        The graph's ``(N, M)`` adjacency a gate multiplies (``adj`` :math:`\odot G`), dense or sparse (kept sparse).
    batch : int or None
        The batch element of the call this record holds (one record per batch element), None without a batch axis.
    detail : str or None
        What the reader saw about the layer's structure, e.g. ``"with RoPE"`` or ``"heads concatenated by final_linear"``.
    checked : str or None
        Which output of the layer the verification compared (e.g. ``"per-head output entering final_linear"``).
    head_temperatures : list of float or None
        One :math:`\tau_h` per head where the family learns a temperature per head: head :math:`h`'s map is
        taken at :math:`\tau_h`, and ``temperature`` is their geometric mean (a summary only).
    checked_output, self_term : torch.Tensor or None
        What the verification compared (the layer's output, or what enters its concatenating map) and the focused
        layers' self term, stored at capture so that the check can be redone from the file
        (:func:`hypviz.capture.verification.recheck`): a stored ``verify_error`` is never trusted by itself.
    digests : dict or None
        SHA-256 of every field a verdict depends on, taken at capture: a field edited since is named.  They detect
        accidental and partial edits, not a record rewritten whole with its digests recomputed (not a signature).
    reader : str or None
        The reader that made the record, ``"module.Class"`` (:func:`made_by`).
    plugins : list of str or None
        The modules another process must load to read the record (:func:`made_by`): a reader or kind of another
        package.  A record whose ``mode`` or ``kind`` is not registered names them in its error, with how to load
        them (``hypviz --plugin MODULE``, ``import MODULE``, or the distribution's entry point).

    Examples
    --------
    >>> from hypviz.capture import LayerRecord
    >>> from hypviz.lorentz import lift
    >>> q = lift([[[0.0, 0.0], [2.0, 2.0]]], k=1.0)      # (H, N, d + 1) = (1, 2, 3)
    >>> rec = LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic",
    ...                   kind="distance", temperature=1.0)
    >>> rec.attention_map().round(decimals=4).tolist()   # softmax_j(-|q_i - q_j|^2_L / 2), |q_1 - q_2|^2_L = 4
    [[[0.8808, 0.1192], [0.1192, 0.8808]]]
    """

    name: str
    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor | None
    k: float
    mode: str
    kind: str
    call: int = 0
    power: float | None = None
    norm_scale: float | None = None
    temperature: float | None = None
    bias: float | None = None
    scale_sign: int = 1
    aggregation: str | None = None
    verify_error: float | None = None
    verify_tolerance: float | None = None
    verify_note: str | None = None
    dtype: str | None = None
    training: bool | None = None
    temperature_source: str | None = None
    mask: torch.Tensor | None = None
    adjacency: torch.Tensor | None = None
    batch: int | None = None
    detail: str | None = None
    checked: str | None = None
    head_temperatures: list[float] | None = None
    checked_output: torch.Tensor | None = None
    self_term: torch.Tensor | None = None
    digests: dict[str, str] | None = None
    reader: str | None = None
    plugins: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"LayerRecord.name must be a string, got {type(self.name).__name__}")
        if isinstance(self.call, bool) or not isinstance(self.call, int) or self.call < 0:
            raise ValueError(f"LayerRecord {short(self.name)}: call must be an integer >= 0, got {short(self.call)}")
        self.k = check_k(opt_float(self.k, f"LayerRecord {short(self.name)}: k", positive=True, none_ok=False))
        self._check_made_by()
        if self.mode not in _MODES or self.kind not in registry.names():
            plugin_loader.load_entry_points()  # a reader or kind of an installed plugin, not loaded yet
        if self.mode not in _MODES:
            raise ValueError(f"LayerRecord {short(self.name)}: " + self._unknown("mode", self.mode, _MODES))
        if self.kind not in registry.names():
            raise ValueError(f"LayerRecord {short(self.name)}: " + self._unknown("kind", self.kind, registry.names()))
        if self.mode in HYPFORMER_KIND and self.kind != HYPFORMER_KIND[self.mode]:
            raise ValueError(
                f"LayerRecord {short(self.name)}: mode {short(self.mode)} computes kind {HYPFORMER_KIND[self.mode]!r}, "
                f"got {short(self.kind)}"
            )
        self.power = opt_float(self.power, f"LayerRecord {short(self.name)}: power", positive=True)
        self.norm_scale = opt_float(self.norm_scale, f"LayerRecord {short(self.name)}: norm_scale")
        self.temperature = opt_float(self.temperature, f"LayerRecord {short(self.name)}: temperature", positive=True)
        needs = [o for o, must in recorded_options(self.kind).items() if must]
        if any(getattr(self, o) is None for o in needs):
            raise ValueError(f"LayerRecord {short(self.name)}: kind {self.kind!r} needs {' and '.join(needs)}, got None")
        self.bias = opt_float(self.bias, f"LayerRecord {short(self.name)}: bias")
        if isinstance(self.scale_sign, bool) or not isinstance(self.scale_sign, numbers.Integral):
            raise TypeError(f"LayerRecord {short(self.name)}: scale_sign must be 1 or -1, got {_what(self.scale_sign)}")
        self.scale_sign = int(self.scale_sign)
        if self.scale_sign not in (1, -1):
            raise ValueError(f"LayerRecord {short(self.name)}: scale_sign must be 1 or -1, got {short(self.scale_sign)}")
        self.verify_error = opt_float(self.verify_error, f"LayerRecord {short(self.name)}: verify_error")
        self.verify_tolerance = opt_float(self.verify_tolerance, f"LayerRecord {short(self.name)}: verify_tolerance")
        for field in ("aggregation", "verify_note", "dtype", "temperature_source", "detail", "checked"):
            if getattr(self, field) is not None and not isinstance(getattr(self, field), str):
                raise ValueError(f"LayerRecord {short(self.name)}: {field} must be a string or None, "
                                 f"got {short(getattr(self, field))}")
        if self.training is not None and not isinstance(self.training, bool):
            raise ValueError(f"LayerRecord {short(self.name)}: training must be True, False or None, got {short(self.training)}")
        if registry.get(self.kind).temperature and self.temperature is None:
            raise ValueError(f"LayerRecord {short(self.name)}: kind {short(self.kind)} needs a temperature, got None")
        self._check_points()
        self._check_extras()

    def _check_points(self) -> None:
        """Queries, keys and values: Lorentz points, (H, N|M, d + 1), one dtype; and the heads' temperatures."""
        where = f"LayerRecord {short(self.name)}"
        self.queries = _record_tensor(self.queries, f"{where} queries", "N")
        self.keys = _record_tensor(self.keys, f"{where} keys", "M")
        if self.values is not None:
            self.values = _record_tensor(self.values, f"{where} values", "M")
        q, kk, v = self.queries, self.keys, self.values
        if kk.shape[0] != q.shape[0] or kk.shape[-1] != q.shape[-1]:
            raise ValueError(
                f"{where}: queries (H, N, d + 1) and keys (H, M, d + 1) must share H and d: "
                f"queries are {tuple(q.shape)}, keys are {tuple(kk.shape)}"
            )
        if v is not None and (v.shape[0] != kk.shape[0] or v.shape[1] != kk.shape[1]):
            raise ValueError(
                f"{where}: values must be (H, M, d_v + 1) with the keys' H and M: keys are {tuple(kk.shape)}, "
                f"values are {tuple(v.shape)}"
            )
        for t, role in ((kk, "keys"), (v, "values")):
            if t is not None and t.dtype != q.dtype:
                raise TypeError(f"{where}: queries are {q.dtype} but {role} are {t.dtype}; expected one dtype")
        if self.head_temperatures is not None:
            ht = self.head_temperatures
            ht = ht.detach().reshape(-1).tolist() if isinstance(ht, torch.Tensor) else ht
            if not isinstance(ht, (list, tuple)) or len(ht) != q.shape[0]:
                raise ValueError(f"{where}: head_temperatures must be a list of {q.shape[0]} positive numbers (one per head), "
                                 f"got {short(self.head_temperatures)}")
            self.head_temperatures = [opt_float(t, f"{where}: head_temperatures", positive=True, none_ok=False) for t in ht]
            if self.temperature is None:
                raise ValueError(f"{where}: a record with head_temperatures needs temperature (their geometric mean), got None")

    def _check_extras(self) -> None:
        """The optional fields checked against the points: checked output, self term, digests, batch, mask, adjacency."""
        where = f"LayerRecord {short(self.name)}"
        q, kk = self.queries, self.keys
        for field in ("checked_output", "self_term"):
            t = getattr(self, field)
            if t is not None and (not isinstance(t, torch.Tensor) or t.layout != torch.strided or not t.is_floating_point()):
                raise ValueError(f"{where}: {field} must be a dense floating-point tensor or None, got {short(t)}")
        if self.digests is not None and (not isinstance(self.digests, dict) or not all(
                isinstance(a, str) and isinstance(b, str) for a, b in self.digests.items())):
            raise ValueError(f"{where}: digests must be a dict of field names to hex digests or None, got {short(self.digests)}")
        if self.batch is not None and (isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 0):
            raise ValueError(f"{where}: batch must be an integer >= 0 or None, got {short(self.batch)}")
        n, m, h = q.shape[1], kk.shape[1], q.shape[0]
        if self.mask is not None:
            mk = self.mask
            if not isinstance(mk, torch.Tensor) or mk.dtype != torch.bool or mk.layout != torch.strided:
                raise ValueError(f"{where}: mask must be a dense boolean tensor or None, got {short(mk)}")
            if mk.dim() == 2:
                mk = mk.unsqueeze(0)
            if mk.dim() != 3 or mk.shape[1:] != (n, m) or mk.shape[0] not in (1, h):
                raise ValueError(f"{where}: mask must be (N, M) or (H, N, M) with H in (1, {h}), N = {n}, M = {m}, "
                                 f"got {tuple(self.mask.shape)}")
            self.mask = mk.detach().cpu()
        if self.adjacency is not None:
            adj = self.adjacency
            if not isinstance(adj, torch.Tensor) or adj.layout not in (torch.strided, torch.sparse_coo, torch.sparse_csr) \
                    or tuple(adj.shape) != (n, m):
                raise ValueError(f"{where}: adjacency must be an (N, M) = ({n}, {m}) tensor (dense or sparse) or None, "
                                 f"got {short(adj) if not isinstance(adj, torch.Tensor) else tuple(adj.shape)}")
            self.adjacency = adj.detach().cpu()

    def _check_made_by(self) -> None:
        where = f"LayerRecord {short(self.name)}"
        if self.reader is not None and (not isinstance(self.reader, str) or not 0 < len(self.reader) <= NAME_MAX
                                        or not self.reader.isprintable()):
            raise ValueError(f"{where}: reader must be the reader's 'module.Class' (at most {NAME_MAX} printable "
                             f"characters) or None, got {short(self.reader)}")
        if self.plugins is not None:
            mods = list(self.plugins) if isinstance(self.plugins, (list, tuple)) else None
            if mods is None or not mods or len(mods) > 16 or not all(plugin_loader.is_module_name(m) for m in mods):
                raise ValueError(f"{where}: plugins must be a list of 1 to 16 module names (such as 'my_pkg.readers') "
                                 f"or None, got {short(self.plugins)}")
            self.plugins = mods

    def _unknown(self, field: str, value: Any, known: Sequence[str]) -> str:
        """Why ``field`` (``mode`` or ``kind``) is not registered in this process, and which module to load."""
        if not isinstance(value, str):
            return f"{field} must be one of {', '.join(map(repr, known))}, got {short(value)}"
        made = f" (made by the reader {self.reader})" if self.reader else ""
        if self.plugins and "__main__" in self.plugins:
            return (f"{field} {short(value)}{made} was registered by a script (__main__), which another process cannot "
                    "load: move the reader and kind into a module and load it with hypviz --plugin MODULE, or declare "
                    "it as an entry point of group hypviz.readers")
        if self.plugins:
            mods = " ".join(f"--plugin {m}" for m in self.plugins)
            return (f"{field} {short(value)}{made} is not registered in this process: load the plugin module that "
                    f"provides it, hypviz {mods} (in Python: import {', '.join(self.plugins)}), or install the "
                    "distribution whose entry point (group hypviz.readers or hypviz.kinds) names it")
        return (f"{field} must be one of {', '.join(map(repr, known))}, got {short(value)}{made} (a {field} registered "
                "at run time: load the module that registers it with hypviz --plugin MODULE, or install its entry point)")

    # ---- shapes ----
    @property
    def n_heads(self) -> int:
        """:math:`H`, the number of heads."""
        return int(self.queries.shape[0])

    @property
    def n_queries(self) -> int:
        """:math:`N`, the number of queries per head."""
        return int(self.queries.shape[1])

    @property
    def n_keys(self) -> int:
        """:math:`M`, the number of keys per head."""
        return int(self.keys.shape[1])

    @property
    def dim(self) -> int:
        """:math:`d`, the spatial dimension of the queries and keys (they have ``d + 1`` coordinates)."""
        return int(self.queries.shape[-1]) - 1

    # ---- use ----
    def attention_map(self) -> torch.Tensor:
        r"""The layer's attention map ``(H, N, M)`` as the layer applies it: :meth:`map_of` the recorded points.

        Softmax kinds at ``temperature``, :math:`A_{ij} = \mathrm{softmax}_j(s_{ij}/\tau)`;
        ``"focused"`` with ``power`` and ``norm_scale``,

        .. math::

            A_{ij} = \frac{\varphi(q_i)\cdot\varphi(\kappa_j)}{\sum_l \varphi(q_i)\cdot\varphi(\kappa_l)};

        with a :attr:`mask`, the softmax over the kept keys only (:func:`masked_softmax`).
        """
        return self.map_of(self.queries, self.keys)

    def map_of(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        r"""The map the layer applies to ``queries`` and ``keys`` ``(H, ., d + 1)`` (the record's points, e.g. in float64).

        Without a mask and with a positive scale, :meth:`unmasked_map`.  With a :attr:`mask` (a normalised kind) or a
        negative ``scale``, the row softmax of the :meth:`log_weights` with the masked keys set to :math:`-\infty`
        *before* it (:func:`masked_softmax`), exact at any norm; a gate multiplied by the mask.  Then times the
        :attr:`adjacency`, where there is one.  A kind whose kernel gives no log-weights is masked by :meth:`applied`.

        Raises
        ------
        ValueError
            For a negative scale with a kind other than ``"distance"``, or (:meth:`applied`) a masked row whose
            kept weights all underflowed in the unmasked map of a kind without log-weights.
        """
        gate = registry.get(self.kind).family == "gate"
        if self.scale_sign < 0 or (self.mask is not None and not gate):
            logw = self.log_weights(queries, keys)
            if logw is not None:
                return self._times_adjacency(masked_softmax(logw, self.mask))
        return self.applied(self.unmasked_map(queries, keys))

    def log_weights(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | None:
        r"""``(H, N, M)`` log-weights of the record's map, up to a constant per row (a softmax kind's logits over
        :math:`\tau`), from its kernel's operands (:class:`hypviz.attention.maps.kernels.Operands`), head by head at
        :attr:`head_temperatures`; with a negative ``scale`` (kind ``"distance"`` only)
        :math:`+\tfrac12\|q_i - \kappa_j\|_L^2/|\tau|`.  None when the kind's kernel has no operands.

        Examples
        --------
        >>> import torch
        >>> from hypviz.capture import LayerRecord
        >>> from hypviz.lorentz import lift
        >>> q = lift([[[0.0, 0.0], [2.0, 2.0]]], k=1.0)
        >>> rec = LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic",
        ...                   kind="distance", temperature=2.0)
        >>> rec.log_weights(q, q).tolist()   # -|q_i - q_j|^2_L / (2 tau), |q_1 - q_2|^2_L = 4
        [[[0.0, -1.0], [-1.0, 0.0]]]
        """
        kd = registry.get(self.kind)
        h = queries.shape[0]
        taus = self.head_temperatures or [self.temperature if self.temperature is not None else 1.0] * h
        if self.scale_sign < 0:
            if self.kind != "distance":
                raise ValueError(f"layer {short(self.name)}: a negative scale is handled for kind 'distance' only, "
                                 f"got {self.kind!r}")
            tau = torch.tensor(taus, dtype=queries.dtype, device=queries.device).reshape(-1, 1, 1)
            return distance_logits(queries, keys, k=self.k, temperature=-1.0) / tau  # the stable +1/2 |q - kappa|^2_L
        if not kernel_for(kd).has_operands():
            return None
        opts = kernels.options(kd, self.map_options())
        out = torch.empty(h, queries.shape[1], keys.shape[1], dtype=queries.dtype, device=queries.device)
        for i in range(h):
            ops = kernels.operands(kd.name, queries[i:i + 1], keys[i:i + 1], k=self.k, temperature=taus[i], opts=opts)
            ops.logits(ops.A[0], ops.B[0].transpose(0, 1), out[i])
        return out

    def unmasked_map(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The kind's map of ``queries`` and ``keys`` ``(H, ., d + 1)`` over all key pairs, at this record's temperature,
        or head by head at :attr:`head_temperatures`."""
        opts = self.map_options()
        if self.head_temperatures is None:
            return attention_map(queries, keys, self.kind, k=self.k, temperature=self.temperature, **opts)
        return torch.cat([attention_map(queries[h:h + 1], keys[h:h + 1], self.kind, k=self.k, temperature=t, **opts)
                          for h, t in enumerate(self.head_temperatures)], dim=0)

    def applied(self, p: torch.Tensor) -> torch.Tensor:
        r"""The map ``p`` ``(H, N, M)`` of all key pairs as the layer applies it: for a gate multiplied by :attr:`mask`;
        otherwise renormalised over the keys the mask keeps (a row that keeps none uniform over all keys); then times
        :attr:`adjacency`, :math:`\mathrm{adj}\odot G`.  Without mask and adjacency, ``p`` itself.

        Renormalising after the softmax is exact only while the kept weights of ``p`` are normal numbers;
        :meth:`map_of` uses the log-weights wherever the kernel has them, and this refuses a row whose kept weights
        sum below the smallest normal number (at large norms every kept key underflows beside a masked one).

        Raises
        ------
        ValueError
            Naming the layer and how many rows underflowed.
        """
        if self.mask is not None:
            keep = self.mask.to(p.device)
            kept = torch.where(keep, p, torch.zeros((), dtype=p.dtype, device=p.device))
            total = kept.sum(dim=-1, keepdim=True)
            if registry.get(self.kind).family == "gate":
                p = kept
            else:
                lost = keep.any(dim=-1, keepdim=True) & (total < torch.finfo(p.dtype).tiny)
                if bool(lost.any()):
                    raise ValueError(
                        f"layer {short(self.name)}: the masked map of kind {self.kind!r} cannot be formed: in "
                        f"{int(lost.sum())} rows every key the mask keeps underflowed in the map of all keys, and its "
                        "kernel gives no log-weights to take the softmax over the kept keys")
                uniform = torch.full_like(p, 1.0 / p.shape[-1])
                p = torch.where(total > 0, kept / torch.where(total > 0, total, torch.ones_like(total)), uniform)
        return self._times_adjacency(p)

    def _times_adjacency(self, p: torch.Tensor) -> torch.Tensor:
        if self.adjacency is None:
            return p
        adj = self.adjacency.to_dense() if self.adjacency.layout != torch.strided else self.adjacency
        return p * adj.to(p.device, p.dtype)

    def map_options(self) -> dict[str, Any]:
        """The parameters the kind's map reads besides ``k`` and ``temperature`` (its registry entry's ``options``),
        from this record's fields: ``power`` and ``norm_scale`` (focused), ``bias`` (the gate; None reads as 0)."""
        declared = kernel_for(registry.get(self.kind)).options
        return {o: declared[o].default if getattr(self, o) is None else getattr(self, o) for o in recorded_options(self.kind)}

    def check(self, where: str | None = None) -> LayerRecord:
        """Check that queries, keys and values lie on the hyperboloid (in their own dtype); return ``self``.

        Raises
        ------
        ValueError
            One line naming the layer (or ``where``), the call and the tensor.
        """
        label = where or f"layer {short(self.name)} (call {self.call})"
        for role in ROLES:
            t = getattr(self, role)
            if t is not None:
                check_points(t, k=self.k, name=f"{label} {role}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Tensors and plain Python values only (``torch.load(weights_only=True)`` reads them back)."""
        return {
            "name": self.name,
            "call": int(self.call),
            "queries": self.queries,
            "keys": self.keys,
            "values": self.values,
            "k": float(self.k),
            "mode": self.mode,
            "kind": self.kind,
            "power": self.power,
            "norm_scale": self.norm_scale,
            "temperature": self.temperature,
            **{f: getattr(self, f) for f in _EXTRA_FIELDS},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], check: bool = True) -> LayerRecord:
        """Rebuild a record from :meth:`to_dict`'s dictionary; with ``check`` the points are validated too.

        Raises
        ------
        ValueError
            For a non-dict, missing keys, invalid fields or (with ``check``) points off the hyperboloid.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"a layer record must be a dict, got {type(d).__name__}")
        required = ("name", "queries", "keys", "k", "mode", "kind")
        missing = [key for key in required if key not in d]
        if missing:
            raise ValueError(f"a layer record needs the keys {', '.join(required)}; missing {', '.join(missing)}")
        rec = cls(
            name=d["name"],
            queries=d["queries"],
            keys=d["keys"],
            values=d.get("values"),
            k=d["k"],
            mode=d["mode"],
            kind=d["kind"],
            call=d.get("call", 0),
            power=d.get("power"),
            norm_scale=d.get("norm_scale"),
            temperature=d.get("temperature"),
            **{f: d[f] for f in _EXTRA_FIELDS if d.get(f) is not None},
        )
        return rec.check() if check else rec

    def __repr__(self) -> str:
        v = "None" if self.values is None else f"(H, M, {self.values.shape[-1]})"
        if self.temperature is not None:
            extra = f"tau={self.temperature:.4g}" + ("" if self.scale_sign > 0 else " (scale < 0)")
        else:
            extra = f"power={self.power:g}, norm_scale={self.norm_scale:.4g}"
        return (
            f"LayerRecord({self.name!r}, call={self.call}, mode={self.mode!r}, kind={self.kind!r}, "
            f"H={self.n_heads}, N={self.n_queries}, M={self.n_keys}, d={self.dim}, values={v}, "
            f"k={self.k:.6g}, {extra}, {str(self.queries.dtype).replace('torch.', '')})"
        )


def _record_tensor(x: Any, name: str, rows: str) -> torch.Tensor:
    t = as_tensor(x, name)
    if t.dim() != 3 or t.shape[-1] < 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(
            f"{name}: expected shape (H, {rows}, d + 1) with d >= 1 (heads first, time first), "
            f"got {tuple(t.shape)}"
        )
    return t.detach().cpu()


def save(records: Sequence[LayerRecord], path: str | os.PathLike) -> Path:
    """Write ``records`` to ``path`` atomically; return ``path`` as a ``Path``.

    The file is ``torch.save`` of
    ``{"format": "hypviz.capture", "version": 1, "layers": [rec.to_dict(), ...]}``, written to a
    temporary file in the same folder (``.NAME.HOST.PID.RANDOM.tmp``) and moved over ``path`` with
    ``os.replace``, so a reader never sees a half-written file and a failed save leaves ``path`` as it
    was.  The temporary file is removed when the save fails or is interrupted (``KeyboardInterrupt``);
    one left by a process that was killed is removed by the next save into the folder.

    Raises
    ------
    TypeError
        When an element of ``records`` is not a :class:`LayerRecord`.
    ValueError
        When ``records`` is empty, the folder does not exist, ``path`` is a folder or does not end in
        ``.pt``/``.pth`` (``~`` is expanded).
    OSError
        One line naming ``path`` and the error (its ``errno``: ``ENOSPC`` "no space left on device",
        ``EDQUOT``, ``EFBIG``, ``EACCES``, ...) when the file cannot be written; nothing is written.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from hypviz.capture import LayerRecord, load, save
    >>> from hypviz.lorentz import lift
    >>> q = lift([[[0.0, 0.0], [2.0, 2.0]]], k=1.0)
    >>> rec = LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic",
    ...                   kind="distance", temperature=1.0)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = save([rec], pathlib.Path(folder) / "att.pt")
    ...     print(path.name, [r.name for r in load(path)])
    att.pt ['enc.0']
    """
    recs = list(records)
    for i, rec in enumerate(recs):
        if not isinstance(rec, LayerRecord):
            raise TypeError(f"records[{i}]: expected a LayerRecord, got {type(rec).__name__}")
    if not recs:
        raise ValueError("no layer records to save (the capture recorded nothing); run the model inside the with block")
    target = Path(os.fspath(path)).expanduser()
    if target.suffix.lower() not in EXTENSIONS:
        raise ValueError(
            f"cannot save to {target}: a capture file must end in .pt or .pth (what hypviz compare reads), "
            f"got {target.suffix or 'no extension'!r}"
        )
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot save to {target}: the folder {folder} does not exist")
    if target.is_dir():
        raise ValueError(f"cannot save to {target}: it is a folder; expected a file name such as att.pt")
    payload = {"format": FORMAT, "version": VERSION, "layers": [rec.to_dict() for rec in recs]}
    _remove_stale_tmp(folder)
    tmp = folder / f".{target.name}.{_HOST}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    writer = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            writer = _Writer(f)
            torch.save(payload, cast(IO[bytes], writer))  # torch.save writes and flushes: all a _Writer needs to do
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        failed = writer.error if writer is not None and writer.error is not None else exc
        if isinstance(failed, OSError) or (isinstance(failed, RuntimeError) and _TORCH_WRITE_FAILED.search(str(failed))):
            raise _save_failed(target, failed) from None
        raise
    return target


_HOST = re.sub(r"[^A-Za-z0-9-]", "-", platform.node()) or "host"  # in a temporary file's name, with the process id
# torch's own words for a write of torch.save that failed (the OSError behind it, when there is one, is lost)
_TORCH_WRITE_FAILED = re.compile(r"inline_container|PytorchStreamWriter|unexpected pos|file write failed")


class _Writer:
    """The file ``torch.save`` writes to, keeping the first ``OSError`` of a write: torch reports a failed write as a
    ``RuntimeError`` of its own (``[enforce fail at inline_container.cc:...] unexpected pos ...``), without the errno."""

    def __init__(self, f: Any):
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.f.flush()


def _save_failed(target: Path, exc: BaseException) -> OSError:
    """One-line ``OSError`` for a save of ``target`` that could not be written (``exc``: the write's own error, or
    torch's ``RuntimeError`` when none was seen: then ``ENOSPC`` when the folder has no space left, else ``EIO``)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        code = exc.errno
    else:
        try:
            full = os.statvfs(target.parent if str(target.parent) else ".").f_bavail == 0
        except (OSError, AttributeError):  # no statvfs (Windows)
            full = False
        code = errno.ENOSPC if full else errno.EIO
    why = os.strerror(code)
    if not isinstance(exc, OSError):
        why += f" (torch.save: {' '.join(str(exc).split())[:200]})"
    return OSError(code, f"cannot save {target}: {why[:1].lower() + why[1:]}; nothing was written, {target.name} is as it was")


def _remove_stale_tmp(folder: Path) -> None:
    """Remove the temporary files of saves into ``folder`` whose process has ended (killed while writing): those
    named by this host, ``.NAME.HOST.PID.RANDOM.tmp``, with a process id that no longer runs."""
    if os.name != "posix":  # os.kill(pid, 0) tests for a process only on POSIX
        return
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        parts = entry.name.rsplit(".", 4)
        if len(parts) != 5 or parts[4] != "tmp" or parts[1] != _HOST or not parts[2].isdigit() \
                or not re.fullmatch(r"[0-9a-f]{32}", parts[3]) or not parts[0].startswith(".") \
                or Path(parts[0]).suffix.lower() not in EXTENSIONS:
            continue
        pid = int(parts[2])
        if pid == os.getpid():
            continue  # another save of this process, under way
        try:
            os.kill(pid, 0)
            continue  # that process runs
        except ProcessLookupError:
            pass
        except OSError:  # PermissionError: it runs, as another user
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        except OSError:
            pass


def load(path: str | os.PathLike) -> list[LayerRecord]:
    r"""Read a file written by :meth:`Capture.save` or :func:`save` (``torch.load(weights_only=True)``), validated.

    Every record is checked (shapes, fields, points on :math:`\langle x, x\rangle_L = -k`) by :func:`parse`.

    Raises
    ------
    ValueError
        One line naming the file and what was wrong: missing, empty, truncated, a pickled object (refused
        unread: ``weights_only=True`` runs no code of the file), not a hypviz.capture file, a newer
        version, no layer records, or a bad record (:func:`unreadable` says why a file cannot be read);
        never with torch's advice to load the file with ``weights_only=False``.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from hypviz.capture import LayerRecord, load, save
    >>> from hypviz.lorentz import lift
    >>> q = lift([[[0.0, 0.0], [2.0, 2.0]]], k=1.0)
    >>> rec = LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic",
    ...                   kind="distance", temperature=1.0)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     records = load(save([rec], pathlib.Path(folder) / "att.pt"))
    ...     print(len(records), records[0].name, records[0].kind, bool((records[0].queries == q).all()))
    1 enc.0 distance True
    """
    p = Path(os.fspath(path)).expanduser()
    if not p.is_file():
        raise ValueError(f"{p}: no such file; expected a hypviz.capture file written by Capture.save")
    try:
        with warnings.catch_warnings():  # torch's note on a plain pickle's protocol: the refusal below says more
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling fails in many ways; all mean "not a readable torch.save file"
        raise ValueError(f"{p}: {unreadable(p, exc)}; expected a hypviz.capture file written by Capture.save") from None
    return parse(obj, p)


def unreadable(path: str | os.PathLike, exc: BaseException) -> str:
    """Why ``torch.load(path, weights_only=True)``, which raised ``exc``, could not read ``path``, in a few words.

    Told from the file itself, not from torch's words alone: empty; truncated (a torch.save zip archive without the
    directory at its end, a member reaching past the end, a pickle that ends early: torch then says "Invalid
    argument" or "failed finding central directory"); a pickled object (named); a plain pickle; else torch's reason
    (:func:`hypviz.base.messages.torch_load_reason`), never its advice to load the file with ``weights_only=False``.

    Examples
    --------
    >>> import pathlib, pickle, tempfile, torch
    >>> from hypviz.capture.records import unreadable
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     p = pathlib.Path(folder) / "cut.pt"
    ...     torch.save({"x": torch.zeros(100)}, p)
    ...     _ = p.write_bytes(p.read_bytes()[:300])
    ...     try:
    ...         torch.load(p, weights_only=True)
    ...     except Exception as exc:
    ...         print(unreadable(p, exc))
    the file is truncated: it starts as a torch.save file (a zip archive) but the zip directory that ends such a file
    is missing (300 bytes on disk)
    """
    p = Path(os.fspath(path))
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as err:
        return f"cannot read it ({err.strerror or err})"
    if size == 0:
        return "the file is empty (0 bytes)"
    if head == b"PK\x03\x04":  # a torch.save file (a zip archive)
        try:
            with zipfile.ZipFile(p) as zf:
                members = zf.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return ("the file is truncated: it starts as a torch.save file (a zip archive) but the zip directory that ends "
                    f"such a file is missing ({size} bytes on disk)")
        past = [m.filename for m in members if m.header_offset + m.compress_size > size]
        if past:
            return f"the file is truncated: its member {short(past[0])} reaches past the end of the file ({size} bytes on disk)"
    text = str(exc)
    named = re.search(r"GLOBAL ([\w.]+)", text)
    if named:
        return f"it holds a pickled {named.group(1)} object, not a hypviz capture (refused unread: no code of the file was run)"
    if isinstance(exc, EOFError) or "truncated" in text or (isinstance(exc, OSError) and exc.errno == errno.EINVAL):
        return f"the file is truncated: its data end early ({size} bytes on disk)"
    if head[:1] == b"\x80" and ("Weights only load failed" in text or "WeightsUnpickler" in text):
        return "it holds a pickled Python object (written by pickle, not torch.save), not a hypviz capture (refused unread)"
    return f"cannot read it with torch.load(weights_only=True): {torch_load_reason(exc)}"


def parse(obj: Any, where: Any = "capture") -> list[LayerRecord]:
    """The validated records of ``obj``, what ``torch.load`` read from a file written by :func:`save`; ``where``
    (the file) begins every message.

    Raises
    ------
    ValueError
        When ``obj`` is not a hypviz.capture dictionary, its version is newer, its ``layers`` list is empty,
        or a record is invalid (fields, tensors that are not dense, points off the hyperboloid).

    Examples
    --------
    >>> from hypviz.capture import LayerRecord, parse
    >>> from hypviz.lorentz import lift
    >>> q = lift([[[0.0, 0.0], [2.0, 2.0]]], k=1.0)
    >>> rec = LayerRecord(name="enc.0", queries=q, keys=q, values=None, k=1.0, mode="generic",
    ...                   kind="distance", temperature=1.0)
    >>> [r.name for r in parse({"format": "hypviz.capture", "version": 1, "layers": [rec.to_dict()]})]
    ['enc.0']
    >>> parse({"format": "other"}, "att.pt")
    Traceback (most recent call last):
        ...
    ValueError: att.pt: not a hypviz.capture file (expected a dict with format 'hypviz.capture', got format 'other')
    """
    p = where
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        got = f"format {short(obj.get('format'))}" if isinstance(obj, dict) else f"a {type(obj).__name__}"
        raise ValueError(f"{p}: not a hypviz.capture file (expected a dict with format {FORMAT!r}, got {got})")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{p}: hypviz.capture file without a valid version (expected {VERSION}, got {short(version)})")
    if version > VERSION:
        raise ValueError(
            f"{p}: hypviz.capture version {version} is newer than this hypviz reads ({VERSION}); "
            "update hypviz"
        )
    layers = obj.get("layers")
    if not isinstance(layers, list):
        raise ValueError(f"{p}: 'layers' must be a list of layer records, got {type(layers).__name__}")
    if not layers:
        raise ValueError(f"{p}: holds no layer records (its 'layers' list is empty); capture at least one layer call")
    records = []
    for i, d in enumerate(layers):
        try:
            rec = LayerRecord.from_dict(d, check=False)
            rec.check(f"layer {short(rec.name)} (call {rec.call})")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{p}: record {i}: {exc}") from None
        records.append(rec)
    return records
