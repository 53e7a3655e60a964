r"""The registry of attention kinds: one entry a kind, read by every part of hypviz (no torch).

A kind is a way to turn queries and keys on the hyperboloid into an attention map.  Its
:class:`Kind` entry says everything the rest of the package needs to know about it: its family,
its map in one formula, the kernel that computes it (in :mod:`hypviz.attention.maps.kernels`), which other
kinds it can share one matrix product with, its key-norm bias coefficient (where the softmax-gap bound
applies), its rounding bound, its titles and its one-line description.  ``attention_map``,
``compare``, ``compare_maps``, the command's ``--kinds`` and ``--help``, the plots, the explorables,
the summaries and the capture readers all read from here.

The families:

``"softmax"``
    a row softmax of logits over a temperature :math:`\tau`, :math:`A_{ij} = \operatorname{softmax}_j(s_{ij}/\tau)`;
``"features"``
    a normalised product of positive features,
    :math:`A_{ij} = \phi(q_i)\cdot\psi(\kappa_j) / \sum_l \phi(q_i)\cdot\psi(\kappa_l)`;
``"gate"``
    an element-wise gate whose rows are not normalised (not compared row by row).

The softmax kinds of kernel ``"bilinear"`` have logits, up to a constant per row,

.. math::

    s_{ij} = -\tfrac12 \|q_i - \kappa_j\|_L^2 + c\, q_{t,i} \kappa_{t,j} \qquad (c = \texttt{bias}),

so two of them differ by the rank-one bias :math:`(c_a - c_b)\, q_t \kappa_t / \tau`: they share one
matrix product per block of rows, and the bound :math:`\mathrm{TV} \le \tanh(\Delta/4)` with
:math:`\Delta = |c_a - c_b|\, q_t (\max_j \kappa_t - \min_j \kappa_t) / \tau` holds between them
(notebook 04 derives it).  ``"spatial"`` is :math:`c = 1` (by identity 4, :math:`q_s \cdot \kappa_s
= -\frac12\|q - \kappa\|_L^2 + q_t \kappa_t - k`), ``"distance"`` and ``"lorentz"`` are :math:`c = 0`.

Adding a kind is one :func:`register` call (an entry here, for the built-in kinds) plus its tests;
a kind whose computation is new also registers its kernel (:func:`hypviz.attention.maps.kernels.register_kernel`).
A kind of another package registers at its module's import, named by an entry point of group ``hypviz.kinds`` or
by ``hypviz --plugin MODULE`` (:mod:`hypviz.base.plugins`): :func:`get` and :func:`check` load the entry points the
first time a name misses, and :func:`provider` names the module that registered a kind.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from hypviz.base import plugins
from hypviz.base.messages import short

__all__ = ["FAMILIES", "BUILT_IN", "Kind", "Names", "register", "unregister", "get", "names", "comparable", "softmax_names",
           "bound_applies", "check", "declare_kernel", "forget_kernel", "provider"]

#: The families of kinds (see the module's docstring).
FAMILIES: tuple[str, ...] = ("softmax", "features", "gate")

NAME_MAX = 64  # characters of a kind's name


@dataclass(frozen=True)
class Kind:
    r"""One attention kind.

    ``name``: how every function and the command name it; ``family``: one of :data:`FAMILIES`;
    ``kernel``: the name of the kernel computing it (:mod:`hypviz.attention.maps.kernels`); ``formula``: its
    map (or logits) in one LaTeX formula; ``title`` (matplotlib mathtext), ``plain`` (unicode, plotly
    titles) and ``html`` (plotly hover text): its titles; ``description``: one line for ``--help``
    and the summaries; ``rounding``: its rounding bound, in words; ``bias``: the key-norm bias
    coefficient :math:`c` of a ``"bilinear"`` softmax kind (``None``: the softmax-gap bound does not
    apply); ``constant``: :math:`o` in its raw scores :math:`-\frac12\|q - \kappa\|_L^2 + c\, q_t \kappa_t - o k`
    (``"bilinear"`` only; scores differ from logits by a row constant); ``options``: the parameters
    it reads besides ``k`` and ``temperature``; ``temperature``: whether :math:`\tau` enters its map;
    ``comparable``: whether :func:`hypviz.attention.compare` takes it (rows that sum to one).

    Every field is checked when the entry is made (a one-line ``ValueError`` naming the field: ``name`` a word,
    ``options`` a tuple of distinct words (names its kernel declares), ``bias`` and ``constant`` finite real numbers,
    the texts non-empty single lines, the flags bools); :func:`register` also requires every option to be one its
    kernel reads (:func:`declare_kernel`), and a kind computed by a built-in kind's kernel to have that kind's
    family, to declare the options that kernel reads and to take the temperature when that kernel divides by it.
    """

    name: str
    family: str
    kernel: str
    formula: str
    title: str
    plain: str
    html: str
    description: str
    rounding: str
    bias: float | None = None
    constant: float = 0.0
    options: tuple[str, ...] = ()
    temperature: bool = True
    comparable: bool = True

    def __post_init__(self) -> None:
        name = self.name
        if not (isinstance(name, str) and name.isascii() and name.isidentifier() and len(name) <= NAME_MAX):
            raise ValueError(f"Kind name must be a word of letters, digits and '_' (not starting with a digit, at most "
                             f"{NAME_MAX} characters), got {short(name)}")
        if not isinstance(self.family, str) or self.family not in FAMILIES:
            raise ValueError(f"Kind {name!r}: family must be one of {', '.join(FAMILIES)}, got {short(self.family)}")
        if not (isinstance(self.kernel, str) and self.kernel.isascii() and self.kernel.isidentifier()):
            raise ValueError(f"Kind {name!r}: kernel must be the name of a kernel (a word of letters, digits and '_'), "
                             f"got {short(self.kernel)}")
        for field in ("formula", "title", "plain", "html", "description", "rounding"):
            text = getattr(self, field)
            if not isinstance(text, str) or not text.strip() or any(c in text for c in "\r\n\x00"):
                raise ValueError(f"Kind {name!r}: {field} must be a non-empty one-line str, got {short(text)}")
        if self.bias is not None:
            object.__setattr__(self, "bias", _finite_real(self.bias, name, "bias", "a finite real number or None"))
        object.__setattr__(self, "constant", _finite_real(self.constant, name, "constant", "a finite real number"))
        opts = self.options
        if (not isinstance(opts, tuple) or not all(isinstance(o, str) and o.isascii() and o.isidentifier() for o in opts)
                or len(set(opts)) != len(opts)):
            raise ValueError(f"Kind {name!r}: options must be a tuple of distinct option names (words its kernel declares), "
                             f"got {short(opts)}")
        for field in ("temperature", "comparable"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"Kind {name!r}: {field} must be True or False, got {short(getattr(self, field))}")
        if self.bias is not None and (self.family != "softmax" or self.kernel != "bilinear"):
            raise ValueError(f"Kind {name!r}: only a 'bilinear' softmax kind has a key-norm bias, got family "
                             f"{self.family!r} with kernel {self.kernel!r}")
        if self.kernel == "bilinear" and self.bias is None:
            raise ValueError(f"Kind {name!r}: a 'bilinear' kind needs its key-norm bias coefficient, got None")
        if self.constant != 0.0 and self.kernel != "bilinear":
            raise ValueError(f"Kind {name!r}: only a 'bilinear' kind has a score constant, got constant "
                             f"{self.constant!r} with kernel {self.kernel!r}")
        if self.family == "softmax" and not self.temperature:
            raise ValueError(f"Kind {name!r}: a softmax kind divides its scores by the temperature, got temperature=False")
        if self.family == "gate" and self.comparable:
            raise ValueError(f"Kind {name!r}: a gate's rows are not normalised, so it cannot be comparable")


def _finite_real(value: object, name: str, field: str, expected: str) -> float:
    """``value`` as a float when it is a finite real number (never a bool, a str or a complex)."""
    try:
        v = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int beyond float's range
        v = math.inf
    if not math.isfinite(v):
        raise ValueError(f"Kind {name!r}: {field} must be {expected}, got {short(value)}")
    return v


_REGISTRY: dict[str, Kind] = {}
_BUILT_IN: set[str] = set()  # filled once the built-in kinds are registered (see BUILT_IN)
_PROVIDERS: dict[str, str] = {}  # kind -> the module that registered it (the plugin being loaded, else the caller)
_KERNEL_OPTIONS: dict[str, tuple[str, ...]] = {}  # the options each kernel reads (declare_kernel)


def declare_kernel(kernel: str, options: Sequence[str]) -> None:
    """Record the options the kernel named ``kernel`` reads, so that :func:`register` checks a kind's ``options``
    against them (:mod:`hypviz.attention.maps.kernels` declares each kernel it holds; the registry itself knows no kernel).
    A kind already registered that names ``kernel`` with an option outside ``options`` is refused here, naming it."""
    allowed = tuple(options)
    for kd in _REGISTRY.values():
        if kd.kernel == kernel:
            _check_options(kd, allowed)
    _KERNEL_OPTIONS[kernel] = allowed


def forget_kernel(kernel: str) -> None:
    """Drop what :func:`declare_kernel` recorded of ``kernel`` (a kernel removed at run time)."""
    _KERNEL_OPTIONS.pop(kernel, None)


def _check_options(kind: Kind, allowed: tuple[str, ...]) -> None:
    """Refuse a kind that reads an option its kernel does not read, in one line naming the kind, the option and the
    options allowed."""
    unknown = [o for o in kind.options if o not in allowed]
    if unknown:
        what = f"allowed: {', '.join(map(repr, allowed))}" if allowed else "it reads none besides k and temperature"
        raise ValueError(f"Kind {kind.name!r}: option {unknown[0]!r} is not one its kernel {kind.kernel!r} reads "
                         f"({what}), got options={short(kind.options)}")


def register(kind: Kind) -> Kind:
    """Add ``kind`` to the registry (a name already taken is refused); returns it."""
    if not isinstance(kind, Kind):
        raise TypeError(f"register takes a Kind, got {type(kind).__name__}")
    if kind.name in _REGISTRY:
        raise ValueError(f"an attention kind named {kind.name!r} is already registered")
    # a kind computed by a built-in kind's kernel is of that kind's family (a gate's rows are not normalised, a
    # softmax kernel's are) and reads what that kernel reads: the options of the built-in kinds of that kernel
    # (the kernels of hypviz.attention.maps.kernels read them by name)
    peers = [kd for kd in _REGISTRY.values() if kd.name in _BUILT_IN and kd.kernel == kind.kernel]
    if peers and kind.family != peers[0].family:
        raise ValueError(
            f"Kind {kind.name!r}: family must be {peers[0].family!r} (the family of the kernel {kind.kernel!r}, as of the "
            f"built-in kind {peers[0].name!r}), got {short(kind.family)}"
        )
    read = tuple(dict.fromkeys(o for kd in peers for o in kd.options))  # a built-in kernel reads its kinds' options
    allowed = _KERNEL_OPTIONS.get(kind.kernel, read if peers else None)
    if allowed is not None:  # a kernel not yet declared is checked when it is (declare_kernel)
        _check_options(kind, allowed)
    needed = [o for o in read if o not in kind.options]
    if needed:
        raise ValueError(
            f"Kind {kind.name!r}: options must include {', '.join(map(repr, needed))} (the kernel {kind.kernel!r} reads "
            f"them, as the built-in kind {peers[0].name!r} does), got {short(kind.options)}"
        )
    if peers and any(kd.temperature for kd in peers) and not kind.temperature:
        raise ValueError(
            f"Kind {kind.name!r}: temperature must be True (the kernel {kind.kernel!r} divides by the temperature, as the "
            f"built-in kind {next(kd for kd in peers if kd.temperature).name!r} does), got False"
        )
    _REGISTRY[kind.name] = kind
    _PROVIDERS[kind.name] = plugins.loading() or sys._getframe(1).f_globals.get("__name__", "")
    return kind


def provider(name: str) -> str | None:
    """The module that registered the kind ``name``: the plugin being loaded then, else the module that called
    :func:`register` (``"__main__"`` for a script); None for the kinds of hypviz itself.

    >>> provider("distance") is None
    True
    """
    module = _PROVIDERS.get(check(name))
    return None if not module or module == "hypviz" or module.startswith("hypviz.") else module


def unregister(name: str) -> None:
    """Remove a kind registered at run time (tests and experiments); the built-in kinds (:data:`BUILT_IN`) stay."""
    check(name)
    if name in BUILT_IN:
        raise ValueError(f"name must be a kind registered at run time (the built-in kinds {', '.join(map(repr, BUILT_IN))} "
                         f"cannot be removed), got {name!r}")
    del _REGISTRY[name]
    _PROVIDERS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered kind, in the order of registration."""
    return tuple(_REGISTRY)


def comparable() -> tuple[str, ...]:
    """The kinds :func:`hypviz.attention.compare` takes (their rows sum to one)."""
    return tuple(n for n, kd in _REGISTRY.items() if kd.comparable)


def softmax_names() -> tuple[str, ...]:
    """The kinds that are a row softmax of scores over a temperature."""
    return tuple(n for n, kd in _REGISTRY.items() if kd.family == "softmax")


class Names(Sequence[str]):
    """A live, read-only view of the registered kinds that satisfy ``keep`` (read from the registry at each use).

    Iterates, indexes, counts and prints as the tuple of those names now; a kind registered later is in it.
    """

    def __init__(self, keep: Callable[[Kind], bool], doc: str = ""):
        self._keep, self.__doc__ = keep, doc or self.__doc__

    def _now(self) -> tuple[str, ...]:
        return tuple(n for n, kd in _REGISTRY.items() if self._keep(kd))

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self._now()[i]

    def __len__(self) -> int:
        return len(self._now())

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __contains__(self, name: object) -> bool:
        return name in self._now()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, Names)) else other)

    def __hash__(self) -> int:
        return hash(self._now())

    def __repr__(self) -> str:
        return repr(self._now())


def check(name: object, what: str = "kind", allowed: tuple[str, ...] | None = None) -> str:
    """``name`` if it is a registered kind (of ``allowed``); else one-line ``ValueError`` naming the choices.

    A name not registered first loads the plugins' entry points (:func:`hypviz.base.plugins.load_entry_points`, once
    a process), then is looked up again; an ``allowed`` that was one of :func:`names`, :func:`comparable`,
    :func:`softmax_names` is read again after the load."""
    if isinstance(name, str) and name.isidentifier() and name not in _REGISTRY:  # a name a plugin could register
        given = None if allowed is None else set(allowed)
        view = next((v for v in (names, comparable, softmax_names) if given == set(v())), None)
        plugins.load_entry_points()
        allowed = allowed if view is None else view()
    allowed = names() if allowed is None else allowed
    if not isinstance(name, str) or name not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, allowed))}, got {name!r}")
    return name


def get(name: object, what: str = "kind") -> Kind:
    """The :class:`Kind` named ``name`` (checked)."""
    return _REGISTRY[check(name, what)]


def bound_applies(a: str, b: str) -> bool:
    """Whether the softmax-gap bound holds between two kinds: both have a key-norm bias coefficient."""
    return get(a).bias is not None and get(b).bias is not None


_PRODUCT = "gamma_c sum_c |A_ic| max_j |B_jc| on the logits A B^T (any summation order), gamma_c = (c + 3) eps"

# --------------------------------------------------------------------------- #
# the built-in kinds
# --------------------------------------------------------------------------- #
register(Kind(
    name="spatial", family="softmax", kernel="bilinear", bias=1.0, constant=1.0,
    formula=r"\mathrm{softmax}_j(q_s \cdot \kappa_{s,j} / \tau)",
    title=r"spatial: $\mathrm{softmax}_j(q_s\cdot \kappa_{s,j}/\tau)$",
    plain="spatial: softmax_j(q_s·κ_s,j / τ)",
    html="spatial softmax<sub>j</sub>(q<sub>s</sub>·κ<sub>s,j</sub> / τ)",
    description="softmax of the spatial dot products q_s . kappa_s / T (the thread's map)",
    rounding=_PRODUCT,
))
register(Kind(
    name="distance", family="softmax", kernel="bilinear", bias=0.0, constant=0.0,
    formula=r"\mathrm{softmax}_j(-\tfrac12\|q - \kappa_j\|_L^2 / \tau)",
    title=r"distance: $\mathrm{softmax}_j(-\frac{1}{2}\|q-\kappa_j\|_L^2/\tau)$",
    plain="distance: softmax_j(−½‖q − κ_j‖²_L / τ)",
    html="distance softmax<sub>j</sub>(−½‖q − κ<sub>j</sub>‖²<sub>L</sub> / τ)",
    description="softmax of -1/2 |q - kappa|^2_L / T (Hypformer's full attention)",
    rounding=_PRODUCT + ", on the d + 3 stable distance operands",
))
register(Kind(
    name="lorentz", family="softmax", kernel="bilinear", bias=0.0, constant=1.0,
    formula=r"\mathrm{softmax}_j(\langle q, \kappa_j\rangle_L / \tau)",
    title=r"Lorentz: $\mathrm{softmax}_j(\langle q,\kappa_j\rangle_L/\tau)$",
    plain="Lorentz: softmax_j(⟨q, κ_j⟩_L / τ)",
    html="Lorentz softmax<sub>j</sub>(⟨q, κ<sub>j</sub>⟩<sub>L</sub> / τ)",
    description="softmax of the Lorentzian inner product <q, kappa>_L / T (equal to distance's, identity 5)",
    rounding=_PRODUCT + ", on the distance operands (the same softmax, identity 5)",
))
register(Kind(
    name="focused", family="features", kernel="focused", options=("power", "norm_scale"), temperature=False,
    formula=r"\phi(q)\cdot\phi(\kappa_j) / \sum_l \phi(q)\cdot\phi(\kappa_l)",
    title=r"focused (Hypformer, linear): $\varphi(q)\cdot\varphi(\kappa_j)/\sum_l\varphi(q)\cdot\varphi(\kappa_l)$",
    plain="focused (Hypformer, linear): φ(q)·φ(κ_j) / Σ_l φ(q)·φ(κ_l)",
    html="focused φ(q)·φ(κ<sub>j</sub>) / Σ<sub>l</sub> φ(q)·φ(κ<sub>l</sub>)",
    description="Hypformer's focused linear attention phi(q) . phi(kappa), normalised (no softmax, no temperature)",
    rounding="gamma_c on the log of a product of positive terms (relative error gamma_c each)",
))
register(Kind(
    name="distance_rf", family="features", kernel="random_features", options=("features", "seed"),
    formula=r"\hat w_{ij} / \sum_l \hat w_{il}, \quad \hat w \approx e^{\langle q, \kappa_j\rangle_L / \tau}",
    title=(r"distance, random features (linear): $\hat w_{ij}/\sum_l \hat w_{il}$, "
           r"$\hat w \approx e^{\langle q,\kappa_j\rangle_L/\tau}$"),
    plain="distance, random features (linear): ŵ_ij / Σ_l ŵ_il, ŵ ≈ exp(⟨q, κ_j⟩_L / τ)",
    html="distance, random features ŵ<sub>ij</sub> / Σ<sub>l</sub> ŵ<sub>il</sub>, ŵ ≈ exp(⟨q, κ<sub>j</sub>⟩<sub>L</sub> / τ)",
    description="the distance map estimated in linear time by positive random features",
    rounding="gamma_c on rows of positive terms; gamma_c sum_c |A_ic| max_j |B_jc| over the row's mean weight "
             "on rows with the control variate",
))
register(Kind(
    name="distance_topk", family="features", kernel="topk_tail", options=("seed",),
    formula=(r"\hat w_{ij} / \sum_l \hat w_{il}, \quad "
             r"\hat w_{ij} = e^{s_{ij}} \ (j \in T_i), \ e^{t_i} p_i(s_{ij} - t_i) \ (j \notin T_i)"),
    title=(r"distance, top keys + tail: $\hat w_{ij}/\sum_l \hat w_{il}$, exact $e^{s_{ij}}$ on the top keys $\kappa_j$, "
           r"$e^{t_i}p_i(s_{ij}-t_i)$ below"),
    plain="distance, top keys + tail: ŵ_ij / Σ_l ŵ_il, exact on each row's top keys κ_j, a positive quadratic in the logit below",
    html=("distance, top keys + tail ŵ<sub>ij</sub> / Σ<sub>l</sub> ŵ<sub>il</sub>, exact on the top keys, "
          "e<sup>t</sup> p(s − t) below"),
    description="the distance map from each query's exact top keys and a fitted positive quadratic tail (sub-quadratic)",
    rounding="gamma_c sum_c |A_ic| max_j |B_jc| on the logits, times 1 + sup |p'/p| of the row's tail polynomial, "
             "plus the rounding of s - t and of the log",
))
register(Kind(
    name="sigmoid", family="gate", kernel="gate", options=("bias",), comparable=False,
    formula=r"\sigma(-\tfrac12\|q - \kappa_j\|_L^2 / \tau + b)",
    title=r"sigmoid gate (Lorentz GCN): $\sigma(-\frac{1}{2}\|q-\kappa_j\|_L^2/\tau+b)$",
    plain="sigmoid gate (Lorentz GCN): σ(−½‖q − κ_j‖²_L / τ + b)",
    html="sigmoid gate σ(−½‖q − κ<sub>j</sub>‖²<sub>L</sub> / τ + b)",
    description="the Lorentz GCN's gate sigma(-1/2 |q - kappa|^2_L / T + b) (rows not normalised)",
    rounding="not used (a gate is not compared row by row)",
))
register(Kind(
    name="poincare", family="softmax", kernel="geodesic", comparable=False,
    formula=r"\mathrm{softmax}_j(-d(q, \kappa_j) / \tau)",
    title=r"Poincaré distance: $\mathrm{softmax}_j(-d(q,\kappa_j)/\tau)$",
    plain="Poincaré distance: softmax_j(−d(q, κ_j) / τ)",
    html="Poincaré distance softmax<sub>j</sub>(−d(q, κ<sub>j</sub>) / τ)",
    description="softmax of the hyperbolic distance itself, -d(q, kappa) / T (HNN++-style attention; d not squared)",
    rounding="not used (not compared by compare())",
))

#: The kinds defined here, which :func:`unregister` refuses to remove (every part of hypviz relies on them).
BUILT_IN: tuple[str, ...] = tuple(_REGISTRY)
_BUILT_IN.update(BUILT_IN)
