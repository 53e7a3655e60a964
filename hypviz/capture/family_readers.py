r"""Readers for the field's other hyperbolic attention families, each recognised by structure (no upstream code imported).

Each reader hooks one layer, records its queries, keys and values as hyperboloid points (heads first,
one record per batch element), what the layer computes (kind, temperature convention, aggregation),
and the layer's own output, which :mod:`hypviz.capture.verification` rebuilds from the record.  Written from
the families' maths after reading their public code (checked how: the attribute names and call
structure each reader relies on, the logits' constant, the scale's initial value, the aggregation and
the head layout, line by line against these files; no code was copied):

* **HyperCore** ``LorentzMultiheadAttention`` (``white-richard/HyperCore``,
  ``hypercore/nn/conv/lorentz_former_conv.py`` and ``hypercore/manifolds/lorentzian.py``): ``Wq``/``Wk``
  single ``nn.Linear`` s to ``H (D - 1)`` spatial features, ``project`` adds the time
  :math:`\sqrt{\|x_s\|^2 + c}` (``c`` = :math:`k`), ``full_attention`` computes

  .. math::

      \mathrm{softmax}\Bigl(\frac{2c + 2\langle q, \kappa\rangle_L}{\mathrm{scale}} + \mathrm{bias}\Bigr)
      = \mathrm{softmax}\Bigl(\frac{-\tfrac12\|q - \kappa\|_L^2}{\mathrm{scale}/2}\Bigr),

  ``scale`` initialised :math:`\sqrt{H D}`: :math:`\tau = \mathrm{scale}/2` (Hypformer's ``large/``
  tree divides the inner product by :math:`k` instead, :math:`\tau = k\,\mathrm{scale}/2`), then the
  Lorentzian centroid per head and the centroid of the heads' mean.  The reader wraps the layer's
  ``full_attention`` method for the duration of the capture (the points after any rotary embedding).
* **HELM** (``Graph-and-Geometric-Learning/helm``, its attention subclasses HyperCore's and overrides
  ``apply_rotary_embeddings``): RoPE on the spatial part, time recomputed by ``project``, then the
  same logits; read by the HyperCore reader (mode ``"helm"`` when a rotary argument was passed).
* **HyboNet** ``LorentzMultiHeadedAttention`` (``chenweize1998/fully-hyperbolic-nn``, its machine
  translation tree ``onmt/modules/multi_headed_attn.py``; the ``hyp_layers.py`` copy in its GCN tree
  passes the logits to ``mid_point`` without a softmax, which this reader does not reproduce, so that
  layer is reported *not verified*): ``linear_query``/``linear_key``/``linear_value`` map to
  ``head_count`` points of ``dim_per_head`` coordinates, logits :math:`(2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + \mathrm{bias}`
  (:math:`\tau = \mathrm{scale}/2`, ``scale`` initialised :math:`\sqrt{\mathrm{dim}}`), softmax, then
  ``mid_point`` per head, :math:`a/\sqrt{|\langle a, a\rangle_L|}`, heads concatenated.
* **Lorentz GCN gate** (HyboNet's and LResNet's ``LorentzAgg`` with ``use_att`` and ``local_agg``):
  ``query_linear``/``key_linear`` points, the gate
  :math:`\sigma((2 + 2\langle q, \kappa\rangle_L)/\mathrm{scale} + \mathrm{bias})` times the adjacency,
  rows **not** normalised, then :math:`s = G X`, :math:`s/\sqrt{|\langle s, s\rangle_L|}`; kind
  ``"sigmoid"`` at :math:`\tau = \mathrm{scale}/2` with the bias :math:`b + (2 - 2k)/\mathrm{scale}`
  (``scale`` initialised :math:`\sqrt{d}`, ``bias`` 20).
* **Poincare-ball attention, HNN++ style** (the ``HyperbolicMultiHeadAttention`` of Poincare-ball
  BERT-style code built on HNN++'s ``PoincareLinear``): ``query``/``key``/``value`` map to
  ``num_attention_heads`` ball points, :math:`\mathrm{softmax}(-d_P(q, \kappa)/\mathrm{scale})`
  (no ``scale`` attribute: 1), the weighted Möbius gyromidpoint of the values
  (``manifold.weighted_midpoint_bmm``); kind ``"poincare"``, ball radius :math:`\sqrt{k}`,
  :math:`k = 1/c`.

A module that looks like attention (a name with ``attn``/``attention`` and query and key
submodules) but matches none of these is named in one line by :func:`unrecognised` with how to
capture it (``layers=`` or :func:`register`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from hypviz.capture.readers import Recorder, copy_tensor, dropout_active, dtype_name, read_points, verified
from hypviz.capture.records import LayerRecord
from hypviz.lorentz import from_poincare

__all__ = ["READERS", "reader_for", "register", "unrecognised"]


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


def _heads(t: torch.Tensor, h: int) -> torch.Tensor:
    """``(B, N, H * D)`` or ``(B, N, H, D)`` (or without B) -> ``(B, H, N, D)``."""
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() == 3:
        t = t.reshape(t.shape[0], t.shape[1], h, t.shape[2] // h)
    return t.permute(0, 2, 1, 3)


def _lift(xs: torch.Tensor, k: float) -> torch.Tensor:
    return torch.cat([torch.sqrt((xs * xs).sum(dim=-1, keepdim=True) + k), xs], dim=-1)


class _Reader:
    """One layer of a family: hooks, per-call buffers, and the records of each batch element."""

    family = ""
    structure = ""

    def __init__(self, cap: Recorder, name: str, layer: nn.Module):
        self.cap, self.name, self.layer = cap, name, layer
        self.calls = 0
        self.cur: dict[str, Any] = {}

    @classmethod
    def matches(cls, m: nn.Module) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def register(self) -> list[Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _hook_role(self, role: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                self.cur[role] = output
            return None
        return hook

    def _emit(self, q: torch.Tensor, kk: torch.Tensor, v: torch.Tensor | None, seen: torch.Tensor | None,
              *, dtype: str | None, note: str | None = None, aux: Callable[[int], dict[str, Any]] | None = None,
              **fields: Any) -> None:
        """One record per batch element (``q (B, H, N, D)``); verification unless ``note`` says why not."""
        half = dtype in ("float16", "bfloat16")
        k = fields["k"]
        for b in range(q.shape[0]):
            try:
                qb, kb = read_points(q[b], k, half), read_points(kk[b], k, half)
                vb = None if v is None else read_points(v[b], k, half)
                rec = LayerRecord(name=self.name, queries=qb, keys=kb, values=vb, call=self.calls, dtype=dtype,
                                  training=bool(self.layer.training), **fields).check()
                if note is not None or seen is None:
                    rec = verified(rec, None, None)
                    if note is not None:
                        import dataclasses
                        rec = dataclasses.replace(rec, verify_note=f"not verified: {note}")
                else:
                    rec = verified(rec, seen[b], aux(b) if aux else None)
            except (TypeError, ValueError) as exc:
                self.cap.fail(f"layer {self.name!r} (call {self.calls}): {exc}")
                return
            self.cap.raw.append(rec)
            self.calls += 1
        if dropout_active(self.layer):
            self.cap.dropout.append(self.name)


def _scale(layer: nn.Module, name: str) -> tuple[float, int]:
    s = _num(getattr(layer, "scale", None))
    if s is None or not math.isfinite(s) or s == 0:
        raise ValueError(f"layer {name!r}: scale must be a non-zero finite number, got {getattr(layer, 'scale', None)!r}")
    return abs(s), (1 if s > 0 else -1)


class HyperCoreReader(_Reader):
    """HyperCore's (and HELM's) ``LorentzMultiheadAttention`` (see the module docstring)."""

    family = "hypercore"
    structure = "Wq and Wk nn.Linear, full_attention(), num_heads, out_channels and manifold.c, as HyperCore's LorentzMultiheadAttention"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return (isinstance(getattr(m, "Wq", None), nn.Linear) and isinstance(getattr(m, "Wk", None), nn.Linear)
                and callable(getattr(m, "full_attention", None)) and hasattr(m, "num_heads")
                and hasattr(getattr(m, "manifold", None), "c"))

    def register(self) -> list[Any]:
        layer = self.layer
        original = layer.full_attention

        def full_attention(qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            out = original(qs, ks, vs, *args, **kwargs)
            try:
                self._record(qs, ks, vs, out, args, kwargs)
            except (TypeError, ValueError) as exc:
                self.cap.fail(str(exc))
            return out

        layer.full_attention = full_attention
        linear = getattr(layer, "linear_focus_attention", None)
        if callable(linear):
            def linear_focus_attention(qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                out = linear(qs, ks, vs, *args, **kwargs)
                try:
                    self._record_linear(qs, ks, vs)
                except (TypeError, ValueError) as exc:
                    self.cap.fail(str(exc))
                return out

            layer.linear_focus_attention = linear_focus_attention
        pre = layer.register_forward_pre_hook(self._pre, with_kwargs=True)

        class _Restore:
            def remove(self_inner) -> None:
                layer.__dict__.pop("full_attention", None)
                layer.__dict__.pop("linear_focus_attention", None)

        return [pre, _Restore()]

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        rot = kwargs.get("rot_pos", args[4] if len(args) > 4 else None)
        self.cur = {"rotary": rot is not None, "mask": kwargs.get("mask", args[3] if len(args) > 3 else None)}
        return None

    def _record(self, qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, out: Any, args: tuple, kwargs: dict) -> None:
        layer = self.layer
        k = _manifold_k(layer, "c", "k")
        tau, sign = _scale(layer, self.name)
        dtype = dtype_name(qs)
        seen = out[0] if isinstance(out, tuple) else out
        dt = torch.float64 if qs.dtype == torch.float64 else torch.float32
        q, kk, v = (_lift(copy_tensor(t).permute(0, 2, 1, 3).double(), k).to(dt) for t in (qs, ks, vs))
        note = None
        if getattr(layer, "trans_heads_concat", False):
            note = "trans_heads_concat mixes the heads by a learned linear map after the centroid"
        elif self.cur.get("mask") is not None or kwargs.get("mask") is not None or (len(args) > 1 and args[1] is not None):
            note = "an attention mask was passed (the record holds the unmasked points)"
        elif getattr(layer, "normalize", False):
            note = "normalize=True rescales the queries and keys inside full_attention"
        seen_t = copy_tensor(seen).double() if isinstance(seen, torch.Tensor) else None
        if seen_t is not None and seen_t.dim() == 2:
            seen_t = seen_t.unsqueeze(0)
        self._emit(q, kk, v, seen_t, dtype=dtype, note=note, k=k, mode="helm" if self.cur.get("rotary") else "hypercore",
                   kind="distance", temperature=tau / 2.0, scale_sign=sign, temperature_source="attributes",
                   aggregation="centroid_mean_heads")


    def _record_linear(self, qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor) -> None:
        # HyperCore's linear_focus_attention takes the features [..., 1:] of (B, N, H, D - 1) as the spatial parts
        layer = self.layer
        k = _manifold_k(layer, "c", "k")
        dt = torch.float64 if qs.dtype == torch.float64 else torch.float32
        q, kk, v = (_lift(copy_tensor(t)[..., 1:].permute(0, 2, 1, 3).double(), k).to(dt) for t in (qs, ks, vs))
        self._emit(q, kk, v, None, dtype=dtype_name(qs), k=k, mode="hypercore", kind="focused",
                   power=float(getattr(layer, "power_k", 2.0)), norm_scale=_num(getattr(layer, "norm_scale", 1.0)) or 1.0,
                   note="HyperCore's linear_focus_attention (its mean over axis 1 of (B, N, H, D) and v_map_mlp) "
                        "is not rebuilt by hypviz")


class HyboNetReader(_Reader):
    """HyboNet's ``LorentzMultiHeadedAttention`` (see the module docstring)."""

    family = "hybonet"
    structure = "linear_query, linear_key and linear_value, head_count, dim_per_head, scale and bias, as HyboNet's LorentzMultiHeadedAttention"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return all(isinstance(getattr(m, a, None), nn.Module) for a in ("linear_query", "linear_key", "linear_value")) \
            and hasattr(m, "head_count") and hasattr(m, "scale") and hasattr(m, "manifold")

    def register(self) -> list[Any]:
        L = self.layer
        return [L.register_forward_pre_hook(self._pre, with_kwargs=True), L.register_forward_hook(self._post),
                L.linear_query.register_forward_hook(self._hook_role("queries")),
                L.linear_key.register_forward_hook(self._hook_role("keys")),
                L.linear_value.register_forward_hook(self._hook_role("values"))]

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.cur = {"mask": kwargs.get("mask", args[3] if len(args) > 3 else None)}
        return None

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        cur, self.cur = self.cur, {}
        if not all(r in cur for r in ("queries", "keys", "values")) or not isinstance(output, torch.Tensor):
            self.cap.fail(f"layer {self.name!r}: linear_query, linear_key and linear_value did not all run in its forward")
            return None
        h = int(self.layer.head_count)
        k = _manifold_k(self.layer, "k", "c")
        try:
            tau, sign = _scale(self.layer, self.name)
        except ValueError as exc:
            self.cap.fail(str(exc))
            return None
        q, kk, v = (_heads(copy_tensor(cur[r]), h) for r in ("queries", "keys", "values"))
        seen = _heads(copy_tensor(output), h)
        note = "an attention mask was passed" if cur.get("mask") is not None else None
        self._emit(q, kk, v, seen, dtype=dtype_name(output), note=note, k=k, mode="hybonet", kind="distance",
                   temperature=tau / 2.0, scale_sign=sign, temperature_source="attributes", aggregation="midpoint_heads")
        return None


class LorentzGateReader(_Reader):
    """The Lorentz GCN sigmoid gate (HyboNet's and LResNet's ``LorentzAgg``, see the module docstring)."""

    family = "lorentz_gcn"
    structure = "query_linear and key_linear, use_att and local_agg, scale and bias, forward(x, adj), as HyboNet's LorentzAgg"

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        return (isinstance(getattr(m, "query_linear", None), nn.Module) and isinstance(getattr(m, "key_linear", None), nn.Module)
                and bool(getattr(m, "use_att", False)) and bool(getattr(m, "local_agg", True))
                and hasattr(m, "scale") and hasattr(m, "bias"))

    def register(self) -> list[Any]:
        L = self.layer
        return [L.register_forward_pre_hook(self._pre, with_kwargs=True), L.register_forward_hook(self._post),
                L.query_linear.register_forward_hook(self._hook_role("queries")),
                L.key_linear.register_forward_hook(self._hook_role("keys"))]

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = kwargs.get("x", args[0] if args else None)
        adj = kwargs.get("adj", args[1] if len(args) > 1 else None)
        if isinstance(adj, torch.Tensor) and adj.layout != torch.strided:
            adj = adj.to_dense()
        self.cur = {"values": x, "adjacency": adj}
        return None

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        cur, self.cur = self.cur, {}
        if "queries" not in cur or "keys" not in cur or not isinstance(cur.get("values"), torch.Tensor):
            self.cap.fail(f"layer {self.name!r}: query_linear and key_linear did not both run in its forward")
            return None
        k = _manifold_k(self.layer, "k", "c")
        try:
            tau, sign = _scale(self.layer, self.name)
        except ValueError as exc:
            self.cap.fail(str(exc))
            return None
        scale = sign * tau
        bias = _num(self.layer.bias)
        q, kk, v = (copy_tensor(cur[r]).reshape(1, 1, -1, cur[r].shape[-1]) for r in ("queries", "keys", "values"))
        adj = cur.get("adjacency")
        adj = None if adj is None else copy_tensor(adj).double()
        seen = copy_tensor(output).reshape(1, -1, output.shape[-1]) if isinstance(output, torch.Tensor) else None
        # (2 + 2 <q, kappa>_L) / scale + bias = (-1/2 |q - kappa|^2_L) / (scale / 2) + bias + (2 - 2k) / scale
        self._emit(q, kk, v, seen, dtype=dtype_name(output), k=k, mode="lorentz_gcn", kind="sigmoid",
                   temperature=tau / 2.0, scale_sign=sign, bias=(bias or 0.0) + (2.0 - 2.0 * k) / scale,
                   temperature_source="attributes", aggregation="gate_midpoint",
                   aux=lambda b: {"adjacency": adj})
        return None


class PoincareReader(_Reader):
    """Poincare-ball multi-head attention in the HNN++ style (see the module docstring)."""

    family = "poincare"
    structure = ("query, key and value submodules, num_attention_heads and a manifold with c and "
                 "weighted_midpoint_bmm, as HNN++-style HyperbolicMultiHeadAttention")

    @classmethod
    def matches(cls, m: nn.Module) -> bool:
        man = getattr(m, "manifold", None)
        return (all(isinstance(getattr(m, a, None), nn.Module) for a in ("query", "key", "value"))
                and hasattr(m, "num_attention_heads") and callable(getattr(man, "weighted_midpoint_bmm", None)))

    def register(self) -> list[Any]:
        L = self.layer
        return [L.register_forward_pre_hook(self._pre, with_kwargs=True), L.register_forward_hook(self._post),
                L.query.register_forward_hook(self._hook_role("queries")),
                L.key.register_forward_hook(self._hook_role("keys")),
                L.value.register_forward_hook(self._hook_role("values"))]

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.cur = {"mask": kwargs.get("attention_mask", args[1] if len(args) > 1 else None),
                    "cross": kwargs.get("encoder_hidden_states", args[3] if len(args) > 3 else None)}
        return None

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        cur, self.cur = self.cur, {}
        out = output[0] if isinstance(output, tuple) else output
        if not all(r in cur for r in ("queries", "keys", "values")) or not isinstance(out, torch.Tensor):
            self.cap.fail(f"layer {self.name!r}: query, key and value did not all run in its forward")
            return None
        h = int(self.layer.num_attention_heads)
        c = _num(getattr(self.layer.manifold, "c", None)) or 1.0
        k = 1.0 / c
        s = _num(getattr(self.layer, "scale", None))
        tau, sign = (1.0, 1) if s is None else (abs(s), 1 if s > 0 else -1)
        try:
            q, kk, v = (from_poincare(_heads(copy_tensor(cur[r]), h).double(), k) for r in ("queries", "keys", "values"))
        except ValueError as exc:
            self.cap.fail(f"layer {self.name!r}: {exc}")
            return None
        if cur["queries"].dtype != torch.float64:
            q, kk, v = q.float(), kk.float(), v.float()
        seen = _heads(copy_tensor(out), h)
        note = "an attention mask was passed" if cur.get("mask") is not None else None
        self._emit(q, kk, v, seen, dtype=dtype_name(out), note=note, k=k, mode="poincare", kind="poincare",
                   temperature=tau, scale_sign=sign,
                   temperature_source="attributes" if s is not None else "default",
                   aggregation="gyromidpoint_heads")
        return None


#: The family readers, tried in order after the Hypformer reader (:func:`register` adds one).
READERS: list[type[_Reader]] = [HyperCoreReader, HyboNetReader, LorentzGateReader, PoincareReader]


def register(reader: type[_Reader]) -> type[_Reader]:
    """Add a reader class (a subclass of ``_Reader`` with ``matches``, ``register`` and ``structure``); returns it."""
    if not (isinstance(reader, type) and callable(getattr(reader, "matches", None)) and callable(getattr(reader, "register", None))):
        raise TypeError(f"reader must be a class with matches() and register(), got {reader!r}")
    if reader not in READERS:
        READERS.append(reader)
    return reader


def reader_for(m: nn.Module) -> type[_Reader] | None:
    """The first reader whose structure ``m`` has, else None."""
    for r in READERS:
        try:
            if r.matches(m):
                return r
        except Exception:  # a module whose attributes raise is simply not that family
            continue
    return None


_QK = (("Wq", "Wk"), ("q_proj", "k_proj"), ("query", "key"), ("linear_query", "linear_key"),
       ("query_linear", "key_linear"), ("to_q", "to_k"), ("W_q", "W_k"))


def unrecognised(named: dict[str, nn.Module], known: set[str]) -> list[str]:
    """Modules that look like attention (query and key submodules) but no reader recognised: one line each."""
    out = []
    for n, m in named.items():
        if n in known or any(n.startswith(p + ".") for p in known):
            continue
        has = next(((a, b) for a, b in _QK if isinstance(getattr(m, a, None), nn.Module)
                    and isinstance(getattr(m, b, None), nn.Module)), None)
        if has and any(w in type(m).__name__.lower() for w in ("attn", "attention", "conv", "agg")):
            out.append(
                f"module {n!r} ({type(m).__name__}) has {has[0]}/{has[1]} like an attention layer but no reader "
                f"recognised it; capture it with layers={{{n!r}: ({n + '.' + has[0]!r}, {n + '.' + has[1]!r})}}, k=... "
                "or add a reader with hypviz.capture.family_readers.register"
            )
    return out
