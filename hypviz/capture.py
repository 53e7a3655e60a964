r"""Record the attention of a real hyperbolic transformer with forward hooks.

::

    from hypviz import capture
    with capture.attention(model) as cap:        # hooks on; removed on exit, also on an exception
        model(x)                                 # outputs unchanged (the hooks return None)
    cap.layers                                   # list[LayerRecord], in the order the layers ran
    cap.save("att.pt")                           # one torch.save file, written atomically
    records = capture.load("att.pt")             # torch.load(weights_only=True), validated

Each :class:`LayerRecord` holds one call of one attention layer: its ``queries`` ``(H, N, d + 1)``,
``keys`` ``(H, M, d + 1)`` and ``values`` ``(H, M, d_v + 1)`` (or ``None``), points of the Lorentz
model :math:`\langle x, x\rangle_L = -k`, time coordinate first, heads first, detached copies on
the CPU in the dtype the model made them in, together with what the layer computes from them
(``kind`` and its parameters), so that :func:`hypviz.attention.attention_map` and
:func:`hypviz.attention.compare` can be run on them directly (:meth:`LayerRecord.attention_map`).

Two ways a layer is found:

* **Hypformer-style layers, by structure** (no Hypformer code is imported): a submodule with ``Wq``
  and ``Wk``, ``nn.ModuleList`` s of per-head maps from ``(N, d_in)`` features to ``(N, d + 1)``
  hyperboloid points, an optional ``Wv`` (when it is absent, or ``use_weight`` is false, the values
  are the layer's source input), ``attention_type`` (``"linear_focused"`` or ``"full"``),
  ``power_k``, ``norm_scale``, ``scale`` and ``manifold.k``.  ``"linear_focused"`` is recorded as
  kind ``"focused"`` with ``power = power_k`` and ``norm_scale``; ``"full"`` as kind ``"distance"``
  at the temperature :math:`\tau = k\,\mathrm{scale}/2` when the layer's ``manifold.cinner``
  divides the Lorentzian inner product by :math:`k` (Hypformer's ``large/`` and ``medium/`` trees;
  measured on the layer's own points), :math:`\tau = \mathrm{scale}/2` when it does not (its
  simplified tree), because with keys written :math:`\kappa`

  .. math::

      \frac{2 + 2\langle q, \kappa\rangle_L / k}{\mathrm{scale}} + b
      = \frac{-\tfrac12\|q - \kappa\|_L^2}{k\,\mathrm{scale}/2} + b

  (identity 1, :math:`\langle q, \kappa\rangle_L = -\tfrac12\|q - \kappa\|_L^2 - k`) and the
  constant :math:`b` cancels in the row softmax.  Logits written without the :math:`1/k`,
  :math:`(2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + b`, are the same distance softmax
  at :math:`\tau = \mathrm{scale}/2`; the two agree at :math:`k = 1`.
* **Any other model, by name**: ``layers={"enc.0": ("enc.0.q", "enc.0.k"[, "enc.0.v"])}`` names the
  modules whose outputs are the queries, keys (and values); ``k`` is then required and ``kind``,
  ``temperature``, ``power``, ``norm_scale`` say what the layer computes (mode ``"generic"``).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from hypviz.attention import KINDS, SOFTMAX_KINDS
from hypviz.lorentz import as_tensor, check_k, check_points, from_poincare

__all__ = ["FORMAT", "VERSION", "MODES", "MODELS", "LayerRecord", "Capture", "attention", "save", "load"]

#: The ``"format"`` entry of a file written by :func:`save`.
FORMAT = "hypviz.capture"
#: The file format's version; :func:`load` refuses newer ones.
VERSION = 1
#: A record's ``mode``: a Hypformer-style layer's ``attention_type``, or ``"generic"`` (``layers=``).
MODES: tuple[str, ...] = ("linear_focused", "full", "generic")
#: The ``model=`` choices, what named modules output: hyperboloid points or Poincare-ball points.
MODELS: tuple[str, ...] = ("lorentz", "poincare")
_HYPFORMER_KIND = {"linear_focused": "focused", "full": "distance"}
_ROLES = ("queries", "keys", "values")
_STRUCTURE = (
    "submodules with Wq and Wk (nn.ModuleList of per-head maps to (N, d + 1) hyperboloid points), "
    "attention_type ('linear_focused' or 'full') and manifold.k, as Hypformer's TransConvLayer"
)


# --------------------------------------------------------------------------- #
# the record
# --------------------------------------------------------------------------- #
def _opt_float(value: Any, name: str, *, positive: bool = False, none_ok: bool = True) -> float | None:
    what = ("a positive finite number" if positive else "a finite number") + (" or None" if none_ok else "")
    if value is None and none_ok:
        return None
    if value is None or isinstance(value, bool):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be {what}, got {value!r}") from None
    if not math.isfinite(v) or (positive and v <= 0.0):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return v


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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"LayerRecord.name must be a string, got {type(self.name).__name__}")
        if isinstance(self.call, bool) or not isinstance(self.call, int) or self.call < 0:
            raise ValueError(f"LayerRecord {self.name!r}: call must be an integer >= 0, got {self.call!r}")
        self.k = check_k(self.k)
        if self.mode not in MODES:
            raise ValueError(
                f"LayerRecord {self.name!r}: mode must be one of {', '.join(map(repr, MODES))}, "
                f"got {self.mode!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(
                f"LayerRecord {self.name!r}: kind must be one of {', '.join(map(repr, KINDS))}, "
                f"got {self.kind!r}"
            )
        if self.mode in _HYPFORMER_KIND and self.kind != _HYPFORMER_KIND[self.mode]:
            raise ValueError(
                f"LayerRecord {self.name!r}: mode {self.mode!r} computes kind {_HYPFORMER_KIND[self.mode]!r}, "
                f"got {self.kind!r}"
            )
        self.power = _opt_float(self.power, f"LayerRecord {self.name!r}: power", positive=True)
        self.norm_scale = _opt_float(self.norm_scale, f"LayerRecord {self.name!r}: norm_scale")
        self.temperature = _opt_float(self.temperature, f"LayerRecord {self.name!r}: temperature", positive=True)
        if self.kind == "focused" and (self.power is None or self.norm_scale is None):
            raise ValueError(f"LayerRecord {self.name!r}: kind 'focused' needs power and norm_scale, got None")
        if self.kind in SOFTMAX_KINDS and self.temperature is None:
            raise ValueError(f"LayerRecord {self.name!r}: kind {self.kind!r} needs a temperature, got None")
        where = f"LayerRecord {self.name!r}"
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
        r"""The layer's attention map ``(H, N, M)``: :func:`hypviz.attention.attention_map` of ``kind``.

        Softmax kinds at ``temperature``, :math:`A_{ij} = \mathrm{softmax}_j(s_{ij}/\tau)`;
        ``"focused"`` with ``power`` and ``norm_scale``,

        .. math::

            A_{ij} = \frac{\varphi(q_i)\cdot\varphi(\kappa_j)}{\sum_l \varphi(q_i)\cdot\varphi(\kappa_l)}.
        """
        from hypviz.attention import attention_map

        extra: dict[str, Any] = {}
        if self.kind == "focused":
            extra = {"power": self.power, "norm_scale": self.norm_scale}
        return attention_map(self.queries, self.keys, self.kind, k=self.k, temperature=self.temperature, **extra)

    def check(self, where: str | None = None) -> LayerRecord:
        """Check that queries, keys and values lie on the hyperboloid (in their own dtype); return ``self``.

        Raises
        ------
        ValueError
            One line naming the layer (or ``where``), the call and the tensor.
        """
        label = where or f"layer {self.name!r} (call {self.call})"
        for role in _ROLES:
            t = getattr(self, role)
            if t is not None:
                check_points(t, self.k, name=f"{label} {role}")
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
        )
        return rec.check() if check else rec

    def __repr__(self) -> str:
        v = "None" if self.values is None else f"(H, M, {self.values.shape[-1]})"
        if self.temperature is not None:
            extra = f"tau={self.temperature:.4g}"
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


# --------------------------------------------------------------------------- #
# files
# --------------------------------------------------------------------------- #
def save(records: Sequence[LayerRecord], path: str | os.PathLike) -> Path:
    """Write ``records`` to ``path`` atomically; return ``path`` as a ``Path``.

    The file is ``torch.save`` of
    ``{"format": "hypviz.capture", "version": 1, "layers": [rec.to_dict(), ...]}``, written to a
    temporary file in the same folder and moved over ``path`` with ``os.replace``, so a reader never
    sees a half-written file.

    Raises
    ------
    TypeError
        When an element of ``records`` is not a :class:`LayerRecord`.
    ValueError
        When the folder does not exist or ``path`` is a folder.
    """
    recs = list(records)
    for i, rec in enumerate(recs):
        if not isinstance(rec, LayerRecord):
            raise TypeError(f"records[{i}]: expected a LayerRecord, got {type(rec).__name__}")
    target = Path(os.fspath(path))
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot save to {target}: the folder {folder} does not exist")
    if target.is_dir():
        raise ValueError(f"cannot save to {target}: it is a folder; expected a file name such as att.pt")
    payload = {"format": FORMAT, "version": VERSION, "layers": [rec.to_dict() for rec in recs]}
    tmp = folder / f".{target.name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def load(path: str | os.PathLike) -> list[LayerRecord]:
    r"""Read a file written by :meth:`Capture.save` or :func:`save` (``torch.load(weights_only=True)``), validated.

    Every record is checked (shapes, fields, points on :math:`\langle x, x\rangle_L = -k`).

    Raises
    ------
    ValueError
        One line naming the file and what was wrong: missing, unreadable, not a hypviz.capture file,
        a newer version, or a bad record.
    """
    p = Path(os.fspath(path))
    if not p.is_file():
        raise ValueError(f"{p}: no such file; expected a hypviz.capture file written by Capture.save")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling fails in many ways; all mean "not a readable torch.save file"
        raise ValueError(
            f"{p}: cannot read it with torch.load(weights_only=True) ({type(exc).__name__}: {_first_line(exc)}); "
            "expected a hypviz.capture file written by Capture.save"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        got = f"format {obj.get('format')!r}" if isinstance(obj, dict) else f"a {type(obj).__name__}"
        raise ValueError(f"{p}: not a hypviz.capture file (expected a dict with format {FORMAT!r}, got {got})")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{p}: hypviz.capture file without a valid version (expected {VERSION}, got {version!r})")
    if version > VERSION:
        raise ValueError(
            f"{p}: hypviz.capture version {version} is newer than this hypviz reads ({VERSION}); "
            "update hypviz"
        )
    layers = obj.get("layers")
    if not isinstance(layers, list):
        raise ValueError(f"{p}: 'layers' must be a list of layer records, got {type(layers).__name__}")
    records = []
    for i, d in enumerate(layers):
        try:
            rec = LayerRecord.from_dict(d, check=False)
            rec.check(f"layer {rec.name!r} (call {rec.call})")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{p}: record {i}: {exc}") from None
        records.append(rec)
    return records


# --------------------------------------------------------------------------- #
# discovery
# --------------------------------------------------------------------------- #
def _is_hypformer_layer(m: nn.Module) -> bool:
    wq, wk = getattr(m, "Wq", None), getattr(m, "Wk", None)
    return (
        isinstance(wq, nn.ModuleList)
        and isinstance(wk, nn.ModuleList)
        and len(wq) > 0
        and hasattr(m, "attention_type")
        and hasattr(m, "manifold")
    )


def _close(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    if close:
        return "close matches: " + ", ".join(map(repr, close))
    shown = [n for n in names if n][:8]
    more = ", ..." if len(names) > 9 else ""
    return "its modules include: " + (", ".join(map(repr, shown)) if shown else "none") + more


def _module_k(layer: nn.Module) -> float | None:
    kk = getattr(getattr(layer, "manifold", None), "k", None)
    if kk is None:
        return None
    try:
        return float(kk.detach() if isinstance(kk, torch.Tensor) else kk)
    except (TypeError, ValueError, RuntimeError):
        return None


def _param(layer: nn.Module, attr: str, lname: str) -> float:
    if not hasattr(layer, attr):
        raise ValueError(
            f"layer {lname!r}: attention_type {layer.attention_type!r} needs the attribute {attr}, "
            "which it lacks"
        )
    v = getattr(layer, attr)
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"layer {lname!r}: {attr} must be a single number, got a tensor of shape {tuple(v.shape)}")
        v = v.detach()
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"layer {lname!r}: {attr} must be a number, got {v!r}") from None


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


class _HypLayer:
    """Hooks and per-call buffers of one Hypformer-style layer."""

    def __init__(self, cap: Capture, name: str, layer: nn.Module, k: float | None):
        self.cap, self.name, self.layer = cap, name, layer
        self.h = len(layer.Wq)
        if len(layer.Wk) != self.h:
            raise ValueError(
                f"layer {name!r}: Wq has {self.h} heads but Wk has {len(layer.Wk)}; "
                "expected one map per head in each"
            )
        if layer.attention_type not in _HYPFORMER_KIND:
            raise ValueError(
                f"layer {name!r} has Hypformer's structure but attention_type {layer.attention_type!r}; capture knows "
                "'linear_focused' and 'full' (name its projection modules with layers= to capture it generically)"
            )
        mk = _module_k(layer)
        if mk is None and k is None:
            raise ValueError(
                f"layer {name!r}: cannot read manifold.k as a number; pass k= (the curvature parameter, "
                "<x,x>_L = -k)"
            )
        if mk is not None and k is not None and abs(mk - k) > 1e-6 * max(abs(mk), abs(k)):
            raise ValueError(
                f"layer {name!r}: k={k:g} was given but the layer's manifold.k is {mk:g}; "
                "drop k= or make them agree"
            )
        self.k_given = k
        wv = getattr(layer, "Wv", None)
        self.use_wv = isinstance(wv, nn.ModuleList) and bool(getattr(layer, "use_weight", True))
        if self.use_wv and len(wv) != self.h:
            raise ValueError(f"layer {name!r}: Wq has {self.h} heads but Wv has {len(wv)}; expected one map per head")
        self.current: dict[str, Any] | None = None
        self.calls = 0
        self.source_index: tuple[str | None, int] | None = None

    def register(self) -> list[Any]:
        handles = [
            self.layer.register_forward_pre_hook(self.pre, with_kwargs=True),
            self.layer.register_forward_hook(self.post),
        ]
        heads = [("queries", self.layer.Wq), ("keys", self.layer.Wk)]
        if self.use_wv:
            heads.append(("values", self.layer.Wv))
        for role, mods in heads:
            for i, m in enumerate(mods):
                handles.append(m.register_forward_hook(self._head_hook(role, i)))
        return handles

    def _head_hook(self, role: str, i: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.current is None:
                return None
            if not isinstance(output, torch.Tensor):
                self.cap._fail(
                    f"layer {self.name!r}: {role} head {i} returned a {type(output).__name__}; "
                    "expected a tensor of (N, d + 1) points"
                )
            else:
                self.current[role][i].append(_copy(output))
            return None

        return hook

    def _source(self, args: tuple, kwargs: dict) -> Any:
        # the layer's source input (Hypformer: forward(query_input, source_input, ...)); the values when there is no Wv
        if self.source_index is None:
            try:
                params = [p for p in inspect.signature(self.layer.forward).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            except (TypeError, ValueError):
                params = []
            names = [p.name for p in params]
            if "source_input" in names:
                self.source_index = ("source_input", names.index("source_input"))
            elif len(names) >= 2:
                self.source_index = (names[1], 1)
            else:
                self.source_index = (names[0] if names else None, 0)
        key, pos = self.source_index
        if key is not None and key in kwargs:
            return kwargs[key]
        if len(args) > pos:
            return args[pos]
        return args[0] if args else None

    def pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        src = None
        if not self.use_wv:
            s = self._source(args, kwargs)
            if isinstance(s, torch.Tensor) and s.is_floating_point():
                src = _copy(s)
        self.current = {role: [[] for _ in range(self.h)] for role in _ROLES}
        self.current["source"] = src
        return None

    def post(self, module: nn.Module, args: Any, output: Any) -> None:
        cur, self.current = self.current, None
        if cur is None:
            return None
        call = self.calls
        self.calls += 1
        try:
            self.cap._raw.append(self._build(cur, call))
        except (TypeError, ValueError) as exc:
            self.cap._fail(str(exc))
        return None

    def _stack(self, per_head: list[list[torch.Tensor]], role: str, call: int) -> torch.Tensor:
        where = f"layer {self.name!r} (call {call})"
        for i, outs in enumerate(per_head):
            if len(outs) != 1:
                raise ValueError(
                    f"{where}: {role} head {i} ran {len(outs)} times in one call of the layer; "
                    "expected once"
                )
        outs = [o[0] for o in per_head]
        first = outs[0]
        if first.dim() != 2 or first.shape[-1] < 2:
            raise ValueError(f"{where}: {role} heads return {tuple(first.shape)}; expected (N, d + 1) points per head")
        if any(o.shape != first.shape or o.dtype != first.dtype for o in outs):
            got = ", ".join(str(tuple(o.shape)) for o in outs)
            raise ValueError(
                f"{where}: {role} heads return different shapes or dtypes ({got}); "
                "expected one (N, d + 1) per head"
            )
        return torch.stack(outs, dim=0)

    def _build(self, cur: dict[str, Any], call: int) -> LayerRecord:
        layer, lname = self.layer, self.name
        mode = layer.attention_type
        q = self._stack(cur["queries"], "queries", call)
        kk = self._stack(cur["keys"], "keys", call)
        if self.use_wv:
            v = self._stack(cur["values"], "values", call)
        else:
            src = cur["source"]
            ok = src is not None and src.dim() == 2 and src.shape[0] == kk.shape[1] and src.shape[-1] >= 2
            v = src.unsqueeze(0).expand(self.h, *src.shape).clone() if ok else None
        kf = _module_k(layer)
        kf = self.k_given if kf is None else kf
        extra: dict[str, Any] = {}
        if mode == "linear_focused":
            extra = {"power": _param(layer, "power_k", lname), "norm_scale": _param(layer, "norm_scale", lname)}
        else:
            scale = _param(layer, "scale", lname)
            if not math.isfinite(scale) or scale <= 0:
                raise ValueError(f"layer {lname!r}: scale must be positive for the full softmax, got {scale:g}")
            # logits (2 + 2 c <q, kappa>_L) / scale + bias = (-1/2 |q - kappa|^2_L) / (scale / (2 c)) + const,
            # with c the layer's own cinner scaling: 1/k where cinner divides by k, 1 where it does not
            extra = {"temperature": scale / (2.0 * _cinner_scaling(layer, q, kk, kf))}
        return LayerRecord(name=lname, queries=q, keys=kk, values=v, k=kf, mode=mode, kind=_HYPFORMER_KIND[mode],
                           call=call, **extra)


def _cinner_scaling(layer: nn.Module, q: torch.Tensor, kk: torch.Tensor, kf: float) -> float:
    """``c`` with ``layer.manifold.cinner(x, y) = c <x, y>_L``, measured on the layer's own points.

    Hypformer's full logits are ``2 + 2 cinner(q, kappa)``; its ``large/`` and ``medium/`` trees divide
    the Lorentzian inner product by ``k`` there (``c = 1/k``, so ``tau = k * scale / 2``), its simplified
    tree does not (``c = 1``, ``tau = scale / 2``).  Without a ``cinner``, ``c = 1/k`` is assumed.
    """
    cinner = getattr(getattr(layer, "manifold", None), "cinner", None)
    if not callable(cinner):
        return 1.0 / kf
    x, y = q[0, :1].double(), kk[0, :1].double()
    with torch.no_grad():
        try:
            got = float(torch.as_tensor(cinner(x, y)).double().reshape(-1)[0])
        except Exception:  # a cinner with another signature: fall back to the documented form
            return 1.0 / kf
    ref = float(-x[0, 0] * y[0, 0] + (x[0, 1:] * y[0, 1:]).sum())  # <x, y>_L <= -k < 0
    c = got / ref
    for candidate in (1.0 / kf, 1.0):
        if abs(c - candidate) <= 1e-4 * candidate:
            return candidate
    raise ValueError(
        f"layer {layer.__class__.__name__}: manifold.cinner(x, y) = {got:.6g} is neither <x,y>_L = {ref:.6g} nor "
        f"<x,y>_L / k; cannot tell the full softmax's temperature"
    )


class _Generic:
    """Buffers of one layer named with ``layers=``: a record is complete once each role has an output."""

    def __init__(self, cap: Capture, name: str, modules: tuple[str, ...]):
        self.cap, self.name, self.modules = cap, name, modules
        self.roles = _ROLES[: len(modules)]
        self.queue: dict[str, list[torch.Tensor]] = {r: [] for r in self.roles}
        self.calls = 0

    def push(self, role: str, module_name: str, output: Any) -> None:
        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            what = f"a {type(output).__name__}" if not isinstance(output, torch.Tensor) else f"a {output.dtype} tensor"
            self.cap._fail(
                f"layer {self.name!r}: {role} module {module_name!r} returned {what}; "
                "expected a floating-point tensor of points"
            )
            return
        self.queue[role].append(_copy(output))
        if all(self.queue[r] for r in self.roles):
            outs = {r: self.queue[r].pop(0) for r in self.roles}
            self.cap._raw.append((self, self.calls, outs))
            self.calls += 1

    def leftovers(self) -> str | None:
        counts = {r: len(q) for r, q in self.queue.items()}
        if not any(counts.values()):
            return None
        ran = ", ".join(f"{r} module {m!r} {self.calls + counts[r]} times" for r, m in zip(self.roles, self.modules))
        return (
            f"layer {self.name!r}: its modules ran unequal numbers of times ({ran}); "
            "expected each once per call of the layer"
        )


# --------------------------------------------------------------------------- #
# the context manager
# --------------------------------------------------------------------------- #
class Capture:
    """A recording of attention layers: use it as a context manager (see :func:`attention`, which builds it).

    ``layers`` is filled when the ``with`` block exits without an exception: one
    :class:`LayerRecord` per call of each layer, in the order the layers ran, all points checked.
    A ``Capture`` records once; iterating over it, or ``len()``, reads ``layers``.
    """

    def __init__(
        self,
        module: nn.Module,
        layers: Mapping[str, Sequence[str]] | Sequence[str] | str | None,
        *,
        k: float | None,
        model: str,
        heads_axis: int | None,
        kind: str,
        temperature: float | None,
        power: float,
        norm_scale: float,
    ):
        if not isinstance(module, nn.Module):
            raise TypeError(f"capture.attention: expected a torch.nn.Module, got {type(module).__name__}")
        if model not in MODELS:
            raise ValueError(
                "model must be 'lorentz' (hyperboloid points, time first) or 'poincare' (ball points), "
                f"got {model!r}"
            )
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        if heads_axis is not None and (isinstance(heads_axis, bool) or not isinstance(heads_axis, int)):
            raise ValueError(f"heads_axis must be an integer axis or None (leading axes are heads), got {heads_axis!r}")
        self.module = module
        self.k = None if k is None else check_k(k)
        self.model = model
        self.heads_axis = heads_axis
        self.kind = kind
        self.temperature = _opt_float(temperature, "temperature", positive=True)
        self.power = _opt_float(power, "power (the focused map's power_k)", positive=True, none_ok=False)
        self.norm_scale = _opt_float(norm_scale, "norm_scale (the focused map's norm_scale)", none_ok=False)
        self.layers: list[LayerRecord] = []
        self._raw: list[Any] = []
        self._errors: list[str] = []
        self._handles: list[Any] = []
        self._used = False
        self._names = [n for n, _ in module.named_modules()]
        self._by_name = dict(module.named_modules())
        self._generic: list[_Generic] = []
        self._hyp: list[_HypLayer] = []
        self._auto_only: list[str] | None = None

        if isinstance(layers, Mapping):
            if self.k is None:
                raise ValueError(
                    "k is required when layers= names the modules: the curvature parameter of their points "
                    "(<x,x>_L = -k, curvature -1/k), e.g. capture.attention(model, layers=..., k=1.0)"
                )
            if not layers:
                raise ValueError(
                    "layers= is an empty dict; "
                    "expected {'layer': ('queries module', 'keys module'[, 'values module'])}"
                )
            for lname, mods in layers.items():
                self._generic.append(_Generic(self, str(lname), self._check_roles(lname, mods)))
        else:
            if model != "lorentz" or heads_axis is not None or temperature is not None:
                given = [f"{n}={v!r}" for n, v, d in (("model", model, "lorentz"), ("heads_axis", heads_axis, None),
                                                      ("temperature", temperature, None)) if v != d]
                raise ValueError(
                    f"{', '.join(given)} only applies to modules named with "
                    "layers={'layer': ('q module', 'k module')}; "
                    "Hypformer-style layers are read from their own attributes"
                )
            if layers is not None:
                names = [layers] if isinstance(layers, str) else list(layers)
                for n in names:
                    if not isinstance(n, str):
                        raise TypeError(f"layers: expected module names (strings) or a dict, got {type(n).__name__}")
                    if n not in self._by_name:
                        raise ValueError(f"layers: no module named {n!r} in the model; {_close(n, self._names)}")
                    if not _is_hypformer_layer(self._by_name[n]):
                        raise ValueError(
                            f"layers: module {n!r} ({type(self._by_name[n]).__name__}) is not a Hypformer-style "
                            f"layer (looked for {_STRUCTURE}); "
                            f"name its projections with layers={{{n!r}: ('q module', 'k module')}}"
                        )
                self._auto_only = names

    def _check_roles(self, lname: Any, mods: Any) -> tuple[str, ...]:
        if isinstance(mods, str) or not isinstance(mods, Sequence) or len(mods) not in (2, 3):
            raise ValueError(
                f"layers[{lname!r}]: expected a tuple (queries module, keys module[, values module]) "
                f"of module names, got {mods!r}"
            )
        mods = tuple(mods)
        if len(mods) == 3 and mods[2] is None:
            mods = mods[:2]
        for m in mods:
            if not isinstance(m, str):
                raise ValueError(f"layers[{lname!r}]: module names must be strings, got {m!r}")
            if m not in self._by_name:
                raise ValueError(f"layers[{lname!r}]: no module named {m!r} in the model; {_close(m, self._names)}")
        return mods

    # ---- hooks ----
    def _fail(self, message: str) -> None:
        self._errors.append(message)

    def __enter__(self) -> Capture:
        if self._used:
            raise ValueError("this Capture has already recorded; start a new one with capture.attention(model)")
        self._used = True
        try:
            if self._generic:
                listeners: dict[str, list[tuple[_Generic, str]]] = {}
                for g in self._generic:
                    for role, m in zip(g.roles, g.modules):
                        listeners.setdefault(m, []).append((g, role))
                for m, targets in listeners.items():
                    self._handles.append(self._by_name[m].register_forward_hook(self._generic_hook(m, targets)))
            else:
                names = self._auto_only or [n for n, m in self._by_name.items() if _is_hypformer_layer(m)]
                self._hyp = [_HypLayer(self, n, self._by_name[n], self.k) for n in names]
                for h in self._hyp:
                    self._handles.extend(h.register())
        except BaseException:
            self._remove()
            raise
        return self

    def _generic_hook(self, module_name: str, targets: list[tuple[_Generic, str]]) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            for g, role in targets:
                g.push(role, module_name, output)
            return None

        return hook

    def _remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self._remove()
        if exc_type is not None:
            return False  # the body's exception propagates unchanged
        if not self._generic and not self._hyp:
            raise ValueError(
                f"capture.attention: no attention layer recognised in the {type(self.module).__name__} "
                f"(looked for {_STRUCTURE}); for other models name the modules: "
                "capture.attention(model, layers={'enc.0': ('enc.0.q', 'enc.0.k')}, k=1.0)"
            )
        if self._errors:
            raise ValueError(self._errors[0])
        for g in self._generic:
            msg = g.leftovers()
            if msg:
                raise ValueError(msg)
        self.layers = [self._finish(raw) for raw in self._raw]
        self._raw = []
        return False

    # ---- records ----
    def _finish(self, raw: Any) -> LayerRecord:
        if isinstance(raw, LayerRecord):
            return raw.check()
        g, call, outs = raw
        where = f"layer {g.name!r} (call {call})"
        pts = {role: self._heads_first(outs[role], f"{where} {role} (module {m!r})")
               for role, m in zip(g.roles, g.modules)}
        q, kk, v = pts["queries"], pts["keys"], pts.get("values")
        if kk.shape[0] != q.shape[0] and 1 in (q.shape[0], kk.shape[0]):  # one shared head broadcasts
            h = max(q.shape[0], kk.shape[0])
            q, kk = q.expand(h, *q.shape[1:]).clone(), kk.expand(h, *kk.shape[1:]).clone()
        if v is not None and v.shape[0] == 1 and kk.shape[0] > 1:
            v = v.expand(kk.shape[0], *v.shape[1:]).clone()
        extra: dict[str, Any] = {}
        if self.kind == "focused":
            extra = {"power": self.power, "norm_scale": self.norm_scale}
        else:
            extra = {"temperature": self.temperature if self.temperature is not None else math.sqrt(q.shape[-1] - 1)}
        try:
            rec = LayerRecord(name=g.name, queries=q, keys=kk, values=v, k=self.k, mode="generic", kind=self.kind,
                              call=call, **extra)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        try:
            for role, m in zip(g.roles, g.modules):
                check_points(getattr(rec, role), rec.k, name=f"{where} {role} (module {m!r})")
        except ValueError as exc:
            hint = "" if self.model == "poincare" else "; for Poincare-ball outputs pass model='poincare'"
            raise ValueError(f"{exc}{hint}") from None
        return rec

    def _heads_first(self, t: torch.Tensor, where: str) -> torch.Tensor:
        """``(N, D)`` -> ``(1, N, D)``; ``(..., N, D)`` -> ``(H, N, D)`` (leading axes folded).

        With ``heads_axis`` that axis is moved first (other leading axes are folded into it).
        """
        if self.model == "poincare":
            try:
                t = from_poincare(t, self.k)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc} (model='poincare', k={self.k:g})") from None
        if t.dim() < 2 or t.shape[-1] < 2:
            want = "(..., d) ball points" if self.model == "poincare" else "(..., N, d + 1) points, time first"
            raise ValueError(f"{where}: expected {want}, got shape {tuple(t.shape)}")
        if self.heads_axis is not None:
            ax = self.heads_axis
            if not -t.dim() <= ax < t.dim() - 1 or (ax % t.dim()) == t.dim() - 1:
                raise ValueError(
                    f"{where}: heads_axis={ax} is not an axis before the coordinates "
                    f"of shape {tuple(t.shape)}"
                )
            if t.dim() < 3:
                raise ValueError(
                    f"{where}: heads_axis={ax} needs (N, H, d + 1)-like outputs, "
                    f"got shape {tuple(t.shape)}"
                )
            t = t.movedim(ax, 0)
            return t.reshape(-1, t.shape[-2], t.shape[-1]).contiguous()
        if t.dim() == 2:
            return t.unsqueeze(0)
        return t.reshape(-1, t.shape[-2], t.shape[-1])

    # ---- results ----
    def save(self, path: str | os.PathLike) -> Path:
        """Write the recorded ``layers`` to ``path`` atomically (see :func:`save`); read back with :func:`load`."""
        return save(self.layers, path)

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[LayerRecord]:
        return iter(self.layers)

    def __repr__(self) -> str:
        names = sorted({r.name for r in self.layers})
        shown = ", ".join(map(repr, names[:6])) + (", ..." if len(names) > 6 else "")
        return f"Capture({len(self.layers)} records of {len(names)} layers: {shown})"


def attention(
    module: nn.Module,
    /,
    layers: Mapping[str, Sequence[str]] | Sequence[str] | str | None = None,
    *,
    k: float | None = None,
    model: str = "lorentz",
    heads_axis: int | None = None,
    kind: str = "distance",
    temperature: float | None = None,
    power: float = 2.0,
    norm_scale: float = 1.0,
) -> Capture:
    r"""Record the queries, keys and values of a model's attention layers while it runs.

    ::

        with capture.attention(model) as cap:
            model(x)
        cap.layers      # list[LayerRecord], in the order the layers ran

    Parameters
    ----------
    module : torch.nn.Module
        The model (positional only).
    layers : None, dict or list of names
        ``None``: every Hypformer-style layer, recognised by structure (submodules with ``Wq`` and
        ``Wk``, ``nn.ModuleList`` s of per-head maps to ``(N, d + 1)`` points, an optional ``Wv``,
        ``attention_type``, ``power_k``, ``norm_scale``, ``scale`` and ``manifold.k``); their
        per-head outputs are recorded heads first, ``(H, N, d + 1)``.  A list of names: only those
        Hypformer-style layers.  A dict ``{"enc.0": ("enc.0.q", "enc.0.k"[, "enc.0.v"])}``: the
        named modules' outputs are the queries, keys (and values) of the layer ``"enc.0"`` (any
        model, mode ``"generic"``); the ``i``-th output of each makes the ``i``-th record.
    k : float
        Curvature parameter of the points (:math:`\langle x, x\rangle_L = -k`).  Required with a dict
        of ``layers``; Hypformer-style layers use their ``manifold.k`` (``k`` must agree with it, if
        given).
    model : str
        ``"lorentz"`` or ``"poincare"``, what the named modules output: hyperboloid points
        ``(..., d + 1)``, time first (checked with :func:`hypviz.lorentz.check_points` in their own
        dtype), or Poincare-ball points ``(..., d)`` of radius :math:`\sqrt{k}`, mapped by
        :func:`hypviz.lorentz.from_poincare`, :math:`x_s = 2k\,p/(k - \|p\|^2)`.
    heads_axis : int, optional
        The head axis of the named modules' outputs, e.g. 1 for ``(N, H, d + 1)``.  Without it an
        output ``(N, d + 1)`` is one head and the leading axes of ``(..., N, d + 1)`` are heads
        (folded into one axis).
    kind, temperature, power, norm_scale
        What a named layer computes (a kind of :mod:`hypviz.attention`): the softmax temperature
        (default :math:`\sqrt{d}`, stored in the record) or the focused map's ``power`` and
        ``norm_scale``.

    Returns
    -------
    Capture
        A context manager.  Hooks are removed on exit, also when the body raises; the model's
        outputs are never changed; the records are detached CPU copies (works with and without
        ``torch.no_grad()``).

    Raises
    ------
    ValueError
        At once for inconsistent arguments (an unknown ``kind`` or ``model``, a dict of ``layers``
        without ``k``, a named module that does not exist or is not Hypformer-style, ``model`` /
        ``heads_axis`` / ``temperature`` without a dict of ``layers``); on a clean exit of the
        ``with`` block, one line when no attention layer was found or a layer's points are off the
        hyperboloid.  ``TypeError`` when ``module`` is not a ``torch.nn.Module``.
    """
    return Capture(
        module,
        layers,
        k=k,
        model=model,
        heads_axis=heads_axis,
        kind=kind,
        temperature=temperature,
        power=power,
        norm_scale=norm_scale,
    )
