r"""The forward hooks of :func:`attention` and the :class:`Capture` they fill (the package's face is :mod:`hypviz.capture`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence, cast

import torch
from torch import nn

from hypviz.base import kinds as registry
from hypviz.base import plugins
from hypviz.capture.family_readers import READERS, reader_for, unrecognised
from hypviz.capture.readers import (
    STRUCTURE,
    GenericReader,
    HypformerReader,
    Recorder,
    closest,
    dropout_active,
    is_hypformer_layer,
    read_points,
)
from hypviz.capture.records import MODELS, LayerRecord, made_by, opt_float, recorded_options, save
from hypviz.capture.verification import seal
from hypviz.lorentz import check_k, check_points, from_poincare

__all__ = ["Capture", "attention"]


# --------------------------------------------------------------------------- #
# the context manager
# --------------------------------------------------------------------------- #
def _reader_of(m: nn.Module) -> Any:
    """The reader of ``m``: a reader registered with ``first=True``, else ``"hypformer"`` for a Hypformer-style layer,
    else the first family reader that matches, else None."""
    return reader_for(m, first_only=True) or ("hypformer" if is_hypformer_layer(m) else reader_for(m))


def _display(name: str) -> str:
    """A module's name without torch.compile's ``_orig_mod.`` wrapper."""
    return name.replace("_orig_mod.", "").replace("_orig_mod", "") or name


class Capture(Recorder):
    """A recording of attention layers: use it as a context manager (see :func:`attention`, which builds it).

    ``layers`` is filled when the ``with`` block exits without an exception: one
    :class:`LayerRecord` per call of each layer, in the order the layers ran, all points checked.
    A ``Capture`` records once; iterating over it, or ``len()``, reads ``layers``.

    Examples
    --------
    >>> import torch
    >>> from hypviz import capture, toymodel
    >>> model = toymodel.ToyHypformer(8, 4, 2, heads=2, k=1.0, attention_type="linear_focused", layers=2)
    >>> with capture.attention(model) as cap:
    ...     _ = model(torch.linspace(-1.0, 1.0, 240, dtype=torch.float64).reshape(30, 8))
    >>> cap, len(cap)
    (Capture(2 records of 2 layers: 'blocks.0', 'blocks.1'), 2)
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
        plugins.load_entry_points()  # the readers and kinds of installed plugins (once a process)
        if model not in MODELS:
            raise ValueError(
                "model must be 'lorentz' (hyperboloid points, time first) or 'poincare' (ball points), "
                f"got {model!r}"
            )
        registry.check(kind, "kind", registry.comparable())
        if heads_axis is not None and (isinstance(heads_axis, bool) or not isinstance(heads_axis, int)):
            raise ValueError(f"heads_axis must be an integer axis or None (leading axes are heads), got {heads_axis!r}")
        self.module = module
        self.k = None if k is None else check_k(k)
        self.model = model
        self.heads_axis = heads_axis
        self.kind = kind
        self.temperature = opt_float(temperature, "temperature", positive=True)
        self.power = opt_float(power, "power (the focused map's power_k)", positive=True, none_ok=False)
        self.norm_scale = opt_float(norm_scale, "norm_scale (the focused map's norm_scale)", none_ok=False)
        self.layers: list[LayerRecord] = []
        Recorder.__init__(self)
        self._handles: list[Any] = []
        self._used = False
        self._names = [n for n, _ in module.named_modules()]
        self._by_name = dict(module.named_modules())
        self._generic: list[GenericReader] = []
        self._hyp: list[Any] = []
        self._auto_only: list[str] | None = None
        self._stance: Any = None
        self._known: set[str] | None = None  # the modules read by structure (None: layers= names the modules)

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
                self._generic.append(GenericReader(self, str(lname), self._check_roles(lname, mods)))
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
                        raise ValueError(f"layers: no module named {n!r} in the model; {closest(n, self._names)}")
                    if _reader_of(self._by_name[n]) is None:
                        raise ValueError(
                            f"layers: module {n!r} ({type(self._by_name[n]).__name__}) is not a Hypformer-style "
                            f"layer (looked for {STRUCTURE}); "
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
                raise ValueError(f"layers[{lname!r}]: no module named {m!r} in the model; {closest(m, self._names)}")
        return mods

    # ---- hooks ----
    def __enter__(self) -> Capture:
        if self._used:
            raise ValueError("this Capture has already recorded; start a new one with capture.attention(model)")
        self._used = True
        try:
            if self._generic:
                listeners: dict[str, list[tuple[GenericReader, str]]] = {}
                for g in self._generic:
                    for role, m in zip(g.roles, g.modules):
                        listeners.setdefault(m, []).append((g, role))
                for m, targets in listeners.items():
                    self._handles.append(self._by_name[m].register_forward_hook(self._generic_hook(m, targets)))
            else:
                # each module looked at once (a model of 10^4 layers costs 10^4 lookups)
                found = {n: _reader_of(m) for n, m in ((n, self._by_name[n]) for n in (self._auto_only or self._by_name))}
                names = [n for n, r in found.items() if r is not None]
                self._known = set(names)
                for n in names:
                    m, r = self._by_name[n], found[n]
                    if r == "hypformer":
                        self._hyp.append(HypformerReader(self, _display(n), m, k=self.k))
                    else:
                        self._hyp.append(r(self, _display(n), m))
                for h in self._hyp:
                    self._handles.extend(h.register())
            if any(hasattr(m, "_orig_mod") for m in self.module.modules()):  # torch.compile'd: run it eagerly
                set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
                if set_stance is None:
                    raise ValueError(
                        "capture.attention: the model is torch.compile'd and this torch has no "
                        "torch.compiler.set_stance to run it eagerly; capture the eager module instead: "
                        "with capture.attention(model._orig_mod) as cap: model._orig_mod(x)"
                    )
                self._stance = set_stance("force_eager")
                self._stance.__enter__()
        except BaseException:
            self._remove()
            raise
        return self

    def _generic_hook(self, module_name: str, targets: list[tuple[GenericReader, str]]) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            for g, role in targets:
                g.push(role, module_name, output)
            return None

        return hook

    def _remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        if self._stance is not None:
            stance, self._stance = self._stance, None
            stance.__exit__(None, None, None)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        self._remove()
        if exc_type is not None:
            return False  # the body's exception propagates unchanged
        if not self._generic and not self._hyp:
            hints = unrecognised(self._by_name, set())
            if hints:
                raise ValueError(f"capture.attention: {hints[0]}")
            raise ValueError(
                f"capture.attention: no attention layer recognised in the {type(self.module).__name__} "
                f"(looked for {STRUCTURE}, or {'; or '.join(r.structure for r in READERS)}); for other models "
                "name the modules: capture.attention(model, layers={'enc.0': ('enc.0.q', 'enc.0.k')}, k=1.0)"
            )
        if self.errors:
            raise ValueError(self.errors[0])
        for g in self._generic:
            msg = g.leftovers()
            if msg:
                raise ValueError(msg)
        self.layers = [self._finish(raw) for raw in self.raw]
        self.raw = []
        if not self.layers:
            ran = ", ".join(repr(h.name) for h in (self._hyp or self._generic)[:3])
            raise ValueError(
                f"capture.attention: recognised {ran} but none of them ran inside the with block "
                "(nothing recorded); call the model inside it, e.g. with capture.attention(model) as cap: model(x)"
            )
        if self._known is not None and self._auto_only is None:  # read by structure: say what was left out
            import warnings

            for hint in unrecognised(self._by_name, self._known)[:3]:
                warnings.warn(f"capture.attention: not recorded: {hint}", stacklevel=2)
        if any(r.training for r in self.layers) and dropout_active(self.module):
            self.dropout.append(type(self.module).__name__)
        if self.dropout:
            import warnings

            warnings.warn(
                f"capture.attention: {', '.join(sorted(set(self.dropout))[:3])} recorded in train mode with dropout "
                "active: the maps differ from eval mode; call model.eval() before capturing",
                stacklevel=2,
            )
        return False

    # ---- records ----
    def _finish(self, raw: Any) -> LayerRecord:
        if isinstance(raw, LayerRecord):  # read by structure: its verified check digested
            return seal(raw.check())
        g, call, outs = raw
        k = cast(float, self.k)  # named modules (layers=): k was required
        where = f"layer {g.name!r} (call {call})"
        pts = {role: self._heads_first(outs[role], f"{where} {role} (module {m!r})")
               for role, m in zip(g.roles, g.modules)}
        q, kk, v = pts["queries"], pts["keys"], pts.get("values")
        if kk.shape[0] != q.shape[0] and 1 in (q.shape[0], kk.shape[0]):  # one shared head broadcasts
            h = max(q.shape[0], kk.shape[0])
            q, kk = q.expand(h, *q.shape[1:]).clone(), kk.expand(h, *kk.shape[1:]).clone()
        if v is not None and v.shape[0] == 1 and kk.shape[0] > 1:
            v = v.expand(kk.shape[0], *v.shape[1:]).clone()
        dtype = g.dtypes.pop(0) if g.dtypes else None
        if dtype in ("float16", "bfloat16") and self.model == "lorentz":  # time recomputed from the rounded spatial part
            q, kk = read_points(q, k=k, half=True), read_points(kk, k=k, half=True)
            v = None if v is None else read_points(v, k=k, half=True)
        extra: dict[str, Any] = {}
        kd = registry.get(self.kind)
        if not kd.temperature:
            extra = {o: getattr(self, o) for o in recorded_options(kd.name)}
        else:
            extra = {"temperature": self.temperature if self.temperature is not None else math.sqrt(q.shape[-1] - 1),
                     "temperature_source": "given" if self.temperature is not None else "default"}
        try:
            rec = LayerRecord(name=g.name, queries=q, keys=kk, values=v, k=k, mode="generic", kind=self.kind,
                              call=call, dtype=dtype,
                              verify_note="not verified: layers= names the projections only, so the layer's output "
                                          "and aggregation are unknown to hypviz", **extra, **made_by(type(g), self.kind))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        try:
            for role, m in zip(g.roles, g.modules):
                check_points(getattr(rec, role), k=rec.k, name=f"{where} {role} (module {m!r})")
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
                t = from_poincare(t, k=cast(float, self.k))  # named modules (layers=): k was required
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

    Examples
    --------
    >>> import torch
    >>> from hypviz import capture, toymodel
    >>> model = toymodel.ToyHypformer(8, 4, 2, heads=2, k=1.0, attention_type="full")
    >>> with capture.attention(model) as cap:       # hooks removed on exit
    ...     _ = model(torch.linspace(-1.0, 1.0, 240, dtype=torch.float64).reshape(30, 8))
    >>> [(rec.name, rec.kind, tuple(rec.queries.shape)) for rec in cap.layers]     # (H, N, d + 1)
    [('blocks.0', 'distance', (2, 30, 5))]
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
