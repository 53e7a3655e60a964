r"""Readers for the field's hyperbolic attention families, each recognised by structure (no upstream code imported),
and :class:`Reader`, the public way to add one.

Each reader hooks one layer, records its queries, keys and values as hyperboloid points (heads first, one
record per batch element, numbered by ``batch``), the mask the layer applied, what the layer computes (kind,
temperature, aggregation) and the layer's own output (or, where heads are concatenated by a learned map, what
enters that map), which :mod:`hypviz.capture.verification` rebuilds from the record.  Written from the
families' code, read at these commits (no code copied):

* **HyperCore** ``LorentzMultiheadAttention``, ``Graph-and-Geometric-Learning/HyperCore`` at ``e87a4f8``,
  ``hypercore/nn/attention/lorentz_former_conv.py`` (``hypercore/manifolds/lorentzian.py``, ``lmath.py``):
  ``Wq``/``Wk``/``Wv`` single ``nn.Linear`` s to ``H (D - 1)`` spatial features, ``project`` adds the time
  :math:`\sqrt{\|x_s\|^2 + c}`, ``full_attention(qs, ks, vs, output_attentions, mask)`` computes

  .. math::

      \mathrm{softmax}\Bigl(\frac{2c + 2\langle q, \kappa\rangle_L}{\mathrm{scale}} + \mathrm{bias}\Bigr)
      = \mathrm{softmax}\Bigl(\frac{-\tfrac12\|q - \kappa\|_L^2}{\mathrm{scale}/2}\Bigr),

  with ``masked_fill(mask, -1e18)`` before the softmax (``mask`` True = masked, shaped by ``shape_mask``:
  ``(N, N)`` causal, ``(B, N)`` padding, ...), then the Lorentzian centroid per head and either the centroid
  of the heads (``centroid_mean_heads``) or, with ``trans_heads_concat`` (every model HyperCore ships:
  ``hypercore/models/Transformer_encoder.py``, ``LViT.py``), ``final_linear`` on the concatenated heads: the
  per-head centroids entering ``final_linear`` are verified (``centroid_heads``).  With ``rot_pos`` the
  spatial parts are rotated (RoPE) before ``full_attention``; the reader wraps ``full_attention`` for the
  capture, so the points are those after RoPE, and the record says ``"with RoPE"``.
* **HELM** (``Graph-and-Geometric-Learning/helm`` at ``83ac8ff``): HELM-D (``helm/modules/helm_d.py``) uses
  ``helm/hypercore/nn/attention/lorentz_former_conv.py``, a *copy* of HyperCore's file (identical at these
  commits, no subclass) with a causal mask, RoPE and ``trans_heads_concat=True``: the HyperCore reader.
  HELM-MiCE's HMLA, ``LorentzMLA`` in ``helm/modules/hmla.py``: latent queries (``wq`` or ``wq_a``/``wq_b``)
  and keys/values (``wkv_a``/``wkv_b``), RoPE on the last ``qk_rope_head_dim - 1`` spatial dims, the time
  recomputed by ``project``, logits :math:`(2c + 2\langle q, \kappa\rangle_L)/\mathrm{softmax\_scale} + \mathrm{bias}`
  (:math:`\tau = \mathrm{softmax\_scale}/2`), the mask as HyperCore's, per-head centroids concatenated into
  ``wo``: :class:`HMLAReader` wraps ``project`` for the capture and verifies what enters ``wo``.
* **HyboNet** (``chenweize1998/fully-hyperbolic-nn`` at ``7ba8e1a``), machine translation,
  ``mt/onmt/modules/lmulti_headed_attn.py``: ``LorentzMultiHeadedAttention`` with ``linear_keys``,
  ``linear_values``, ``linear_query`` (``LorentzLinear`` s with ``head_num``: points ``(B, N, H, D)``),
  ``forward(key, value, query, mask=None, layer_cache=None, attn_type=None)`` returning ``(context, attns)``,
  logits :math:`(2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + \mathrm{bias}` (:math:`\tau = \mathrm{scale}/2`),
  ``masked_fill(mask.unsqueeze(1), -1e18)`` (padding ``(B, 1, M)`` or causal ``(B, N, M)``, True = masked),
  softmax, ``mid_point`` per head (``midpoint_heads``); with a ``layer_cache`` the keys and values are the
  cache's (read after the call).
* **Lorentz GCN gate** ``LorentzAgg`` with ``use_att`` and ``local_agg``: HyboNet's
  ``gcn/layers/hyp_layers.py`` (``7ba8e1a``),
  :math:`G = \sigma((2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + \mathrm{bias})`,
  :math:`s = (\mathrm{adj}\odot G)X`, :math:`s/\sqrt{\max(|\langle s, s\rangle_L|, 10^{-8})}` (``gate_midpoint``);
  HyperCore's copy, ``hypercore/nn/graph_conv/hyobnet_conv.py`` (``e87a4f8``, it has ``c``): the same gate,
  output :math:`\sqrt{c}\,s/\sqrt{\max(|\langle s, s\rangle_L|, 10^{-6})}` (``gate_centroid``).  Kind
  ``"sigmoid"`` at :math:`\tau = \mathrm{scale}/2` with the bias :math:`b + (2 - 2k)/\mathrm{scale}`; the
  record holds the adjacency (sparse stays sparse) and its map is :math:`\mathrm{adj}\odot G`.
* **Poincare-ball attention, HNN++ style** (the ``HyperbolicMultiHeadAttention`` of Poincare-ball
  BERT-style code built on HNN++'s ``PoincareLinear``): ``query``/``key``/``value`` map to
  ``num_attention_heads`` ball points, :math:`\mathrm{softmax}(-d_P(q, \kappa)/\mathrm{scale})`
  (no ``scale`` attribute: 1), the weighted Möbius gyromidpoint of the values
  (``manifold.weighted_midpoint_bmm``); kind ``"poincare"``, ball radius :math:`\sqrt{k}`, :math:`k = 1/c`.

**A new family is one** :class:`Reader` **subclass** registered with :func:`register`: it declares which
submodules output the queries, keys and values, how many heads, whether they output spatial parts only, the
kind and the temperature rule (:meth:`Reader.temperature`, a number or one per head, recorded as
``head_temperatures``), the aggregation, which
forward argument holds the mask and what True means there.  Its family becomes a valid record ``mode``; with
``register(reader, first=True)`` it is tried before every built-in reader (the Hypformer reader too).  A reader
that overrides :meth:`Reader.record` or :meth:`Reader.register` uses the public helpers :func:`heads_first`,
:func:`attended_keys`, :func:`wrap_method` (and :func:`hypviz.lorentz.lift` for spatial parts), and hands its
points to :meth:`Reader.emit`.  A reader of another package reaches other processes (``hypviz compare``) through
an entry point of group ``hypviz.readers`` or ``hypviz --plugin MODULE`` (:mod:`hypviz.base.plugins`); each
record names the reader that made it and its module.

A module that looks like attention (a name with ``attn``/``attention`` and query and key submodules) but
matches no reader is named in one line by :func:`unrecognised` with how to capture it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, ClassVar, cast

import torch
from torch import nn

from hypviz.capture.readers import (
    PerThread,
    Recorder,
    copy_tensor,
    dropout_active,
    dtype_name,
    read_points,
    verified,
    verified_call,
)
from hypviz.capture.records import LayerRecord, add_mode, made_by
from hypviz.lorentz import from_poincare, lift

__all__ = ["Reader", "READERS", "reader_for", "register", "unrecognised", "heads_first", "attended_keys", "wrap_method",
           "WrappedMethod", "HyperCoreReader", "HMLAReader", "HyboNetReader", "LorentzGateReader", "PoincareReader"]


def _num(v: Any) -> float | None:
    try:
        return float(v.detach().reshape(-1)[0]) if isinstance(v, torch.Tensor) else float(v)
    except (TypeError, ValueError, RuntimeError, IndexError):
        return None


def _manifold_k(m: nn.Module, *names: str) -> float:
    man = getattr(m, "manifold", None)
    for n in names:
        v = _num(getattr(man, n, None))
        if v is not None and v > 0:
            return v
    return 1.0


def heads_first(t: torch.Tensor, heads: int) -> torch.Tensor:
    """A projection's output ``(B, N, H * D)``, ``(B, N, H, D)`` or ``(N, H * D)`` as ``(B, H, N, D)``, heads first
    (a view where torch can make one: copy it with :func:`hypviz.capture.readers.copy_tensor` first).

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture import heads_first
    >>> x = torch.arange(2 * 5 * 6.0).reshape(2, 5, 6)    # (B, N, H * D) with H = 3, D = 2
    >>> heads_first(x, 3).shape, bool((heads_first(x, 3)[1, 2, 4] == x[1, 4, 4:6]).all())
    (torch.Size([2, 3, 5, 2]), True)
    """
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() == 3:
        t = t.reshape(t.shape[0], t.shape[1], heads, t.shape[2] // heads)
    return t.permute(0, 2, 1, 3)


def attended_keys(mask: Any, batch: int, queries: int, keys: int, *, true_masks: bool = True) -> torch.Tensor | None:
    """A layer's attention mask as ``(B, H or 1, N, M)`` booleans, True where query :math:`i` attends key :math:`j`;
    None without a mask.

    ``mask`` is what the layer applied: True = masked (``masked_fill(mask, -1e18)``, the families' convention) or,
    with ``true_masks=False``, True = attended; shaped ``(N, M)`` (a causal mask), ``(B, M)`` (padding),
    ``(B, N, M)``, ``(B, 1, M)``, ``(B, H, N, M)``, ``(B, 1, 1, M)``...; a float mask is nonzero = True.  ``batch``,
    ``queries``, ``keys``: :math:`B`, :math:`N`, :math:`M` of the call.

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture import attended_keys
    >>> padding = torch.tensor([[False, False, True]])    # (B, M), True = masked: key 2 is padding
    >>> attended_keys(padding, 1, 2, 3).int().tolist()    # (B, 1, N, M)
    [[[[1, 1, 0], [1, 1, 0]]]]
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"the attention mask must be a tensor, got {type(mask).__name__}")
    t = mask.detach().to("cpu")
    t = t if t.dtype == torch.bool else t != 0
    if t.dim() == 2:  # (N, M) as HyperCore's shape_mask reads it (a causal mask), else (B, M) padding
        t = t[None, None] if tuple(t.shape) == (queries, keys) else t[:, None, None, :]
    elif t.dim() == 3:
        t = t[:, None]
    if t.dim() != 4:
        raise ValueError(f"the attention mask must have 2 to 4 dimensions, got shape {tuple(mask.shape)}")
    t = t.expand(batch, t.shape[1], queries, keys)
    return ~t if true_masks else t


class WrappedMethod:
    """The handle :func:`wrap_method` returns: :meth:`remove` puts the method back (as a hook's handle does).

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture import WrappedMethod, wrap_method
    >>> layer = torch.nn.Identity()
    >>> handle = wrap_method(layer, "forward", lambda original, x: 2 * original(x))
    >>> isinstance(handle, WrappedMethod), layer(torch.ones(1)).item()
    (True, 2.0)
    >>> handle.remove(); layer(torch.ones(1)).item()
    1.0
    """

    _ABSENT = object()

    def __init__(self, obj: Any, name: str, previous: Any):
        self.obj, self.name, self.previous = obj, name, previous

    def remove(self) -> None:
        """Undo the wrapping: the instance's own attribute as it was before (none: the class's method again)."""
        if self.previous is WrappedMethod._ABSENT:
            vars(self.obj).pop(self.name, None)
        else:
            vars(self.obj)[self.name] = self.previous


def wrap_method(obj: Any, name: str, wrapper: Callable[..., Any]) -> WrappedMethod:
    """Make ``obj.name(*args, **kwargs)`` call ``wrapper(original, *args, **kwargs)`` on this instance only; returns
    the handle whose ``remove()`` undoes it (return it from :meth:`Reader.register` with the hooks' handles).

    For a family whose points are not a submodule's output (HyperCore's ``full_attention``, HMLA's ``project``).

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture import wrap_method
    >>> layer, seen = torch.nn.Linear(2, 2), []
    >>> handle = wrap_method(layer, "extra_repr", lambda original: seen.append(1) or "wrapped")
    >>> layer.extra_repr(), seen
    ('wrapped', [1])
    >>> handle.remove(); layer.extra_repr()
    'in_features=2, out_features=2, bias=True'
    """
    original = getattr(obj, name)
    previous = vars(obj).get(name, WrappedMethod._ABSENT)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return wrapper(original, *args, **kwargs)

    setattr(obj, name, wrapped)
    return WrappedMethod(obj, name, previous)


class Reader:
    r"""The public extension point: how one family's attention layer is recorded and verified.

    A subclass declares the layer's structure as class attributes and is added with :func:`register`;
    the default :meth:`register` hooks the declared submodules and the layer's forward, and every call
    becomes one record per batch element (:attr:`family` is its ``mode``).

    Attributes
    ----------
    family : str
        The family's name, the records' ``mode`` (a name).
    structure : str
        One line saying what the reader recognises (shown when no reader matched).
    queries, keys, values : str or None
        Names of the submodules whose outputs are the queries, keys and values: ``(B, N, H * D)`` or
        ``(B, N, H, D)`` (or without ``B``); ``values`` None when the values are not a submodule's output.
    heads : str or int
        The number of heads, or the layer attribute holding it.
    spatial : bool
        True when the submodules output spatial parts only (the time :math:`\sqrt{\|x_s\|^2 + k}` is added).
    k_attributes : tuple of str
        The names tried on ``layer.manifold`` for :math:`k` (the first positive number; else 1).
    kind : str
        The map the layer computes (a kind of :mod:`hypviz.base.kinds`).
    aggregation : str
        How it combines the values (:data:`hypviz.capture.verification.AGGREGATIONS`); what is checked is the
        layer's output (its first element for a tuple), or with a per-head aggregation its output per head.
    mask_argument : str or None
        The forward argument holding the attention mask; :attr:`mask_true_masks`: whether True there means
        *masked* (``masked_fill(mask, ...)``, the families' convention) or *attended*.
    checked : str
        What the verification compares, as the record states it.

    A subclass overrides :meth:`matches` when the submodules alone do not identify the family, :meth:`temperature`
    for its rule, and :meth:`record` (or :meth:`register`) when the points are not submodule outputs; it then hands
    the points to :meth:`emit`, with the helpers :func:`heads_first`, :func:`attended_keys`, :func:`wrap_method` and
    :func:`hypviz.lorentz.lift`.  Each record names its reader (``"module.Class"``) and, for a reader outside
    hypviz, the module to load in another process (:attr:`hypviz.capture.LayerRecord.plugins`).

    Examples
    --------
    >>> import torch
    >>> from hypviz.capture import Reader
    >>> class TinyReader(Reader):
    ...     family, structure = "tiny", "to_q, to_k and to_v, spatial parts of each head"
    ...     queries, keys, values = "to_q", "to_k", "to_v"
    ...     heads, spatial, aggregation = "heads", True, "centroid_heads"
    >>> layer = torch.nn.ModuleDict({name: torch.nn.Linear(4, 6) for name in ("to_q", "to_k", "to_v")})
    >>> layer.heads = 2
    >>> TinyReader.matches(layer), TinyReader.matches(torch.nn.Linear(4, 6))
    (True, False)
    """

    family: ClassVar[str] = ""
    structure: ClassVar[str] = ""
    queries: ClassVar[str | None] = None
    keys: ClassVar[str | None] = None
    values: ClassVar[str | None] = None
    heads: ClassVar[str | int] = 1
    spatial: ClassVar[bool] = False
    k_attributes: ClassVar[tuple[str, ...]] = ("k", "c")
    kind: ClassVar[str] = "distance"
    aggregation: ClassVar[str] = "centroid_mean_heads"
    mask_argument: ClassVar[str | None] = None
    mask_true_masks: ClassVar[bool] = True
    checked: ClassVar[str] = "the layer's output"
    # the family's module: its attributes (num_heads, manifold, ...) are its own, unknown to torch's types
    layer: Any

    def __init__(self, cap: Recorder, name: str, layer: nn.Module):
        self.cap, self.name, self.layer = cap, name, layer
        self._per_thread = PerThread(dict)  # a model called from several threads: each call recorded whole

    @property
    def cur(self) -> dict[str, Any]:
        """The calling thread's call in progress (empty outside a call)."""
        return self._per_thread.value

    @cur.setter
    def cur(self, state: dict[str, Any]) -> None:
        self._per_thread.value = state

    @property
    def calls(self) -> int:
        """Calls recorded so far (across threads); the call in progress is numbered this."""
        return self._per_thread.calls

    # ---- what a subclass may override ----
    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        """Whether ``m`` has this family's structure (default: the declared submodules exist)."""
        names = [n for n in (cls.queries, cls.keys, cls.values) if n]
        return bool(cls.queries and cls.keys) and all(isinstance(getattr(m, n, None), nn.Module) for n in names) \
            and (isinstance(cls.heads, int) or hasattr(m, cls.heads))

    def temperature(self, layer: nn.Module) -> float | torch.Tensor | None:
        r""":math:`\tau` of the layer's map (a number, or a tensor of one per head); the sign of a negative
        value is recorded as ``scale_sign``; one per head must be positive (``head_temperatures``); None when the
        layer's attributes do not give it (then one :math:`\tau` per call is measured from its outputs, or the records
        say it could not be).  Default: ``layer.scale / 2``, the logits
        :math:`(2k + 2\langle q, \kappa\rangle_L)/\mathrm{scale} = (-\tfrac12\|q - \kappa\|_L^2)/(\mathrm{scale}/2)`."""
        s = getattr(layer, "scale", None)
        if s is None:
            raise ValueError("the layer has no scale; override Reader.temperature")
        return s.detach() / 2.0 if isinstance(s, torch.Tensor) else float(s) / 2.0

    def n_heads(self) -> int:
        """The number of heads: :attr:`heads`, or the layer's attribute it names."""
        return self.heads if isinstance(self.heads, int) else int(getattr(self.layer, self.heads))

    def k(self) -> float:
        """:math:`k` of the layer's points: the first positive number of :attr:`k_attributes` on ``layer.manifold``,
        else 1."""
        return _manifold_k(self.layer, *self.k_attributes)

    # ---- the default machinery ----
    def register(self) -> list[Any]:
        """Hooks on the layer and its declared submodules; returns their handles."""
        L = self.layer
        hs = [L.register_forward_pre_hook(self._pre, with_kwargs=True),
              L.register_forward_hook(self._post, with_kwargs=True)]
        for role in ("queries", "keys", "values"):
            attr = getattr(type(self), role)
            if attr:
                hs.append(getattr(L, attr).register_forward_hook(self._hook_role(role)))
        return hs

    def _hook_role(self, role: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                self.cur[role] = output
            return None
        return hook

    def _argument(self, name: str | None, args: tuple, kwargs: dict) -> Any:
        if name is None:
            return None
        if name in kwargs:
            return kwargs[name]
        try:
            params = list(inspect.signature(self.layer.forward).parameters)
        except (TypeError, ValueError):
            return None
        i = params.index(name) if name in params else -1
        return args[i] if 0 <= i < len(args) else None

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.cur = {"mask": self._argument(self.mask_argument, args, kwargs)}
        return None

    def _post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        cur, self.cur = self.cur, {}
        try:
            self.record(cur, args, kwargs, output)
        except (TypeError, ValueError) as exc:
            self.cap.fail(f"layer {self.name!r} (call {self.calls}): {exc}")
        return None

    def record(self, cur: dict[str, Any], args: tuple, kwargs: dict, output: Any) -> None:
        """One call: the declared roles' outputs, the mask and the output, into records (default machinery)."""
        roles = [r for r in ("queries", "keys", "values") if getattr(type(self), r)]
        if not all(r in cur for r in roles):
            raise ValueError(f"its {', '.join(getattr(type(self), r) for r in roles)} did not all run in its forward")
        h, k = self.n_heads(), self.k()
        pts = {r: heads_first(copy_tensor(cur[r]), h) for r in roles}
        if self.spatial:
            pts = {r: lift(t.double(), k=k).to(t.dtype) for r, t in pts.items()}
        out = output[0] if isinstance(output, (tuple, list)) else output
        seen = None
        if isinstance(out, torch.Tensor):
            seen = copy_tensor(out)
            seen = heads_first(seen, h) if self.aggregation in _PER_HEAD else (seen if seen.dim() == 3 else seen.unsqueeze(0))
        mask = {"masked" if self.mask_true_masks else "attended": cur.get("mask")}
        self.emit(pts["queries"], pts["keys"], pts.get("values"), seen, dtype=dtype_name(cur["queries"]), **mask)

    def emit(self, q: torch.Tensor, keys: torch.Tensor, v: torch.Tensor | None, seen: torch.Tensor | None, *,
             dtype: str | None, masked: torch.Tensor | None = None, attended: torch.Tensor | None = None,
             note: str | None = None, aux: Callable[[int], dict[str, Any]] | None = None, **fields: Any) -> None:
        """Records of one call, one per batch element, verified against the layer's output.

        Parameters
        ----------
        q, keys, v : torch.Tensor
            The queries, keys and values ``(B, H, N, D)`` (``v`` may be None), hyperboloid points, time first.
        seen : torch.Tensor or None
            The output the verification compares, ``(B, ...)`` (per head ``(B, H, N, D)`` for a per-head aggregation);
            None: the records say they are not verified.
        dtype : str or None
            The dtype the model computed in (:func:`hypviz.capture.readers.dtype_name`).
        masked, attended : torch.Tensor or None
            The layer's mask, at most one of them: ``masked`` True = masked (``masked_fill(mask, ...)``, the families'
            convention), ``attended`` True = attended; any shape :func:`attended_keys` takes.
        note : str or None
            Why the records are not verified (then they are not).
        aux : callable or None
            ``aux(b)``: what else the verification of batch element ``b`` needs (e.g. ``{"self_term": ...}``).
        fields
            Record fields that override the declared ones (``kind``, ``temperature``, ``aggregation``, ...).
        """
        if masked is not None and attended is not None:
            raise ValueError("emit takes the mask once: masked= (True = masked) or attended= (True = attended), got both")
        b, n, m = q.shape[0], q.shape[2], keys.shape[2]
        mask = attended_keys(masked, b, n, m) if masked is not None else attended_keys(attended, b, n, m, true_masks=False)
        fields.setdefault("k", self.k())
        fields.setdefault("mode", self.family)
        fields.setdefault("kind", self.kind)
        fields.setdefault("aggregation", self.aggregation)
        fields.setdefault("checked", self.checked)
        for key, value in made_by(type(self), fields["kind"]).items():
            fields.setdefault(key, value)
        if "temperature" not in fields and _KINDS_WITH_TAU(fields["kind"]):
            tau = self.temperature(self.layer)
            if tau is None:  # not given by the layer's attributes: measured from the call's outputs (verified_call)
                fields.update(temperature=math.sqrt(q.shape[-1] - 1), temperature_source="default")
            elif isinstance(tau, torch.Tensor) and tau.numel() > 1:  # one temperature per head
                ts = tau.detach().double().reshape(-1)
                if ts.numel() != q.shape[1] or not bool(torch.isfinite(ts).all()) or not (bool((ts > 0).all())):
                    raise ValueError(f"a temperature per head must be {q.shape[1]} positive finite numbers, "
                                     f"got {ts.tolist()}")
                fields.update(head_temperatures=ts.tolist(), temperature=float(ts.log().mean().exp()),
                              temperature_source="attributes")
            else:
                t = _num(tau)
                if t is None or not math.isfinite(t) or t == 0:
                    raise ValueError(f"the temperature must be a non-zero finite number, got {tau!r}")
                fields.update(temperature=abs(t), scale_sign=1 if t > 0 else -1, temperature_source="attributes")
        half = dtype in ("float16", "bfloat16")
        k = fields["k"]
        multi = q.shape[0] > 1
        call = self._per_thread.next_call()  # numbered under a lock: calls from several threads get distinct numbers
        parts = []
        for b in range(q.shape[0]):
            qb, kb = read_points(q[b], k=k, half=half), read_points(keys[b], k=k, half=half)
            vb = None if v is None else read_points(v[b], k=k, half=half)
            rec = LayerRecord(name=self.name, queries=qb, keys=kb, values=vb, call=call, dtype=dtype,
                              training=bool(self.layer.training), batch=b if multi else None,
                              mask=None if mask is None else mask[b], **fields).check()
            parts.append((rec, None if seen is None else seen[b], aux(b) if aux else None))
        if note is not None or seen is None:
            done = [verified(rec, None, None) for rec, _, _ in parts]
            if note is not None:
                done = [dataclasses.replace(rec, verify_note=f"not verified: {note}") for rec in done]
        else:
            done = verified_call(parts)  # one temperature for the whole call, never one per batch element
        self.cap.raw.extend(done)
        if dropout_active(self.layer):
            self.cap.dropout.append(self.name)


_PER_HEAD = ("midpoint_heads", "centroid_heads", "focused_heads", "gyromidpoint_heads")


def _KINDS_WITH_TAU(kind: str) -> bool:
    from hypviz.base import kinds as registry
    return registry.get(kind).temperature


def _scale(layer: nn.Module, name: str, attr: str = "scale") -> tuple[float, int]:
    s = _num(getattr(layer, attr, None))
    if s is None or not math.isfinite(s) or s == 0:
        raise ValueError(f"layer {name!r}: {attr} must be a non-zero finite number, got {getattr(layer, attr, None)!r}")
    return abs(s), (1 if s > 0 else -1)


class HyperCoreReader(Reader):
    """HyperCore's ``LorentzMultiheadAttention`` and HELM's copy of it (see the module docstring).

    Read: https://github.com/Graph-and-Geometric-Learning/HyperCore/blob/e87a4f8/hypercore/nn/attention/lorentz_former_conv.py
    and https://github.com/Graph-and-Geometric-Learning/helm/blob/83ac8ff/helm/hypercore/nn/attention/lorentz_former_conv.py
    (its copy; used by ``helm/modules/helm_d.py``).
    """

    family = "hypercore"
    structure = ("Wq and Wk nn.Linear, full_attention(), num_heads, out_channels and manifold.c, "
                 "as HyperCore's LorentzMultiheadAttention (and HELM's copy)")
    k_attributes = ("c", "k")

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return (isinstance(getattr(m, "Wq", None), nn.Linear) and isinstance(getattr(m, "Wk", None), nn.Linear)
                and callable(getattr(m, "full_attention", None)) and hasattr(m, "num_heads")
                and hasattr(getattr(m, "manifold", None), "c"))

    def register(self) -> list[Any]:
        layer = self.layer

        def full_attention(original: Callable[..., Any], qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor,
                           *args: Any, **kwargs: Any) -> Any:
            self.cur["concat_in"] = None
            out = original(qs, ks, vs, *args, **kwargs)
            try:
                self._record(qs, ks, vs, out, args, kwargs)
            except (TypeError, ValueError) as exc:
                self.cap.fail(f"layer {self.name!r} (call {self.calls}): {exc}")
            return out

        hs: list[Any] = [layer.register_forward_pre_hook(self._pre_call, with_kwargs=True),
                         wrap_method(layer, "full_attention", full_attention)]
        fl = getattr(layer, "final_linear", None)
        if isinstance(fl, nn.Module):
            hs.append(fl.register_forward_pre_hook(self._concat_in))
        return hs

    def _concat_in(self, module: nn.Module, args: tuple) -> None:
        if "concat_in" in self.cur and args and isinstance(args[0], torch.Tensor):
            self.cur["concat_in"] = args[0]
        return None

    def _pre_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        rot = kwargs.get("rot_pos", args[4] if len(args) > 4 else None)
        self.cur = {"rotary": rot is not None}
        return None

    def _record(self, qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, out: Any, args: tuple, kwargs: dict) -> None:
        layer = self.layer
        k = self.k()
        tau, sign = _scale(layer, self.name)
        h = int(layer.num_heads)
        dt = torch.float64 if qs.dtype == torch.float64 else torch.float32
        q, kk, v = (lift(copy_tensor(t).permute(0, 2, 1, 3).double(), k=k).to(dt) for t in (qs, ks, vs))
        mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
        details = ["with RoPE"] if self.cur.get("rotary") else []
        note = None
        if getattr(layer, "trans_heads_concat", False):
            details.append("heads concatenated by final_linear")
            agg, checked = "centroid_heads", "per-head centroids entering final_linear (the concatenating map)"
            cin = self.cur.get("concat_in")
            seen = None if cin is None else heads_first(copy_tensor(cin), h)
            if cin is None:
                note = "final_linear (the concatenating map) did not run inside full_attention"
        else:
            agg, checked = "centroid_mean_heads", "the layer's output (centroid of the heads' centroids)"
            o = out[0] if isinstance(out, tuple) else out
            seen = copy_tensor(o) if isinstance(o, torch.Tensor) else None
            if seen is not None and seen.dim() == 2:
                seen = seen.unsqueeze(0)
        if getattr(layer, "normalize", False):
            note = "normalize=True rescales the queries and keys inside full_attention (not rebuilt by hypviz)"
        if seen is not None:
            seen = seen.double()
        self.emit(q, kk, v, seen, dtype=dtype_name(qs), masked=mask, note=note, k=k, temperature=tau / 2.0,
                  scale_sign=sign, temperature_source="attributes", aggregation=agg, checked=checked,
                  detail=", ".join(details) or None)


class HMLAReader(Reader):
    """HELM's hyperbolic multi-head latent attention, ``LorentzMLA`` (see the module docstring).

    Read: https://github.com/Graph-and-Geometric-Learning/helm/blob/83ac8ff/helm/modules/hmla.py
    """

    family = "helm_hmla"
    structure = ("wkv_a, wkv_b, wo, project(), softmax_scale, n_heads, qk_rope_head_dim and manifold.c, "
                 "as HELM's LorentzMLA (helm/modules/hmla.py)")
    k_attributes = ("c", "k")
    aggregation = "centroid_heads"
    checked = "per-head centroids entering wo (the concatenating map)"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return all(isinstance(getattr(m, a, None), nn.Module) for a in ("wkv_a", "wkv_b", "wo")) \
            and callable(getattr(m, "project", None)) and hasattr(m, "softmax_scale") and hasattr(m, "n_heads") \
            and hasattr(getattr(m, "manifold", None), "c")

    def register(self) -> list[Any]:
        layer = self.layer

        def project(original: Callable[..., Any], x: torch.Tensor) -> torch.Tensor:
            y = original(x)
            if "projected" in self.cur and isinstance(y, torch.Tensor):
                self.cur["projected"].append(y)
            return y

        return [layer.register_forward_pre_hook(self._pre, with_kwargs=True),
                layer.register_forward_hook(self._post, with_kwargs=True), wrap_method(layer, "project", project),
                layer.wo.register_forward_pre_hook(self._wo_in)]

    def _wo_in(self, module: nn.Module, args: tuple) -> None:
        if "projected" in self.cur and args and isinstance(args[0], torch.Tensor):
            self.cur["concat_in"] = args[0]
        return None

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.cur = {"projected": [], "mask": kwargs.get("mask", args[3] if len(args) > 3 else None)}
        return None

    def temperature(self, layer: nn.Module) -> float | torch.Tensor | None:
        s: Any = layer.softmax_scale  # the family's attribute: a number or a tensor
        return s.detach() / 2.0 if isinstance(s, torch.Tensor) else float(s) / 2.0

    def record(self, cur: dict[str, Any], args: tuple, kwargs: dict, output: Any) -> None:
        got = cur.get("projected", [])
        if len(got) != 3 or cur.get("concat_in") is None:
            raise ValueError(f"expected project() three times (queries, keys, values) and wo once in its forward, "
                             f"got project() {len(got)} times")
        h = int(self.layer.n_heads)
        q, kk, v = (copy_tensor(t).permute(0, 2, 1, 3) for t in got)  # (B, S, H, D) -> (B, H, S, D)
        mask = cur.get("mask")
        if isinstance(mask, torch.Tensor):
            if callable(getattr(self.layer, "shape_mask", None)):
                mask = self.layer.shape_mask(mask, q.shape[0], h, q.shape[2])
        seen = heads_first(copy_tensor(cur["concat_in"]), h).double()
        rope = _num(getattr(self.layer, "qk_rope_head_dim", None))
        self.emit(q, kk, v, seen, dtype=dtype_name(got[0]), masked=mask,
                  detail=f"{'latent queries' if _num(getattr(self.layer, 'q_lora_rank', None)) else 'queries from wq'}"
                         f" and latent keys, RoPE on the last {int(rope) - 1 if rope else '?'} spatial dims of each head")


class HyboNetReader(Reader):
    """HyboNet's machine-translation ``LorentzMultiHeadedAttention`` (see the module docstring).

    Read: https://github.com/chenweize1998/fully-hyperbolic-nn/blob/7ba8e1a/mt/onmt/modules/lmulti_headed_attn.py
    (its ``LorentzLinear``: ``mt/onmt/modules/hyper_nets.py``).
    """

    family = "hybonet"
    structure = ("linear_query, linear_keys and linear_values, head_count, scale and bias, forward(key, value, query, "
                 "mask, ...), as HyboNet's LorentzMultiHeadedAttention (mt/onmt/modules/lmulti_headed_attn.py)")
    queries, keys, values = "linear_query", "linear_keys", "linear_values"
    heads = "head_count"
    aggregation = "midpoint_heads"
    mask_argument = "mask"
    checked = "the per-head context the layer returns (before any final linear)"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return super().matches(m) and hasattr(m, "scale") and hasattr(m, "manifold")

    def record(self, cur: dict[str, Any], args: tuple, kwargs: dict, output: Any) -> None:
        cache = self._argument("layer_cache", args, kwargs)
        if isinstance(cache, dict):  # decoding: the keys and values are the cache's, read after the call
            kind = self._argument("attn_type", args, kwargs)
            pre = "self" if kind == "self" else "memory"
            if isinstance(cache.get(f"{pre}_keys"), torch.Tensor):
                cur["keys"] = cache[f"{pre}_keys"].transpose(1, 2)
                cur["values"] = cache[f"{pre}_values"].transpose(1, 2)
        super().record(cur, args, kwargs, output)


class LorentzGateReader(Reader):
    r"""The Lorentz GCN sigmoid gate: HyboNet's ``LorentzAgg`` and HyperCore's copy (see the module docstring).

    Read: https://github.com/chenweize1998/fully-hyperbolic-nn/blob/7ba8e1a/gcn/layers/hyp_layers.py and
    https://github.com/Graph-and-Geometric-Learning/HyperCore/blob/e87a4f8/hypercore/nn/graph_conv/hyobnet_conv.py
    (the copy keeps ``c``: output scaled by :math:`\sqrt{c}`, rows clamped at :math:`10^{-6}`).
    """

    family = "lorentz_gcn"
    structure = "query_linear and key_linear, use_att and local_agg, scale and bias, forward(x, adj), as HyboNet's LorentzAgg"
    queries, keys = "query_linear", "key_linear"
    kind = "sigmoid"
    aggregation = "gate_midpoint"
    checked = "the layer's output"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return super().matches(m) and bool(getattr(m, "use_att", False)) and bool(getattr(m, "local_agg", True)) \
            and hasattr(m, "scale") and hasattr(m, "bias")

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = kwargs.get("x", args[0] if args else None)
        adj = kwargs.get("adj", args[1] if len(args) > 1 else None)
        self.cur = {"values": x, "adjacency": adj}
        return None

    def record(self, cur: dict[str, Any], args: tuple, kwargs: dict, output: Any) -> None:
        if "queries" not in cur or "keys" not in cur or not isinstance(cur.get("values"), torch.Tensor):
            raise ValueError("query_linear and key_linear did not both run in its forward")
        layer = self.layer
        hypercore = hasattr(layer, "c")  # HyperCore's copy keeps c and scales the output by sqrt(c)
        k = cast(float, _num(layer.c)) if hypercore else _manifold_k(layer, "k", "c")  # HyperCore's c: a number, its k
        tau, sign = _scale(layer, self.name)
        scale = sign * tau
        bias = _num(layer.bias)
        q, kk, v = (copy_tensor(cur[r]).reshape(1, 1, -1, cur[r].shape[-1]) for r in ("queries", "keys", "values"))
        adj = cur.get("adjacency")
        if isinstance(adj, torch.Tensor):
            adj = adj.detach().to("cpu")
            adj = adj.coalesce() if adj.layout == torch.sparse_coo else adj
            adj = adj.to(torch.float64) if adj.layout == torch.strided else adj.double()
        else:
            adj = None
        seen = copy_tensor(output).reshape(1, -1, output.shape[-1]) if isinstance(output, torch.Tensor) else None
        if seen is not None:
            seen = seen.double()
        # (2 + 2 <q, kappa>_L) / scale + bias = (-1/2 |q - kappa|^2_L) / (scale / 2) + bias + (2 - 2k) / scale
        self.emit(q, kk, v, seen, dtype=dtype_name(output), k=k, temperature=tau / 2.0, scale_sign=sign,
                  bias=(bias or 0.0) + (2.0 - 2.0 * k) / scale, temperature_source="attributes",
                  aggregation="gate_centroid" if hypercore else "gate_midpoint", adjacency=adj,
                  detail="HyperCore's copy: output scaled by sqrt(c), rows clamped at 1e-6" if hypercore else None)


class PoincareReader(Reader):
    """Poincare-ball multi-head attention in the HNN++ style (see the module docstring)."""

    family = "poincare"
    structure = ("query, key and value submodules, num_attention_heads and a manifold with c and "
                 "weighted_midpoint_bmm, as HNN++-style HyperbolicMultiHeadAttention")

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        man = getattr(m, "manifold", None)
        return (all(isinstance(getattr(m, a, None), nn.Module) for a in ("query", "key", "value"))
                and hasattr(m, "num_attention_heads") and callable(getattr(man, "weighted_midpoint_bmm", None)))

    queries, keys, values = "query", "key", "value"
    kind = "poincare"
    aggregation = "gyromidpoint_heads"

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.cur = {"mask": kwargs.get("attention_mask", args[1] if len(args) > 1 else None),
                    "cross": kwargs.get("encoder_hidden_states", args[3] if len(args) > 3 else None)}
        return None

    def record(self, cur: dict[str, Any], args: tuple, kwargs: dict, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if not all(r in cur for r in ("queries", "keys", "values")) or not isinstance(out, torch.Tensor):
            raise ValueError("query, key and value did not all run in its forward")
        h = int(self.layer.num_attention_heads)
        c = _num(getattr(self.layer.manifold, "c", None)) or 1.0
        k = 1.0 / c
        s = _num(getattr(self.layer, "scale", None))
        tau, sign = (1.0, 1) if s is None else (abs(s), 1 if s > 0 else -1)
        q, kk, v = (from_poincare(heads_first(copy_tensor(cur[r]), h).double(), k=k) for r in ("queries", "keys", "values"))
        if cur["queries"].dtype != torch.float64:
            q, kk, v = q.float(), kk.float(), v.float()
        seen = heads_first(copy_tensor(out), h)
        note = "an attention mask was passed" if cur.get("mask") is not None else None
        self.emit(q, kk, v, seen, dtype=dtype_name(out), note=note, k=k, temperature=tau, scale_sign=sign,
                  temperature_source="attributes" if s is not None else "default")


#: The family readers, tried in order after the Hypformer reader (:func:`register` adds one).
READERS: list[type[Reader]] = []


def register(reader: type[Reader], *, first: bool = False) -> type[Reader]:
    """Add a :class:`Reader` subclass (its ``family`` becomes a valid record ``mode``); returns it, so that it can
    decorate the class.  Registering the same class twice is a no-op.

    With ``first=True`` the reader is tried before every other one, the built-in readers and the Hypformer reader
    included: a layer it matches is its own even where a built-in reader matches too (the last registered with
    ``first=True`` is tried first; registering a class again with ``first=True`` moves it to the front).

    Examples
    --------
    >>> from hypviz.capture import READERS, modes, register
    >>> reader = READERS[0]                 # registering a class again is a no-op
    >>> register(reader) is reader, reader.family in modes()
    (True, True)
    >>> register(int)
    Traceback (most recent call last):
        ...
    TypeError: reader must be a subclass of hypviz.capture.Reader, got <class 'int'>
    """
    if not (isinstance(reader, type) and issubclass(reader, Reader)):
        raise TypeError(f"reader must be a subclass of hypviz.capture.Reader, got {reader!r}")
    if not isinstance(first, bool):
        raise TypeError(f"first must be True or False, got {first!r}")
    if not reader.family or not reader.family.isidentifier():
        raise ValueError(f"reader.family must be a name (letters, digits, underscores), got {reader.family!r}")
    clash = next((r for r in READERS if r.family == reader.family and r is not reader), None)
    if clash is not None:
        raise ValueError(f"reader.family must be new, got {reader.family!r} (already {clash.__name__}'s)")
    add_mode(reader.family)
    if first:
        if reader in READERS:
            READERS.remove(reader)
        READERS.insert(0, reader)
        _FIRST.add(reader)
    elif reader not in READERS:
        READERS.append(reader)
        _FIRST.discard(reader)  # removed from READERS since it was registered first: now an ordinary reader
    return reader


_FIRST: set[type[Reader]] = set()  # the readers registered with first=True (tried before the Hypformer reader too)

for _r in (HyperCoreReader, HMLAReader, HyboNetReader, LorentzGateReader, PoincareReader):
    register(_r)


def reader_for(m: nn.Module, *, first_only: bool = False) -> type[Reader] | None:
    """The first reader of :data:`READERS` whose structure ``m`` has, else None; with ``first_only``, only among the
    readers registered with ``first=True``."""
    for r in READERS:
        if first_only and r not in _FIRST:
            continue
        try:
            if r.matches(m):
                return r
        except Exception:  # a module whose attributes raise is simply not that family
            continue
    return None


_QK = (("Wq", "Wk"), ("q_proj", "k_proj"), ("query", "key"), ("linear_query", "linear_key"),
       ("query_linear", "key_linear"), ("to_q", "to_k"), ("W_q", "W_k"), ("linear_query", "linear_keys"),
       ("wq", "wkv_a"), ("wq_b", "wkv_b"))


def unrecognised(named: dict[str, nn.Module], known: set[str]) -> list[str]:
    """Modules that look like attention (query and key submodules) but no reader recognised: one line each."""
    out = []
    for n, m in named.items():
        parts = n.split(".")  # inside a recognised layer: one of its prefixes is known (linear in the model's size)
        if n in known or any(".".join(parts[:i]) in known for i in range(1, len(parts))):
            continue
        has = next(((a, b) for a, b in _QK if isinstance(getattr(m, a, None), nn.Module)
                    and isinstance(getattr(m, b, None), nn.Module)), None)
        if has and any(w in type(m).__name__.lower() for w in ("attn", "attention", "conv", "agg")):
            out.append(
                f"module {n!r} ({type(m).__name__}) has {has[0]}/{has[1]} like an attention layer but no reader "
                f"recognised it; capture it with layers={{{n!r}: ({n + '.' + has[0]!r}, {n + '.' + has[1]!r})}}, k=... "
                "or add a hypviz.capture.Reader with hypviz.capture.register"
            )
    return out
