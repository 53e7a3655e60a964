r"""The logit kernels: for each kind of :mod:`hypviz.base.kinds`, the operands, the finishing, the rounding bound and
the dense map.

Every comparable kind's log-weights are ONE matrix product of operands, then a finishing step in place:

.. math::

    \log w_{ij} = f(A_i \cdot B_j) \quad (\text{up to a constant per row}), \qquad
    A_{ij} = \frac{w_{ij}}{\sum_l w_{il}},

with :math:`f(x) = x` (softmax kinds; the distance clamped at 0) or :math:`\log` (feature kinds).
:class:`Operands` holds one map's ``A``, ``B`` and the per-row rounding bound of its log-weights;
:class:`SharedLogits` holds two ``"bilinear"`` kinds from one product (the second a rank-one update of
the first).  The kernels (:data:`KERNELS`, by the name a :class:`hypviz.base.kinds.Kind` gives) build
them and compute the dense maps of :func:`hypviz.attention.attention_map`.  Everything here is
unchecked: the public functions check their arguments once (:mod:`hypviz.attention.maps.checks`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, NamedTuple, cast

import torch

from hypviz.attention.maps.checks import check_norm_scale, check_power
from hypviz.base import kinds, plugins, validate
from hypviz.base.kinds import Kind
from hypviz.base.messages import short
from hypviz.lorentz import distance_operands

__all__ = ["FEATURE_EPS", "Option", "Operands", "DenseRows", "SharedLogits", "Kernel", "KERNELS", "register_kernel",
           "unregister_kernel", "kernel_for", "score_kinds", "operands", "option_names", "unknown_options", "dense_map",
           "raw_scores", "distance_logits", "check_logit_range", "softmax_rows_", "logit_error", "rows_for", "feature_map",
           "norm_scale_eps", "options", "log_rounding", "logit_rounding", "as_is_", "clamp_nonpositive_", "log_"]

FEATURE_EPS = 1e-6  # Hypformer's offsets in phi: (relu(x) + 1e-6) / (|norm_scale| + 1e-6)


def softmax_rows_(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a contiguous tensor, in place: no new ``N x M`` allocation.

    On the CPU this is torch's fused last-dimension softmax kernel (max, exp and sum while the row
    is in cache, one parallel loop) writing over its input, which that kernel supports (it reads a
    row's maximum before writing and then works element by element).  Elsewhere, or should a
    future torch refuse the aliasing, the max-shifted formula runs as in-place passes.
    """
    if x.device.type == "cpu" and x.is_contiguous():
        try:
            return cast(torch.Tensor, torch.ops.aten._softmax.out(x, -1, False, out=x))  # torch.ops is untyped
        except RuntimeError:  # pragma: no cover - depends on the torch build
            pass
    x.sub_(x.amax(dim=-1, keepdim=True)).exp_()
    return x.div_(x.sum(dim=-1, keepdim=True))



def rows_for(nbytes: int, m: int, itemsize: int) -> int:
    return max(1, nbytes // max(1, m * itemsize))


def logit_error(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row rounding bound of ``A @ B^T``: ``gamma_c * sum_c |A_ic| max_j |B_jc|`` (any summation order)."""
    c = a.shape[-1]
    gamma = (c + 3) * torch.finfo(a.dtype).eps
    col_max = torch.maximum(b.amax(dim=-2, keepdim=True), -b.amin(dim=-2, keepdim=True))  # (..., 1, c), no copy of b
    return gamma * (a.abs() * col_max).sum(dim=-1)



def logit_rounding(a: torch.Tensor, b: torch.Tensor, err: torch.Tensor | None = None) -> torch.Tensor:
    r"""Per row, the rounding level of the computed ``A @ B^T``: what rounding actually does, not its worst case.

    .. math::

        \delta_i = \min\Bigl(\mathrm{err}_i,\; \bigl(\sqrt{c + 3} + 2\bigr)\, \varepsilon\, \|A_i\|_2 \max_j \|B_j\|_2\Bigr):

    rounding errors of a sum of :math:`c` products behave like a random walk (Higham and Mary's
    probabilistic analysis): the largest error of float32 products of :math:`c = 4 \dots 256` Gaussian or
    nearly parallel terms, over :math:`3 \cdot 10^5` logits each, is at most :math:`0.7 \sqrt c\,
    \varepsilon \|A_i\|_2 \|B_j\|_2`, so this level has a margin of about 2 over what rounding does;
    each term is at most :math:`\|A_i\|_2 \|B_j\|_2` (Cauchy-Schwarz), plus the rounding of the logit
    itself; never above the
    worst-case bound ``err`` (:func:`logit_error`, the default).  This decides *identical*; the worst case
    bounds ties and the softmax bound's allowance.
    """
    c = a.shape[-1]
    worst = logit_error(a, b) if err is None else err
    b_max = torch.linalg.vector_norm(b, dim=-1).amax(dim=-1, keepdim=True) if b.shape[-2] else 0.0
    size = torch.linalg.vector_norm(a, dim=-1) * b_max
    return torch.minimum(worst, (math.sqrt(c + 3) + 2.0) * torch.finfo(a.dtype).eps * size)


def feature_map(xs: torch.Tensor, power: float) -> torch.Tensor:
    """``fp(relu(x) + 1e-6, p)`` with ``fp(y, p) = |y| y^p / |y^p|``: Hypformer's ``phi`` times ``|norm_scale| + 1e-6``.

    Hypformer's ``phi(x) = fp((relu(x) + 1e-6) / (|norm_scale| + 1e-6), p)``; ``fp`` is positively
    homogeneous (``fp(c y) = c fp(y)``), so ``phi = c fp(relu(x) + 1e-6)`` with
    ``c = 1 / (|norm_scale| + 1e-6)``, and ``c`` is applied by the callers where it does not cancel
    (:func:`norm_scale_eps`): no ``norm_scale`` can make the features overflow or underflow.
    ``fp`` is evaluated as ``|y| z / |z|`` with ``z = (y / max(y))^p``: the same value, but ``y^p``
    can no longer overflow or underflow either.
    """
    y = torch.relu(xs) + FEATURE_EPS
    if power == 1.0:
        return y
    z = y / y.amax(dim=-1, keepdim=True)
    if torch.is_grad_enabled() and z.requires_grad:  # out of place, so autograd can follow
        z = z.pow(power)
        # torch.linalg's functions are typed as returning Any
        scale: torch.Tensor = (torch.linalg.vector_norm(y, dim=-1, keepdim=True)
                               / torch.linalg.vector_norm(z, dim=-1, keepdim=True))
        return z * scale
    z.pow_(power)  # in place: no second (N, d) buffer
    ratio = torch.linalg.vector_norm(y, dim=-1, keepdim=True) / torch.linalg.vector_norm(z, dim=-1, keepdim=True)
    return z.mul_(ratio)


def norm_scale_eps(eps: float, norm_scale: float) -> float:
    """``eps / c^2 = eps (|norm_scale| + 1e-6)^2``: the normaliser's ``eps`` on the scale of ``fp`` features.

    ``phi(q) . phi(kappa) = c^2 fp(q) . fp(kappa)``, so ``c^2 a / (c^2 sum a + eps) = a / (sum a + eps / c^2)``;
    an overflow to ``inf`` gives the correct limit 0.
    """
    if eps == 0.0:
        return 0.0
    scale = abs(norm_scale) + FEATURE_EPS
    return eps * scale * scale if scale < 1e150 else math.inf




class Option(NamedTuple):
    """One parameter a kernel reads besides ``k`` and ``temperature``: how it is checked and its default.

    ``check(value, name)`` returns the checked value or raises a one-line error naming ``name``;
    ``recorded``: whether a capture record holds it (:mod:`hypviz.capture.records`): ``True`` a record of
    a kind that reads it must give it, ``False`` it may (``None`` reads as ``default``), ``None`` it holds no such field.

    Examples
    --------
    >>> Option(lambda v, name: float(v), 0.0).check("2", "bias")
    2.0
    """

    check: Callable[[Any, str], Any]
    default: Any
    recorded: bool | None = None


def options(kind: Kind, values: Mapping[str, Any] | None = None, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The checked parameters ``kind`` reads (its :attr:`~hypviz.base.kinds.Kind.options`), by name, checked by its kernel.

    ``values`` holds the given ones (the others take the kernel's default); ``names`` renames an option in
    a message (``{"seed": "rf_seed"}``).  A kind that reads an option its kernel does not declare is refused.
    """
    kernel, values, names = kernel_for(kind), values or {}, names or {}
    declared = kernel.options
    unknown = [o for o in kind.options if o not in declared]
    if unknown:
        raise ValueError(f"kind {kind.name!r} reads {', '.join(map(repr, unknown))}, which its kernel {kind.kernel!r} does not "
                         f"declare (it declares {', '.join(map(repr, declared)) or 'no option'})")
    return {o: declared[o].check(values.get(o, declared[o].default), names.get(o, o)) for o in kind.options}


def option_names() -> tuple[str, ...]:
    """The options the registered kernels declare (:attr:`Kernel.options`), each once, in the order of registration:
    the names :func:`hypviz.attention.attention_map`, :func:`hypviz.attention.compare` and ``hypviz compare --option``
    take besides their own.

    Returns
    -------
    tuple of str
        The names, read from :data:`KERNELS` now (a kernel registered later is in it).

    Examples
    --------
    >>> option_names()[:3]
    ('power', 'norm_scale', 'bias')
    """
    return tuple(dict.fromkeys(name for kernel in KERNELS.values() for name in kernel.options))


def unknown_options(names: Iterable[Any]) -> list[Any]:
    """The names among ``names`` that no registered kernel declares (:func:`option_names`).

    The plugins' entry points (:func:`hypviz.base.plugins.load_entry_points`) are loaded first when one is missing,
    as for a kind's name, so that a plugin's kernel is known before its option is refused.

    Parameters
    ----------
    names : iterable
        Option names as given (anything that is not a str is unknown).

    Returns
    -------
    list
        The unknown ones, in their order.

    Examples
    --------
    >>> unknown_options(["power", "ofset"])
    ['ofset']
    """
    names = list(names)
    if any(not (isinstance(n, str) and n in option_names()) for n in names):
        plugins.load_entry_points()
    declared = option_names()
    return [n for n in names if not (isinstance(n, str) and n in declared)]


def as_is_(out: torch.Tensor) -> torch.Tensor:
    """Finishing of logits that are the product itself."""
    return out


def clamp_nonpositive_(out: torch.Tensor) -> torch.Tensor:
    r"""Finishing of the distance logits, in place: clamped at 0 (:math:`-\tfrac12\|q - \kappa\|^2_L \le 0`)."""
    return out.clamp_max_(0.0)


def log_(out: torch.Tensor) -> torch.Tensor:
    """Finishing of feature kernels, in place: the log of positive products (clamped at the smallest normal number)."""
    return out.clamp_min_(torch.finfo(out.dtype).tiny).log_()


class Operands:
    """One map's operands: ``log-weights = finish(A @ B^T)`` (up to a row constant), ``err`` bounds each row's rounding.

    ``finish`` is the kernel's in-place finishing (:func:`as_is_`, :func:`clamp_nonpositive_`, :func:`log_` or its own).

    Examples
    --------
    >>> ops = Operands("distance", torch.eye(2), torch.eye(2), torch.zeros(2))
    >>> ops.logits(ops.A, ops.B.T, torch.empty(2, 2)).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """

    def __init__(self, kind: str, a: torch.Tensor, b: torch.Tensor, err: torch.Tensor,
                 finish: Callable[[torch.Tensor], torch.Tensor] = as_is_, rounding: torch.Tensor | None = None):
        self.kind, self.A, self.B, self.err, self.finish = kind, a, b, err, finish
        self.rounding = err if rounding is None else rounding  # the realistic level (:func:`logit_rounding`), <= err

    def logits(self, a_rows: torch.Tensor, b_t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Rows ``a_rows`` of the log-weights, written into ``out`` (``b_t`` is ``B`` transposed)."""
        torch.mm(a_rows, b_t, out=out)
        return self.finish_(out)

    def finish_(self, out: torch.Tensor) -> torch.Tensor:
        """In place: the kernel's finishing of a block of products."""
        return self.finish(out)

    def largest(self) -> float:
        """A bound on ``|A @ B^T|`` over all rows: ``sum_c |A_ic| max_j |B_jc|`` (read without copying ``B``)."""
        col = torch.maximum(self.B.amax(dim=-2), -self.B.amin(dim=-2)).double().unsqueeze(-2)  # (..., 1, c)
        return float((self.A.abs().double() * col).sum(dim=-1).max()) if self.A.numel() else 0.0


def log_rounding(a: torch.Tensor, b: torch.Tensor, mixed: torch.Tensor | None = None) -> torch.Tensor:
    r"""Per row, the rounding of the float log itself: :math:`\varepsilon \max_j |\log w_{ij}|`, :math:`w = A B^\top`.

    :math:`w_{ij} \le \sum_c |A_{ic}| \max_j |B_{jc}|`, and for a row with :math:`A_i \ge 0`,
    :math:`w_{ij} \ge \sum_c A_{ic} \min_j B_{jc}`; on the rows marked ``mixed`` (terms of both signs) the
    clamp at the smallest normal number is the lower bound.  Both logs bound :math:`|\log w_{ij}|`.
    """
    tiny = torch.finfo(a.dtype).tiny
    col_abs = torch.maximum(b.amax(dim=-2, keepdim=True), -b.amin(dim=-2, keepdim=True))
    hi = (a.abs() * col_abs).sum(dim=-1).clamp_min(tiny).log().abs()
    lo = (a * b.amin(dim=-2, keepdim=True)).sum(dim=-1)
    if mixed is not None:
        lo = torch.where(mixed, torch.zeros_like(lo), lo)
    return torch.finfo(a.dtype).eps * torch.maximum(hi, lo.clamp_min(tiny).log().abs())


class Kernel:
    r"""How a family of kinds is computed: what a new computation subclasses (and registers, :func:`register_kernel`).

    A kernel declares everything about its arithmetic, and the rest of hypviz asks it, never a kind's name:

    * :attr:`options`: the parameters it reads besides ``k`` and ``temperature``, each with its check and default
      (:class:`Option`; :func:`options` checks a kind's through them), given by name to
      :func:`hypviz.attention.attention_map`, :func:`hypviz.attention.compare` and ``hypviz compare --option NAME=VALUE``;
    * :meth:`operands`: ``A``, ``B``, the per-row rounding bound and the finishing of the log-weights
      :math:`\log w_{ij} = f(A_i \cdot B_j)` (:class:`Operands`), for :func:`hypviz.attention.compare`'s row blocks;
    * :meth:`largest_logit`: a bound on :math:`|f(A_i \cdot B_j)|` computed in a dtype (what can overflow it; asked
      by :func:`check_logit_range` at any temperature, with no assumption on how it scales);
    * :meth:`dense`: the map, for :func:`hypviz.attention.attention_map`; :meth:`scores`, where it has scores;
    * :meth:`shares_product`: whether two of its kinds come from ONE product per block (:class:`SharedLogits`).

    Examples
    --------
    >>> from hypviz.base import kinds
    >>> isinstance(kernel_for(kinds.get("distance")), Kernel), kernel_for(kinds.get("distance")).has_scores()
    (True, True)
    """

    #: The parameters this kernel reads, by name (a kind of this kernel lists those it reads in its ``options``).
    options: dict[str, Option] = {}

    def operands(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]) -> Operands:
        raise ValueError(f"kind {kind.name!r} is not compared row by row (its rows are not log-linear in one product)")

    def largest_logit(self, kind: Kind, ops: Operands, dtype: torch.dtype) -> float:
        """A bound on ``|log-weight|`` of these operands computed in ``dtype`` (``inf`` when a step overflows it):
        by default the product bound :meth:`Operands.largest`."""
        return ops.largest()

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError(f"kind {kind.name!r}: kernel {type(self).__name__} has no dense map")

    def scores(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float) -> torch.Tensor:
        raise ValueError(f"kind {kind.name!r} has no scores (it is not a softmax of scores); "
                         f"scores exist for {', '.join(map(repr, score_kinds()))}")

    def has_operands(self) -> bool:
        """Whether :meth:`operands` is this kernel's own; without, compare takes the log of its dense rows
        (:class:`DenseRows`)."""
        return type(self).operands is not Kernel.operands

    def has_scores(self) -> bool:
        """Whether :meth:`scores` is this kernel's own (its kinds are a row softmax of scores over a temperature)."""
        return type(self).scores is not Kernel.scores

    def shares_product(self, a: Kind, b: Kind) -> bool:
        """Whether the kinds ``a`` and ``b`` (both of this kernel) come from ONE product per block; none by default."""
        return False

    def shared(self, a: Kind, b: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float,
               temperature: float) -> tuple[SharedLogits, tuple[float, float]]:
        r"""The one-product logits of ``a`` and ``b`` and each kind's :math:`\alpha` (when :meth:`shares_product`)."""
        raise ValueError(f"kinds {a.name!r} and {b.name!r} do not share one product (kernel {type(self).__name__})")


class DenseRows(Operands):
    r"""The operands of a kernel that declares none: ``log-weights = log P``, ``P`` its dense map, row block by row block.

    ``A`` holds the query points, ``B`` the keys (``(H, n, d + 1)``, ``(H, M, d + 1)``); :meth:`logits` asks the
    kernel's :meth:`Kernel.dense` for the rows' map and takes its log (clamped at the smallest normal number).  Its
    rounding level is that of a map taken as it is (as :func:`hypviz.attention.compare_maps` reads one): per row
    :math:`8 \varepsilon (1 + \max(1, \mathbb{E}_P \log(\max P / P)))`, from the weights (a first pass over the rows),
    not bounded a priori.
    """

    def __init__(self, kernel: Kernel, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]):
        self.kernel, self.entry, self.k, self.temperature, self.opts = kernel, kind, k, temperature, opts
        eps, rows = torch.finfo(q.dtype).eps, rows_for(4 * 2**20, keys.shape[-2], q.element_size())
        level = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
        for h in range(q.shape[0]):
            for i in range(0, q.shape[-2], rows):
                p = kernel.dense(kind, q[h, i:i + rows], keys[h], k=k, temperature=temperature, opts=opts)
                top = p.amax(dim=-1, keepdim=True)
                spread = (p * (top.log() - p.clamp_min(torch.finfo(p.dtype).tiny).log())).sum(dim=-1)
                level[h, i:i + rows] = 8.0 * eps * (1.0 + spread.clamp_min(1.0))
        super().__init__(kind.name, q, keys, level, finish=log_)

    def logits(self, a_rows: torch.Tensor, b_t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The log of the dense map's rows ``a_rows`` (query points) against the keys ``b_t`` (transposed), into ``out``."""
        out.copy_(self.kernel.dense(self.entry, a_rows, b_t.transpose(0, 1), k=self.k, temperature=self.temperature,
                                    opts=self.opts))
        return self.finish_(out)

    def largest(self) -> float:
        """0: the log of a finite float cannot overflow."""
        return 0.0


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """Row softmax in place on the CPU without gradient (no second ``N x M`` array), else ``torch.softmax``."""
    if logits.device.type != "cpu" or logits.requires_grad:  # the in-place kernel is not differentiable
        return torch.softmax(logits, dim=-1)
    return softmax_rows_(logits)


def distance_logits(q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float = 1.0) -> torch.Tensor:
    r""":math:`-\tfrac12\|q_i - \kappa_j\|_L^2 / \tau`, ``(..., N, M)``: THE squared distance of the kernels.

    One product of the ``d + 3`` stable operands of :func:`hypviz.lorentz.distance_operands` (no cancellation
    of size :math:`k`), clamped at 0 for :math:`\tau > 0` (at 0 from below for :math:`\tau < 0`): rounding cannot
    make a squared distance negative.  ``q`` and ``keys`` are checked points.
    """
    a, b = distance_operands(q, keys, k=k, temperature=temperature)
    out = a @ b.transpose(-1, -2)
    return out.clamp_max_(0.0) if temperature > 0 else out.clamp_min_(0.0)


def _check_power(value: Any, name: str) -> float:
    return check_power(value)


def _check_norm_scale(value: Any, name: str) -> float:
    return check_norm_scale(value)


class Bilinear(Kernel):
    r"""Softmax kinds with logits :math:`-\frac12\|q - \kappa\|_L^2 + c\, q_t \kappa_t` (``c`` the kind's ``bias``).

    ``c = 1`` is computed as :math:`q_s \cdot \kappa_s` (one product of the spatial parts); ``c = 0`` by
    the ``d + 3`` stable operands of :func:`hypviz.lorentz.distance_operands`; any other ``c`` by those
    operands plus the column :math:`c\, q_t / \tau` against :math:`\kappa_t`.  Two kinds whose ``c`` differ
    share one product (:class:`SharedLogits`).
    """

    @staticmethod
    def _bias(kind: Kind) -> float:
        assert kind.bias is not None  # Kind requires it of every "bilinear" kind
        return kind.bias

    def _ab(
        self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, k: float, temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bias = self._bias(kind)
        if bias == 1.0:
            return q[..., 1:] * (1.0 / temperature), keys[..., 1:]
        a, b = distance_operands(q, keys, k=k, temperature=temperature)
        if bias == 0.0:
            return a, b
        return torch.cat([a, q[..., :1] * (bias / temperature)], dim=-1), torch.cat([b, keys[..., :1]], dim=-1)

    def _finish(self, kind: Kind) -> Callable[[torch.Tensor], torch.Tensor]:
        return clamp_nonpositive_ if kind.bias == 0.0 and kind.constant == 0.0 else as_is_

    def operands(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]) -> Operands:
        a, b = self._ab(kind, q, keys, k, temperature)
        err = logit_error(a, b)
        return Operands(kind.name, a, b, err, finish=self._finish(kind), rounding=logit_rounding(a, b, err))

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        a, b = self._ab(kind, q, keys, k, temperature)
        logits = a @ b.transpose(-1, -2)  # (..., N, M): the only N x M allocation
        return _softmax(self._finish(kind)(logits))

    def scores(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float) -> torch.Tensor:
        r"""Raw scores :math:`-\frac12\|q - \kappa\|_L^2 + c\, q_t \kappa_t - o k`, by the direct product where one exists."""
        if kind.bias == 1.0 and kind.constant == 1.0:  # q_s . kappa_s
            return q[..., 1:] @ keys[..., 1:].transpose(-1, -2)
        if kind.bias == 0.0 and kind.constant == 1.0:  # <q, kappa>_L
            return torch.cat([-q[..., :1], q[..., 1:]], dim=-1) @ keys.transpose(-1, -2)
        a, b = self._ab(kind, q, keys, k, 1.0)
        s = self._finish(kind)(a @ b.transpose(-1, -2))
        return s.sub_(kind.constant * k)

    def shares_product(self, a: Kind, b: Kind) -> bool:
        return kernel_for(a) is self and kernel_for(b) is self and a.bias != b.bias

    def shared(self, a: Kind, b: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float,
               temperature: float) -> tuple[SharedLogits, tuple[float, float]]:
        return SharedLogits(q, keys, k=k, temperature=temperature), (1.0 - self._bias(a), 1.0 - self._bias(b))


class Focused(Kernel):
    """Hypformer's focused map: ``log-weights = log(fp(q_s) . fp(kappa_s))`` (``norm_scale`` cancels; :func:`feature_map`)."""

    options = {"power": Option(_check_power, 2.0, recorded=True),
               "norm_scale": Option(_check_norm_scale, 1.0, recorded=True)}

    def operands(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
                 opts: dict[str, Any]) -> Operands:
        a, b = feature_map(q[..., 1:], opts["power"]), feature_map(keys[..., 1:], opts["power"])
        # all terms positive: each product has relative error <= gamma_c, so its log is off by <= gamma_c,
        # plus the log's own rounding
        gamma = (a.shape[-1] + 3) * torch.finfo(q.dtype).eps
        return Operands(kind.name, a, b, gamma + log_rounding(a, b), finish=log_)

    def largest_logit(self, kind: Kind, ops: Operands, dtype: torch.dtype) -> float:
        return 0.0  # the log of a finite float cannot overflow

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any], eps: float = 0.0) -> torch.Tensor:
        fq, fk = feature_map(q[..., 1:], opts["power"]), feature_map(keys[..., 1:], opts["power"])
        a = fq @ fk.transpose(-1, -2)
        return a.div_(a.sum(dim=-1, keepdim=True).add_(norm_scale_eps(eps, opts["norm_scale"])))


class Gate(Kernel):
    r"""The Lorentz GCN's gate :math:`\sigma(-\frac12\|q - \kappa\|_L^2/\tau + b)`: rows not normalised."""

    options = {"bias": Option(lambda v, name: validate.number(v, name), 0.0, recorded=False)}

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        return torch.sigmoid(distance_logits(q, keys, k=k, temperature=temperature).add_(opts["bias"]))


class Geodesic(Kernel):
    r"""The softmax of the hyperbolic distance itself, :math:`-d(q, \kappa)/\tau`,
    :math:`d = \sqrt k \operatorname{arcosh}(1 + \|q-\kappa\|_L^2/2k)`."""

    def dense(self, kind: Kind, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float,
              opts: dict[str, Any]) -> torch.Tensor:
        u = distance_logits(q, keys, k=k, temperature=-k)  # |q - kappa|^2_L / 2k; arcosh(1 + u) = log1p(u + sqrt(u (u + 2)))
        dist = math.sqrt(k) * torch.log1p(u + torch.sqrt(u * (u + 2.0)))
        return torch.softmax(-dist / temperature, dim=-1)


#: The kernels, by the name a :class:`~hypviz.base.kinds.Kind` gives in its ``kernel``.
KERNELS: dict[str, Kernel] = {"bilinear": Bilinear(), "focused": Focused(), "gate": Gate(), "geodesic": Geodesic()}


_BUILT_IN_KERNELS = frozenset(KERNELS)
for _name, _kernel in KERNELS.items():  # the registry checks a kind's options against its kernel's at registration
    kinds.declare_kernel(_name, tuple(_kernel.options))
del _name, _kernel


def register_kernel(name: str, kernel: Kernel) -> Kernel:
    """Add a kernel for kinds whose computation is new (a name already taken is refused).

    Examples
    --------
    >>> class Flat(Kernel):
    ...     def dense(self, kind, q, keys, *, k, temperature, opts):
    ...         return torch.full((*q.shape[:-1], keys.shape[-2]), 1.0 / keys.shape[-2], dtype=q.dtype)
    >>> _ = register_kernel("flat_example", Flat())
    >>> "flat_example" in KERNELS
    True
    >>> unregister_kernel("flat_example")
    """
    if not (isinstance(name, str) and name.isascii() and name.isidentifier()):
        raise ValueError(f"name must be a word of letters, digits and '_' (a kernel's name), got {name!r:.60}")
    if not isinstance(kernel, Kernel):
        what = f"the class {kernel.__name__} (pass an instance)" if isinstance(kernel, type) else repr(kernel)[:60]
        raise TypeError(f"kernel must be an instance of hypviz.attention.maps.kernels.Kernel, got {what}")
    if name in KERNELS:
        raise ValueError(f"a kernel named {name!r} is already registered")
    bad = [o for o, opt in kernel.options.items() if not (isinstance(o, str) and o.isidentifier() and isinstance(opt, Option))]
    if not isinstance(kernel.options, dict) or bad:
        raise ValueError(f"kernel.options must map option names to Option(check, default), got {short(kernel.options)}")
    kinds.declare_kernel(name, tuple(kernel.options))
    KERNELS[name] = kernel
    return kernel


def unregister_kernel(name: str) -> None:
    """Remove a kernel registered at run time (the built-in ones stay); no registered kind may still name it.

    Examples
    --------
    >>> _ = register_kernel("flat_example", Kernel())
    >>> unregister_kernel("flat_example")
    >>> "flat_example" in KERNELS
    False
    """
    if not isinstance(name, str) or name not in KERNELS or name in _BUILT_IN_KERNELS:
        raise ValueError(f"name must be a kernel registered at run time, got {short(name)}")
    users = [n for n in kinds.names() if kinds.get(n).kernel == name]
    if users:
        raise ValueError(f"kernel {name!r} still computes the kinds {', '.join(map(repr, users))}: unregister them first")
    del KERNELS[name]
    kinds.forget_kernel(name)


def kernel_for(kind: Kind) -> Kernel:
    """The kernel of ``kind`` (a one-line error naming the kind when none is registered)."""
    try:
        return KERNELS[kind.kernel]
    except KeyError:
        raise ValueError(f"kind {kind.name!r} names the kernel {kind.kernel!r}, which is not registered "
                         f"(registered: {', '.join(KERNELS)})") from None


def score_kinds() -> tuple[str, ...]:
    """The registered kinds whose kernel has scores (:meth:`Kernel.scores`), read from the registry now."""
    return tuple(n for n in kinds.names() if kinds.get(n).kernel in KERNELS and KERNELS[kinds.get(n).kernel].has_scores())


def operands(name: str, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float, opts: dict[str, Any]) -> Operands:
    """:class:`Operands` of the kind ``name`` (flattened ``(H, n, d + 1)`` checked points)."""
    kind = kinds.get(name)
    return kernel_for(kind).operands(kind, q, keys, k=k, temperature=temperature, opts=opts)


def dense_map(
    name: str, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float, opts: dict[str, Any]
) -> torch.Tensor:
    """The map of the kind ``name``, ``(..., N, M)``, from checked points."""
    kind = kinds.get(name)
    return kernel_for(kind).dense(kind, q, keys, k=k, temperature=temperature, opts=opts)


def raw_scores(name: str, q: torch.Tensor, keys: torch.Tensor, *, k: float) -> torch.Tensor:
    """The scores of the softmax kind ``name``, ``(..., N, M)``, from checked points."""
    kind = kinds.get(name)
    return kernel_for(kind).scores(kind, q, keys, k=k)


class SharedLogits:
    r"""Two ``"bilinear"`` kinds from ONE product: logits :math:`S - \alpha\, c\, w^\top` with :math:`\alpha = 1 - \mathrm{bias}`.

    ``S = q_s kappa_s^T / temperature``, ``c = q_t / temperature`` and
    ``w = kappa_t - sqrt(k) = |kappa_s|^2 / (kappa_t + sqrt(k))`` (no cancellation): by identities 1 and 4,
    :math:`-\frac12\|q - \kappa\|_L^2/\tau + \mathrm{bias}\, q_t\kappa_t/\tau
    = S - (1 - \mathrm{bias})\, c\, w^\top` plus a row constant, which does not change a softmax.  So two such
    kinds differ by a rank-one update, exact in every digit that matters to a softmax.  ``err(alpha)``
    bounds each row's rounding of the logits of the kind with that :math:`\alpha` (any summation order).
    """

    def __init__(self, q: torch.Tensor, keys: torch.Tensor, *, k: float, temperature: float):
        self.A = q[..., 1:] * (1.0 / temperature)  # (H, N, d)
        self.B = keys[..., 1:]  # (H, M, d), a view
        self.c = q[..., 0] * (1.0 / temperature)  # (H, N)
        # (H, M); torch.linalg's functions are typed as returning Any
        self.w: torch.Tensor = torch.linalg.vector_norm(keys[..., 1:], dim=-1).square_().div_(keys[..., 0] + math.sqrt(k))
        self._err_s = logit_error(self.A, self.B)  # gamma * sum |A| max|B|
        self._size = self._err_s / ((self.A.shape[-1] + 3) * torch.finfo(q.dtype).eps)  # sum_c |A_ic| max_j |B_jc| >= |S_ij|
        self._cw = self.c.abs() * self.w.amax(dim=-1, keepdim=True) if self.w.numel() else torch.zeros_like(self.c)
        self._rnd_s = logit_rounding(self.A, self.B, self._err_s)
        b2 = torch.linalg.vector_norm(self.B, dim=-1).amax(dim=-1, keepdim=True) if self.B.shape[-2] else 0.0
        self._size2 = torch.linalg.vector_norm(self.A, dim=-1) * b2  # |A_i|_2 max_j |B_j|_2 >= |S_ij|

    def largest(self, alpha: float) -> torch.Tensor:
        """Per row, a bound on ``|logit|`` of the kind with this ``alpha``."""
        return self._size + abs(alpha) * self._cw

    def err(self, alpha: float) -> torch.Tensor:
        """Per row, the rounding bound of the logits of the kind with this ``alpha``."""
        if alpha == 0.0:
            return self._err_s
        return self._err_s + 3.0 * torch.finfo(self.A.dtype).eps * self.largest(alpha)

    def rounding(self, alpha: float) -> torch.Tensor:
        """Per row, the realistic rounding level (:func:`logit_rounding`) of the logits of the kind with this ``alpha``
        (at most :meth:`err`)."""
        if alpha == 0.0:
            return self._rnd_s
        eps = torch.finfo(self.A.dtype).eps
        return torch.minimum(self.err(alpha), self._rnd_s + 3.0 * eps * (self._size2 + abs(alpha) * self._cw))

    def rows(self, h: int, idx: torch.Tensor, alpha: float, dev: torch.device) -> torch.Tensor:
        """Logit rows ``idx`` of head ``h`` for the kind with this ``alpha`` (recomputed, for the few rows that need it)."""
        s = self.A[h, idx].to(dev) @ self.B[h].to(dev).transpose(0, 1)
        if alpha != 0.0:
            s.addr_(self.c[h, idx].to(dev), self.w[h].to(dev), alpha=-alpha)
        return s


def check_logit_range(largest: float, dtype: torch.dtype, temperature: float, largest_at: Callable[[float], float]) -> None:
    r"""Refuse a temperature whose logits overflow ``dtype`` (the softmax would be NaN), naming the smallest usable one.

    ``largest``: a bound on ``|logit|`` at ``temperature``; ``largest_at(t)``: the kernel's bound at temperature
    ``t`` in float64 (asked only when refusing).  No rule of scaling is assumed: the smallest usable temperature
    is found by doubling, then bisection on :math:`\log t`, of the kernel's own bound against ``max / 16``.
    """
    limit = torch.finfo(dtype).max / 16
    if largest < limit:
        return
    now, hi = largest_at(temperature), temperature
    for _ in range(2100):  # doubling reaches any float's range
        if largest_at(hi) < limit:
            break
        hi *= 2.0
    lo = hi / 2.0 if hi > temperature else temperature
    for _ in range(24):  # the limit within a relative 2^-24 of its bracket: its three digits
        mid = math.sqrt(lo) * math.sqrt(hi)  # no underflow of lo * hi
        lo, hi = (lo, mid) if largest_at(mid) < limit else (mid, hi)
    name = str(dtype).replace("torch.", "")
    size = f"about {now:.3g}" if math.isfinite(now) else "beyond float64's range"
    raise ValueError(
        f"temperature {temperature:g} makes the logits overflow {name} (largest |logit| {size}, "
        f"{name} holds {torch.finfo(dtype).max:.3g}); the smallest usable is about {hi:.3g}"
    )
