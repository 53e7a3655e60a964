r"""How one call of an attention layer becomes a :class:`hypviz.capture.records.LayerRecord`.

Two readers, used by :mod:`hypviz.capture`'s hooks: a Hypformer-style layer is recognised by its
structure (``Wq``/``Wk`` lists of per-head maps to hyperboloid points, ``attention_type``,
``manifold.k``; its temperature measured from the layer's own ``manifold.cinner``), any other
model's layer by the names of the modules whose outputs are its queries, keys and values.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import threading
import warnings
from typing import Any, Callable, Sequence, cast

import torch
from torch import nn

from hypviz.base import kinds as registry
from hypviz.capture.records import HYPFORMER_KIND, ROLES, LayerRecord, made_by
from hypviz.capture.verification import MEASURED_SPREAD, fit_temperature, tolerance, verify


class Recorder:
    """What a reader writes to (:class:`hypviz.capture.Capture` is one): ``raw``, the calls read, finished into
    records when the recording ends; ``errors``, the first of which is raised then; ``dropout``, the layers read
    in train mode with dropout active."""

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.errors: list[str] = []
        self.dropout: list[str] = []

    def fail(self, message: str) -> None:
        """Note an error of a reader (raised when the recording ends, never inside the model's forward)."""
        self.errors.append(message)


STRUCTURE = (
    "submodules with Wq and Wk (nn.ModuleList of per-head maps to (N, d + 1) hyperboloid points), "
    "attention_type ('linear_focused' or 'full') and manifold.k, as Hypformer's TransConvLayer"
)


def is_hypformer_layer(m: nn.Module) -> bool:
    wq, wk = getattr(m, "Wq", None), getattr(m, "Wk", None)
    return (
        isinstance(wq, nn.ModuleList)
        and isinstance(wk, nn.ModuleList)
        and len(wq) > 0
        and hasattr(m, "attention_type")
        and hasattr(m, "manifold")
    )


def closest(name: str, names: Sequence[str]) -> str:
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


_HALF = (torch.float16, torch.bfloat16)


def copy_tensor(t: torch.Tensor) -> torch.Tensor:
    """A detached CPU copy; half-precision tensors (float16, bfloat16) become float32."""
    t = t.detach()
    return t.to("cpu", torch.float32, copy=True) if t.dtype in _HALF else t.to("cpu", copy=True)


def dtype_name(t: Any) -> str | None:
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else None


def read_points(t: torch.Tensor, *, k: float, half: bool) -> torch.Tensor:
    r"""Recorded points; from a half-precision model the time coordinate is recomputed, :math:`\sqrt{|x_s|^2 + k}`,
    in float32 (rounding to 8 or 11 bits leaves the points off the hyperboloid by up to ~4e-3 relative)."""
    if not half:
        return t
    return torch.cat([torch.sqrt((t[..., 1:] ** 2).sum(dim=-1, keepdim=True) + k), t[..., 1:]], dim=-1)


def dropout_active(layer: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 and m.training for m in layer.modules()) or (
        layer.training and any(isinstance(getattr(layer, a, None), float) and 0 < getattr(layer, a) < 1
                               for a in ("dropout", "attn_dropout", "dropout_rate")))


def fits_temperature(kind: str) -> bool:
    r"""Whether a record of ``kind`` may have its temperature measured from the output (when its layer's attributes do
    not give it): a softmax or a gate whose map reads :math:`\tau` (the registry's entry)."""
    kd = registry.get(kind)
    return kd.temperature and kd.family in ("softmax", "gate")


#: The ``temperature_source`` s that say the layer's attributes (or the user) give :math:`\tau`: never replaced by a fit.
GIVEN = ("attributes", "given")


def verified(rec: LayerRecord, seen: Any, aux: dict[str, Any] | None, *, fit: bool = True) -> LayerRecord:
    """``rec`` (the one record of a layer call) with its verification fields: :func:`verified_call` of it alone."""
    return verified_call([(rec, seen, aux)], fit=fit)[0]


def verified_call(parts: Sequence[tuple[LayerRecord, Any, dict[str, Any] | None]], *, fit: bool = True) -> list[LayerRecord]:
    r"""The records of ONE layer call (one per batch element, ``(record, seen output, aux)``) with their verification.

    Each record's output is rebuilt at the temperature its record holds and compared with ``seen`` to the
    tolerance of the model's dtype (:func:`hypviz.capture.verification.tolerance`; a dtype it does not know is
    *not verified*).  Where the layer's attributes give :math:`\tau` (``temperature_source`` in :data:`GIVEN`) it is
    never replaced: a record not reproduced at it is *not verified*, its note naming the :math:`\tau` that does
    reproduce the call's outputs where one is measured (a fork whose logits differ from what its attributes say).
    Where they do not (``"default"``), a call not reproduced gets ONE :math:`\tau` for all its records from
    :func:`hypviz.capture.verification.fit_temperature`, recorded as ``"measured"`` only when the outputs fix it
    (error within the tolerance, ``spread <= MEASURED_SPREAD``); otherwise "not verified: the temperature could not
    be measured above the rounding of <dtype>".  The records verified keep what their check compared
    (``checked_output``, ``self_term``), to be digested when the recording ends.
    """
    first = parts[0][0]
    dtype = first.dtype if first.dtype is not None else str(first.queries.dtype).replace("torch.", "")
    try:
        tol = tolerance(dtype)
    except ValueError as exc:
        return [dataclasses.replace(r, verify_note=f"not verified: {exc}") for r, _, _ in parts]
    checks = [verify(r, s, a) for r, s, a in parts]
    out = [_judged(r, err, note, tol) for (r, _, _), (err, note) in zip(parts, checks)]
    ok = all(err is not None and err <= tol for err, _ in checks)
    if not (ok or not fit or not fits_temperature(first.kind) or first.temperature is None
            or first.head_temperatures is not None or any(err is None for err, _ in checks)):
        try:
            m = fit_temperature(parts, tol)
        except Exception:  # a fit that cannot run leaves the records as judged, never breaks the forward
            m = None
        if m is not None:
            out = _fitted(parts, out, m, tol, dtype)
    return [_with_check_inputs(r, s, a) for r, (_, s, a) in zip(out, parts)]


def _judged(rec: LayerRecord, err: float | None, note: str, tol: float) -> LayerRecord:
    if err is None:
        return dataclasses.replace(rec, verify_tolerance=tol, verify_note=note)
    if err <= tol:
        return dataclasses.replace(rec, verify_error=err, verify_tolerance=tol, verify_note=f"verified: {note}")
    err_s = "inf" if not math.isfinite(err) else f"{err:.2g}"
    what = rec.checked or "the layer's output"
    return dataclasses.replace(
        rec, verify_error=err if math.isfinite(err) else None, verify_tolerance=tol,
        verify_note=f"not verified: {what} rebuilt by {rec.aggregation} from the recorded map differs from the "
                    f"layer's by {err_s} (tolerance {tol:.2g}); the map recorded or that aggregation is not what the "
                    "layer computes")


def _fitted(parts: Sequence[tuple[LayerRecord, Any, Any]], out: list[LayerRecord], m: Any, tol: float,
            dtype: str) -> list[LayerRecord]:
    """The call's records after the fit ``m`` (:class:`hypviz.capture.verification.TemperatureFit`), see :func:`verified_call`."""
    first = parts[0][0]
    measured = m.error <= tol and m.spread <= MEASURED_SPREAD
    pm = f"+-{50.0 * m.spread:.2g} %"
    if first.temperature_source in GIVEN:
        if not measured:
            return out
        warnings.warn(
            f"layer {first.name!r}: its attributes give tau = {first.temperature:.4g}, which does not reproduce its "
            f"output, but tau = {m.temperature:.4g} ({pm}) does: recorded not verified, at the attributes' tau",
            stacklevel=4)
        # every record here is judged: its verify_note is set
        return [r if cast(str, r.verify_note).startswith("verified") else dataclasses.replace(
            r, verify_note=f"{r.verify_note}; its output is reproduced at tau = {m.temperature:.4g} ({pm}, measured), "
                           f"not at tau = {first.temperature:.4g} ({first.temperature_source})") for r in out]
    if m.error > tol:
        return out
    if not measured:
        note = (f"not verified: the temperature could not be measured above the rounding of {dtype}: every tau from "
                f"{m.low:.4g} to {m.high:.4g} reproduces the output to the tolerance {tol:.2g} (no attribute gives it)")
        return [dataclasses.replace(r, verify_error=None, verify_note=note) for r in out]
    done = []
    for r, s, a in parts:
        r = dataclasses.replace(r, temperature=m.temperature, temperature_source="measured")
        err, note = verify(r, s, a)
        r = _judged(r, err, note, tol)
        if cast(str, r.verify_note).startswith("verified"):  # judged: set
            r = dataclasses.replace(r, verify_note=f"verified at the measured tau = {m.temperature:.4g} ({pm}, one for "
                                                   f"the call; no attribute gives it): {note}")
        done.append(r)
    return done


def _with_check_inputs(rec: LayerRecord, seen: Any, aux: dict[str, Any] | None) -> LayerRecord:
    """``rec`` holding what its check needs (the output compared, the self term), so that a report re-checks it
    (:func:`hypviz.capture.verification.recheck`) once the recording has digested it."""
    if isinstance(seen, torch.Tensor) and rec.verify_note and rec.verify_note.startswith("verified"):
        st = (aux or {}).get("self_term")
        rec = dataclasses.replace(rec, checked_output=seen.detach().to("cpu", copy=True),
                                  self_term=st.detach().cpu() if isinstance(st, torch.Tensor) else None)
    return rec


class PerThread:
    """One layer call's state per calling thread: a model called from several threads at once (each thread's forward
    runs its hooks in that thread) records each call whole, never one call's heads mixed with another's.

    ``value`` is the calling thread's state (``default()`` when it has none); ``next_call()`` numbers calls
    across threads under a lock.
    """

    def __init__(self, default: Callable[[], Any]):
        self._state: dict[int, Any] = {}
        self._default = default
        self._lock = threading.Lock()
        self._calls = 0

    @property
    def value(self) -> Any:
        return self._state.get(threading.get_ident(), self._default())

    @value.setter
    def value(self, state: Any) -> None:
        self._state[threading.get_ident()] = state

    def states(self) -> list[Any]:
        """Every thread's current state (a snapshot)."""
        return list(self._state.values())

    @property
    def calls(self) -> int:
        return self._calls

    def next_call(self) -> int:
        """The next call's number (0, 1, ...), whichever thread asks."""
        with self._lock:
            call, self._calls = self._calls, self._calls + 1
            return call


class HypformerReader:
    """Hooks and per-call buffers of one Hypformer-style layer.

    Read: https://github.com/Graph-and-Geometric-Learning/hyperbolic-transformer/blob/768fcec/large/hypformer.py
    (and ``medium/hypformer.py``, ``Hypformer/hypformer.py``): per-head ``Wq``/``Wk``/``Wv`` lists,
    ``full_attention`` and ``linear_focus_attention``; with ``trans_heads_concat`` the heads enter
    ``final_linear``, whose input is what is checked.
    """

    # the family's module: its attributes (Wq, attention_type, ...) are its own, unknown to torch's types
    layer: Any

    def __init__(self, cap: Recorder, name: str, layer: nn.Module, *, k: float | None):
        self.cap, self.name, self.layer = cap, name, layer
        self.h = len(self.layer.Wq)
        if len(self.layer.Wk) != self.h:
            raise ValueError(
                f"layer {name!r}: Wq has {self.h} heads but Wk has {len(self.layer.Wk)}; "
                "expected one map per head in each"
            )
        if self.layer.attention_type not in HYPFORMER_KIND:
            raise ValueError(
                f"layer {name!r} has Hypformer's structure but attention_type {self.layer.attention_type!r}; capture knows "
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
        wv: Any = getattr(layer, "Wv", None)
        self.use_wv = isinstance(wv, nn.ModuleList) and bool(getattr(layer, "use_weight", True))
        if self.use_wv and len(wv) != self.h:
            raise ValueError(f"layer {name!r}: Wq has {self.h} heads but Wv has {len(wv)}; expected one map per head")
        self._per_thread = PerThread(lambda: None)
        self.source_index: tuple[str | None, int] | None = None

    @property
    def current(self) -> dict[str, Any] | None:
        """The calling thread's call in progress (None outside a call)."""
        return self._per_thread.value

    @current.setter
    def current(self, state: dict[str, Any] | None) -> None:
        self._per_thread.value = state

    @property
    def calls(self) -> int:
        return self._per_thread.calls

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
        fl = getattr(self.layer, "final_linear", None)
        if isinstance(fl, nn.Module):  # trans_heads_concat: the heads enter final_linear, recorded to be checked
            handles.append(fl.register_forward_pre_hook(self._concat_in))
        return handles

    def _concat_in(self, module: nn.Module, args: tuple) -> None:
        if self.current is not None and args and isinstance(args[0], torch.Tensor):
            self.current["concat_in"] = copy_tensor(args[0])
        return None

    def _head_hook(self, role: str, i: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.current is None:
                return None
            if not isinstance(output, torch.Tensor):
                self.cap.fail(
                    f"layer {self.name!r}: {role} head {i} returned a {type(output).__name__}; "
                    "expected a tensor of (N, d + 1) points"
                )
            else:
                self.current[role][i].append(copy_tensor(output))
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
                src = copy_tensor(s)
        self.current = {role: [[] for _ in range(self.h)] for role in ROLES}
        self.current["source"] = src
        return None

    def post(self, module: nn.Module, args: Any, output: Any) -> None:
        cur, self.current = self.current, None
        if cur is None:
            return None
        cur["output"] = copy_tensor(output) if isinstance(output, torch.Tensor) else None
        cur["dtype"] = dtype_name(output)
        cur["training"] = bool(module.training)
        cur["dropout"] = dropout_active(module)
        cur["self_term"] = None
        vmap = getattr(module, "v_map_mlp", None)
        if module.attention_type == "linear_focused" and callable(vmap) and cur["values"] and all(cur["values"]):
            try:  # the focused layer's self term v_map_mlp(V_s), with the layer's own module, per head
                p = next(module.parameters())
                with torch.no_grad():
                    vs = torch.stack([o[0] for o in cur["values"]])[..., 1:].to(p.device, p.dtype)
                    cur["self_term"] = copy_tensor(vmap(vs))
            except (StopIteration, RuntimeError, TypeError):
                cur["self_term"] = None
        elif module.attention_type == "linear_focused" and vmap is None and cur["values"] and all(cur["values"]):
            cur["self_term"] = torch.zeros(())  # a layer without v_map_mlp adds no self term
        call = self._per_thread.next_call()
        try:
            self.cap.raw.append(self._build(cur, call))
        except (TypeError, ValueError) as exc:
            self.cap.fail(str(exc))
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
        v: torch.Tensor | None
        if self.use_wv:
            v = self._stack(cur["values"], "values", call)
        else:
            src = cur["source"]
            ok = src is not None and src.dim() == 2 and src.shape[0] == kk.shape[1] and src.shape[-1] >= 2
            v = src.unsqueeze(0).expand(self.h, *src.shape).clone() if ok else None
        k_layer = _module_k(layer)
        kf = cast(float, self.k_given if k_layer is None else k_layer)  # __init__ refuses a layer with neither
        half = cur.get("dtype") in ("float16", "bfloat16")
        if half and kf is not None:
            q, kk = read_points(q, k=kf, half=True), read_points(kk, k=kf, half=True)
            v = None if v is None else read_points(v, k=kf, half=True)
        extra: dict[str, Any] = {}
        seen = cur.get("output")
        concat = bool(getattr(layer, "trans_heads_concat", False)) and cur.get("concat_in") is not None
        if mode == "linear_focused":
            extra = {"power": _param(layer, "power_k", lname), "norm_scale": _param(layer, "norm_scale", lname),
                     "aggregation": "focused_mean_lift" if cur.get("self_term") is not None else None}
            if concat and extra["aggregation"] is not None:
                cin = cur["concat_in"]  # (N, H * D): per head O_h + v_map_mlp(V_s,h), before final_linear
                seen = cin.reshape(cin.shape[0], self.h, -1).transpose(0, 1)
                extra.update(aggregation="focused_heads", detail="heads concatenated by final_linear",
                             checked="per-head outputs entering final_linear (the concatenating map)")
        else:
            scale = _param(layer, "scale", lname)
            if not math.isfinite(scale) or scale == 0:
                raise ValueError(f"layer {lname!r}: scale must be a non-zero finite number for the full softmax, got {scale:g}")
            # logits (2 + 2 c <q, kappa>_L) / scale + bias = (-1/2 |q - kappa|^2_L) / (scale / (2 c)) + const,
            # with c the layer's own cinner scaling: 1/k where cinner divides by k, 1 where it does not;
            # a negative scale flips the sign of the logits (recorded, with tau = |scale| / (2 c))
            extra = {"temperature": abs(scale) / (2.0 * _cinner_scaling(layer, q, kk, kf)),
                     "scale_sign": 1 if scale > 0 else -1, "temperature_source": "attributes",
                     "aggregation": "centroid_mean_heads"}
        rec = LayerRecord(name=lname, queries=q, keys=kk, values=v, k=kf, mode=mode, kind=HYPFORMER_KIND[mode],
                          call=call, dtype=cur.get("dtype"), training=cur.get("training"), **extra,
                          **made_by(type(self), HYPFORMER_KIND[mode]))
        if cur.get("dropout"):
            self.cap.dropout.append(lname)
        if seen is not None and seen.dim() == 3 and seen.shape[0] == 1 and rec.aggregation != "focused_heads":
            seen = seen[0]
        return verified(rec.check(), seen, {"self_term": cur.get("self_term")})


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


class GenericReader:
    """Buffers of one layer named with ``layers=``: a record is complete once each role has an output."""

    def __init__(self, cap: Recorder, name: str, modules: tuple[str, ...]):
        self.cap, self.name, self.modules = cap, name, modules
        self.roles = ROLES[: len(modules)]
        self._per_thread = PerThread(lambda: {r: [] for r in self.roles})  # each calling thread's outputs, in order
        self.dtypes: list[str | None] = []

    @property
    def calls(self) -> int:
        return self._per_thread.calls

    def push(self, role: str, module_name: str, output: Any) -> None:
        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            what = f"a {type(output).__name__}" if not isinstance(output, torch.Tensor) else f"a {output.dtype} tensor"
            self.cap.fail(
                f"layer {self.name!r}: {role} module {module_name!r} returned {what}; "
                "expected a floating-point tensor of points"
            )
            return
        queue = self._per_thread.value
        self._per_thread.value = queue
        queue[role].append(copy_tensor(output))
        if role == "queries":
            self.dtypes.append(dtype_name(output))
        if all(queue[r] for r in self.roles):
            outs = {r: queue[r].pop(0) for r in self.roles}
            self.cap.raw.append((self, self._per_thread.next_call(), outs))

    def leftovers(self) -> str | None:
        counts = {r: sum(len(q[r]) for q in self._per_thread.states()) for r in self.roles}
        if not any(counts.values()):
            return None
        ran = ", ".join(f"{r} module {m!r} {self.calls + counts[r]} times" for r, m in zip(self.roles, self.modules))
        return (
            f"layer {self.name!r}: its modules ran unequal numbers of times ({ran}); "
            "expected each once per call of the layer"
        )
