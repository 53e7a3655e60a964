r"""The derivations' numerical companions, in float64 torch: the bounds on real rows, float accuracy.

* :func:`softmax_gap_bounds` measures, row by row, how far spatial-dot attention is from distance
  attention next to the bounds of notebook 04 (:class:`BoundCheck`); it is
  :func:`hypviz.attention.compare` of the two maps in float64, its fields renamed.
  :func:`worst_case_row` builds real points that attain the TV bound or the exact KL supremum.
* :func:`sqdist_textbook` and :func:`sqdist_accuracy` (:class:`SqdistAccuracy`) are notebook 02's
  float32 / float64 accuracy study of identity 1 against identity 3.
* :func:`seed_interval` (:class:`SeedInterval`) summarises a statistic measured on independent
  draws (mean, spread and a confidence interval of the mean); :func:`gaussian_gap_study`
  (:class:`GapStudy`) measures the spatial-vs-distance gap, its baseline and top-1 agreement on
  independent Gaussian draws, seed by seed, and :func:`predicted_gap_ratio` is its first-order
  prediction (notebooks 04 and 05; :func:`hypviz.symbolic.first_order_gap_ratio` derives it).

The references they are measured against are the mpmath functions of :mod:`hypviz.base.oracle`
(re-exported here: :func:`kl_supremum_mpmath`, :func:`sqdist_mpmath`, :func:`distances_mpmath`).
:mod:`hypviz.symbolic` gives access to all of these names too, importing this module (and torch)
only when one of them is first used.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Sequence

import mpmath
import numpy as np
import torch

from hypviz import data, lorentz
from hypviz.attention.comparison.streamed_compare import compare
from hypviz.base import validate
from hypviz.base.messages import short
from hypviz.base.oracle import distances_mpmath, kl_supremum_mpmath, sqdist_mpmath
from hypviz.lorentz import hyperboloid

__all__ = [
    "BoundCheck",
    "softmax_gap_bounds",
    "worst_case_row",
    "sqdist_textbook",
    "SqdistAccuracy",
    "sqdist_accuracy",
    "SeedInterval",
    "seed_interval",
    "predicted_gap_ratio",
    "GapStudy",
    "gaussian_gap_study",
    # the mpmath references, from hypviz.base.oracle
    "kl_supremum_mpmath",
    "sqdist_mpmath",
    "distances_mpmath",
]


# =========================================================================== #
# the softmax bounds on real rows (notebook 04)
# =========================================================================== #
class BoundCheck(NamedTuple):
    r"""Per-row comparison of distance attention :math:`P` and spatial attention :math:`S` (float64, ``(..., N_q)``).

    Fields: ``kl`` :math:`\mathrm{KL}(P \,\|\, S)`, ``tv`` :math:`\mathrm{TV}(P, S)`, ``delta``
    :math:`\Delta`, ``kl_bound`` Hoeffding's :math:`\Delta^2/8` (the exact supremum is
    :func:`hypviz.attention.kl_supremum`), ``tv_bound`` :math:`\tanh(\Delta/4)`, and ``tv_uniform``
    the baseline :math:`\mathrm{TV}(P, U)` to the uniform row.
    """

    kl: torch.Tensor
    tv: torch.Tensor
    delta: torch.Tensor
    kl_bound: torch.Tensor
    tv_bound: torch.Tensor
    tv_uniform: torch.Tensor


def _as_points64(x: Any, k: float, name: str) -> torch.Tensor:
    """Rows of points as float64, their time coordinates recomputed from the spatial parts."""
    t = lorentz.check_points(x, k=k, name=name)
    if t.dim() < 2:
        raise ValueError(f"{name}: expected (..., N, d + 1) rows of points, got shape {tuple(t.shape)}")
    return lorentz.lift(t[..., 1:].to(torch.float64), k=k)


def softmax_gap_bounds(queries: Any, keys: Any, temperature: float, *, k: float = 1.0) -> BoundCheck:
    r"""Measure how far spatial-dot attention is from distance attention, row by row, with the bounds.

    .. math::

        P_j = \mathrm{softmax}_j\Bigl(-\frac{\|q - \kappa_j\|_L^2}{2\tau}\Bigr), \qquad
        S_j = \mathrm{softmax}_j\Bigl(\frac{q_s \cdot \kappa_{s,j}}{\tau}\Bigr),

        \mathrm{KL} = \sum_j P_j \log\frac{P_j}{S_j}, \qquad
        \mathrm{TV} = \tfrac12 \sum_j |P_j - S_j|, \qquad
        \Delta = \frac{q_t\,(\max_j \kappa_{t,j} - \min_j \kappa_{t,j})}{\tau},

    with the bounds :math:`\Delta^2/8` (Hoeffding; the exact supremum is
    :func:`hypviz.attention.kl_supremum`) and :math:`\tanh(\Delta/4)`, and the baseline
    :math:`\mathrm{TV}(P, U) = \tfrac12\sum_j |P_j - 1/N_k|`.

    This is :func:`hypviz.attention.compare` ``(queries, keys, "spatial", "distance")`` in float64
    (time coordinates recomputed from the spatial parts, whatever the input dtype), on the inputs'
    device: ``kl``, ``tv``, ``delta`` and ``tv_bound`` are its fields of the same names, ``kl_bound``
    is its ``kl_bound_hoeffding`` and ``tv_uniform`` its ``tv_uniform_b``.  ``compare`` computes
    both maps from one product (identity 4: the distance logits are the spatial ones minus the bias
    :math:`q_t\,\|\kappa_s\|^2/((\kappa_t + \sqrt{k})\,\tau)`, no cancellation) and KL and TV in
    the tilted ``expm1``/``log1p`` form, so that the tiny divergences near the origin keep their
    relative accuracy; it also computes top-k agreement, which is dropped here.

    Parameters
    ----------
    queries : array or tensor, shape (..., N_q, d + 1)
        Points on the hyperboloid :math:`\langle x, x\rangle_L = -k`.
    keys : array or tensor, shape (..., N_k, d + 1)
        Points of the same hyperboloid, batch shape broadcasting with the queries'.
    temperature : float
        The softmax temperature (e.g. :math:`\sqrt{d}`), :math:`> 0`.
    k : float
        The curvature parameter.

    Returns
    -------
    BoundCheck
        float64 tensors of shape ``(..., N_q)``.

    Raises
    ------
    ValueError
        For a non-positive temperature, points off the hyperboloid, or queries and keys of
        different ``d``.
    """
    k = lorentz.check_k(k)
    temperature = validate.temperature(temperature)
    q = _as_points64(queries, k, "queries")
    keys = _as_points64(keys, k, "keys")
    if q.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries are {tuple(q.shape)} but keys are {tuple(keys.shape)}: the last dimensions (d + 1) differ")
    res = compare(q, keys, "spatial", "distance", k=k, temperature=temperature, topk=1, spearman=False, device=q.device)
    # two softmax kinds: the bound applies, so compare filled its fields
    assert res.delta is not None and res.kl_bound_hoeffding is not None and res.tv_bound is not None
    return BoundCheck(res.kl, res.tv, res.delta, res.kl_bound_hoeffding, res.tv_bound, res.tv_uniform_b)


def worst_case_row(
    query_norm: float = 2.0, key_norm: float = 2.0, d: int = 2, temperature: float = 1.0, *, k: float = 1.0,
    p1: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Real points attaining :math:`\mathrm{TV}(P, S) = \tanh(\Delta/4)` (or the KL supremum): one query, two keys.

    Key 2 sits at the origin and key 1 at norm ``key_norm``, so

    .. math::

        \Delta = \frac{q_t\,(\kappa_{t,1} - \sqrt{k})}{\tau}, \qquad
        P_1 = p_1 = \frac{1}{1 + e^{\Delta/2}} \text{ by default};

    the angle between the query and key 1 is chosen so that distance attention gives key 1 the
    weight :math:`P_1 = p_1`.  The default is the maximiser of the TV bound;
    :math:`p_1 = 1/\Delta - 1/(e^\Delta - 1)` (:math:`\theta^*` of :func:`kl_supremum`) makes the KL
    equal its exact supremum, and :math:`p_1 = 1/2` with a small :math:`\Delta` makes
    :math:`\mathrm{KL}/(\Delta^2/8)` approach 1.

    Returns
    -------
    (queries, keys) : tuple of torch.Tensor
        Shapes ``(1, d + 1)`` and ``(2, d + 1)``, float64.

    Raises
    ------
    ValueError
        When :math:`d < 2`, :math:`p_1 \notin (0, 1)`, or no angle works (the needed
        :math:`q_s \cdot \kappa_s` exceeds :math:`\|q_s\|\|\kappa_s\|`).
    """
    k = lorentz.check_k(k)
    query_norm = validate.positive(query_norm, "query_norm")
    key_norm = validate.positive(key_norm, "key_norm")
    d = validate.integer(d, "d", 2, " (the key is rotated in a plane)")
    temperature = validate.temperature(temperature)
    qt = math.sqrt(query_norm**2 + k)
    kt = math.sqrt(key_norm**2 + k)
    delta = qt * (kt - math.sqrt(k)) / temperature
    if p1 is None:
        logit = -delta / 2  # log(p* / (1 - p*)) at the maximiser
    else:
        p1 = validate.number(p1, "p1")
        if not 0.0 < p1 < 1.0:
            raise ValueError(f"p1 must lie strictly between 0 and 1, got {p1!r}")
        logit = math.log(p1 / (1.0 - p1))
    # s_1 - s_2 = (a_1 - a_2) + (b_1 - b_2) with s_2 = 0 (key 2 at the origin), a_1 - a_2 = logit, b_1 - b_2 = Delta
    need = temperature * (logit + delta)
    if query_norm * key_norm <= 0 or abs(need) > query_norm * key_norm:
        raise ValueError(
            f"no worst-case angle for |q_s| = {query_norm}, |kappa_s| = {key_norm}, k = {k}: "
            f"need q_s . kappa_s = {need:.4g} > |q_s||kappa_s|; use larger norms"
        )
    cos = need / (query_norm * key_norm)
    sin = math.sqrt(max(0.0, 1.0 - cos * cos))
    qs = torch.zeros(1, d, dtype=torch.float64)
    qs[0, 0] = query_norm
    ks = torch.zeros(2, d, dtype=torch.float64)
    ks[0, 0], ks[0, 1] = key_norm * cos, key_norm * sin
    return lorentz.lift(qs, k=k), lorentz.lift(ks, k=k)


# =========================================================================== #
# float32 / float64 accuracy of the squared distance (notebook 02)
# =========================================================================== #
def sqdist_textbook(x: Any, y: Any, *, k: float = 1.0) -> torch.Tensor:
    r"""The textbook squared distance (identity 1), in the inputs' dtype; cancels badly for nearby points.

    .. math::

        \|x - y\|_L^2 = -2k - 2\langle x, y\rangle_L

    For comparison only (the points are not checked); use :func:`hypviz.lorentz.sqdist`
    (identity 3) in real code.
    """
    k = lorentz.check_k(k)
    return -2.0 * k - 2.0 * lorentz.inner(x, y)


@dataclass
class SqdistAccuracy:
    r"""Relative errors of the textbook and stable squared distances against mpmath.

    ``errors[(method, dtype)]`` is ``(n_separations, n_pairs)`` (NaN where the two float inputs
    coincide); ``actual[dtype]`` the exact separations :math:`\|x_s - y_s\|` of the float inputs.
    """

    separations: np.ndarray
    norm: float
    d: int
    k: float
    errors: dict[tuple[str, str], np.ndarray]
    actual: dict[str, np.ndarray]

    def medians(self) -> dict[tuple[str, str], np.ndarray]:
        """Median relative error over the pairs of each separation, per ``(method, dtype)``."""
        return {key: np.nanmedian(v, axis=1) for key, v in self.errors.items()}

    def worst(self) -> dict[tuple[str, str], np.ndarray]:
        """Largest relative error over the pairs of each separation, per ``(method, dtype)``."""
        return {key: np.nanmax(v, axis=1) for key, v in self.errors.items()}


def sqdist_accuracy(
    separations: Iterable[float] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7),
    norm: float = 5.0,
    d: int = 4,
    n_pairs: int = 16,
    *,
    k: float = 1.0,
    dtypes: Sequence[str] = ("float32", "float64"),
    seed: int = 0,
    dps: int = 50,
) -> SqdistAccuracy:
    r"""Relative errors of the textbook :math:`-2k - 2\langle x, y\rangle_L` and of identity 3, in the points' dtype.

    The stable form is the arithmetic of :func:`hypviz.lorentz.sqdist` carried out in the dtype of
    the points (``sqdist`` itself evaluates float32 and half-precision points in float64).  Pairs:
    :math:`x_s` of norm ``norm`` in a random direction, :math:`y_s = x_s + s\,u` with :math:`u` a
    random unit vector and :math:`s` each separation; both rounded to the dtype, lifted in that dtype,
    then compared with :func:`sqdist_mpmath` on the very same float inputs:

    .. math::

        \mathrm{err} = \frac{|\hat D - D|}{D}, \qquad D = \|x - y\|_L^2 \text{ at } \mathtt{dps} \text{ digits}.
    """
    k = lorentz.check_k(k)
    seps = np.array([validate.positive(s, "separations") for s in separations], dtype=np.float64)
    norm = validate.positive(norm, "norm")
    d = validate.integer(d, "d", 2, " (a separation needs a direction besides the point's)")
    n_pairs = validate.integer(n_pairs, "n_pairs", 1)
    seed = validate.integer(seed, "seed", 0)
    dps = validate.integer(dps, "dps", 16, " (decimal digits of the mpmath reference)")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(seps), n_pairs, d))
    x *= norm / np.linalg.norm(x, axis=-1, keepdims=True)
    u = rng.standard_normal((len(seps), n_pairs, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    y = x + seps[:, None, None] * u
    errors: dict[tuple[str, str], np.ndarray] = {}
    actual: dict[str, np.ndarray] = {}
    for name in dtypes:
        npd = np.dtype(name)
        xd = x.astype(npd).reshape(-1, d)
        yd = y.astype(npd).reshape(-1, d)
        xp, yp = lorentz.lift(torch.from_numpy(xd), k=k), lorentz.lift(torch.from_numpy(yd), k=k)
        computed = {
            "textbook": sqdist_textbook(xp, yp, k=k).numpy(),
            # identity 3 in the points' own precision (hypviz.lorentz.sqdist itself evaluates float32 in float64)
            "stable": hyperboloid.sqdist_unchecked(xp, yp, k=k).numpy(),
        }
        ref = sqdist_mpmath(xd, yd, k=k, dps=dps)
        with mpmath.workdps(dps):
            sep = np.array([float(mpmath.sqrt(mpmath.fsum((mpmath.mpf(a) - mpmath.mpf(b)) ** 2 for a, b in zip(r1, r2))))
                            for r1, r2 in zip(xd.tolist(), yd.tolist())])
            for method, values in computed.items():
                err = np.array([float(abs(mpmath.mpf(float(c)) - r) / r) if r > 0 else np.nan
                                for c, r in zip(values.tolist(), ref)])
                errors[(method, name)] = err.reshape(len(seps), n_pairs)
        actual[name] = sep.reshape(len(seps), n_pairs)
    return SqdistAccuracy(seps, float(norm), int(d), k, errors, actual)


# =========================================================================== #
# statistics over independent draws (notebooks 04 and 05)
# =========================================================================== #
@functools.lru_cache(maxsize=None)
def _t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (mpmath, regularised incomplete beta)."""
    def cdf(t: Any) -> Any:  # t and the result: mpmath numbers (findroot's)
        x = df / (df + t * t)
        tail = mpmath.betainc(df / 2.0, 0.5, 0, x, regularized=True) / 2
        return 1 - tail if t > 0 else tail

    return float(mpmath.findroot(lambda t: cdf(t) - p, 2.0))


class SeedInterval(NamedTuple):
    r"""A statistic measured once per independent draw (seed): its mean, spread and a confidence interval.

    .. math::

        \bar x = \frac1n \sum_s x_s, \qquad
        \mathrm{sd} = \sqrt{\frac{1}{n - 1}\sum_s (x_s - \bar x)^2}, \qquad
        \bar x \pm t_{n-1,\,(1+c)/2}\,\frac{\mathrm{sd}}{\sqrt n},

    with ``low``/``high`` the smallest and largest value over the seeds (the range a single seed can
    land in) and ``ci_low``/``ci_high`` the Student-t interval of the mean at confidence ``c``.
    """

    values: np.ndarray
    n: int
    mean: float
    sd: float
    low: float
    high: float
    ci_low: float
    ci_high: float
    confidence: float

    def fraction_within(self, low: float, high: float) -> float:
        """The fraction of the seeds whose value lies strictly between ``low`` and ``high``."""
        return float(((self.values > low) & (self.values < high)).mean())

    def text(self, digits: int = 3) -> str:
        """``mean (95% CI lo-hi; seeds lo-hi, n = 20)``, each to ``digits`` significant digits (see :meth:`short`)."""
        def g(v: float) -> str:
            return _digits(v, digits)

        return (f"{g(self.mean)} ({round(100 * self.confidence)}% CI {g(self.ci_low)}-{g(self.ci_high)}; "
                f"seeds {g(self.low)}-{g(self.high)}, n = {self.n})")

    def short(self, digits: int = 2) -> str:
        """``mean (lo-hi)``: the mean and its confidence interval, ``digits`` significant digits.

        Every printed value is checked not to sit within :math:`10^{-9}` (relative) of a rounding
        boundary, so that rounding noise of another machine cannot change the text (ValueError if it does).
        """
        return f"{_digits(self.mean, digits)} ({_digits(self.ci_low, digits)}-{_digits(self.ci_high, digits)})"


def _digits(v: float, digits: int) -> str:
    """``v`` to ``digits`` significant digits; ValueError when ``v (1 +- 1e-9)`` would print differently."""
    text = f"{v:.{digits}g}"
    if {f"{v * (1 - 1e-9):.{digits}g}", f"{v * (1 + 1e-9):.{digits}g}"} != {text}:
        raise ValueError(f"value must not sit at a rounding boundary of {digits} digits, got {v!r}: print more digits")
    return text


def seed_interval(values: Any, confidence: float = 0.95) -> SeedInterval:
    r"""Summarise one statistic measured on :math:`n \ge 2` independent draws (see :class:`SeedInterval`).

    .. math::

        \bar x \pm t_{n-1,\,(1+c)/2}\,\mathrm{sd}/\sqrt n

    Raises
    ------
    ValueError
        For fewer than 2 values, a value that is not finite, or a confidence outside (0, 1).
    """
    x = np.asarray(torch.as_tensor(values).detach().cpu().double().reshape(-1).numpy() if isinstance(values, torch.Tensor)
                   else np.asarray(values, dtype=np.float64).reshape(-1))
    if x.size < 2:
        raise ValueError(f"values must be at least 2 measurements (one per seed), got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"values must be finite, got {x[~np.isfinite(x)][0]!r} among them")
    c = validate.number(confidence, "confidence")
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    n = int(x.size)
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    half = _t_quantile((1.0 + c) / 2.0, n - 1) * sd / math.sqrt(n)
    return SeedInterval(x, n, mean, sd, float(x.min()), float(x.max()), mean - half, mean + half, c)


def predicted_gap_ratio(rho: Any, query_norm: Any = 0.0, *, k: float = 1.0) -> Any:
    r"""First-order prediction of :math:`\mathrm{TV}(S, P)/\mathrm{TV}(P, U)` for isotropic Gaussian queries and keys.

    .. math::

        \frac{\mathrm{TV}(S, P)}{\mathrm{TV}(P, U)} \approx
        \Bigl(1 + \frac{2\rho^2 \kappa_t^2}{q_t^2}\Bigr)^{-1/2}
        = \Bigl(1 + \frac{2(\rho^2 k + \|q_s\|^2)}{k + \|q_s\|^2}\Bigr)^{-1/2},
        \qquad \rho = \frac{\|q_s\|}{\sqrt{\mathbb{E}\|\kappa_s\|^2}},

    :math:`S` the spatial and :math:`P` the distance softmax, :math:`q_t^2 = k + \|q_s\|^2`,
    :math:`\kappa_t^2 = k + \mathbb{E}\|\kappa_s\|^2` (so :math:`\rho^2\kappa_t^2 = \rho^2 k + \|q_s\|^2`), to
    first order in the logits (both maps linear in them: the TVs are half the mean absolute deviations
    of the bias and of the distance logits over the keys), with many keys and a large dimension (the
    key norms concentrated about their root-mean-square, the deviations Gaussian).  It is
    :math:`(1 + 2\rho^2)^{-1/2}` only when both norms are small against :math:`\sqrt k` (``query_norm = 0``
    here: the keys' norm is ``query_norm / rho``), and :math:`1/\sqrt 3` at :math:`\rho = 1` for any norm.
    :func:`hypviz.symbolic.first_order_gap_ratio` derives it step by step; :func:`gaussian_gap_study`
    measures it.  ``rho`` and ``query_norm`` may be arrays.
    """
    k = lorentz.check_k(k)
    r, qn = _norms(rho, "rho", "norm ratio"), _norms(query_norm, "query_norm", "norm")
    out = 1.0 / np.sqrt(1.0 + 2.0 * (r**2 * k + qn**2) / (k + qn**2))
    return float(out) if out.ndim == 0 else out


def _norms(value: Any, name: str, what: str) -> np.ndarray:
    """``value`` (a number or an array of them) as float64, refused unless every entry is a non-negative finite real
    number (one number by the one rule of :mod:`hypviz.base.validate`: no strings, no bools)."""
    a = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value)
    if a.ndim == 0:
        return np.asarray(validate.number(value, name, minimum=0.0, hint=f" ({what})"))
    if a.dtype.kind not in "iuf":  # strings, bytes, bools, objects
        raise ValueError(f"{name} must be a non-negative finite {what} or an array of them, got an array of dtype {a.dtype}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all() or (a < 0).any():
        raise ValueError(f"{name} must be a non-negative finite {what} or an array of them, got {short(value)}")
    return a


class GapStudy(NamedTuple):
    r"""The spatial-vs-distance gap on independent Gaussian draws, one value per seed (:func:`gaussian_gap_study`).

    ``ratio`` is :math:`\overline{\mathrm{TV}}(S, P)/\overline{\mathrm{TV}}(P, U)` (row means, per
    seed), ``top1`` the tie-aware top-1 agreement, ``tv`` and ``tv_uniform`` the two row means, each
    a :class:`SeedInterval`; ``setup`` the parameters of the draw, ``prediction`` the first-order
    ratio :func:`predicted_gap_ratio` at this :math:`\rho`, query norm and key norm (general norms:
    :math:`(1 + 2\rho^2\kappa_t^2/q_t^2)^{-1/2}`).
    """

    ratio: SeedInterval
    top1: SeedInterval
    tv: SeedInterval
    tv_uniform: SeedInterval
    setup: dict[str, float]
    prediction: float

    def setup_text(self) -> str:
        """The set-up in one line (distribution, norms and their ratio, N, M, d, temperature, k, seeds)."""
        s = self.setup
        return (f"isotropic Gaussian q_s, kappa_s (independent), mean norms |q_s| = {s['query_norm']:g}, "
                f"|kappa_s| = {s['key_norm']:g} (rho = {s['rho']:g}), N = {s['n']}, M = {s['m']}, d = {s['d']}, "
                f"tau = {s['temperature']:g}, k = {s['k']:g}, {s['seeds']} seeds")


def gaussian_gap_study(
    query_norm: float,
    key_norm: float,
    *,
    n: int = 256,
    m: int = 256,
    d: int = 64,
    temperature: float = 8.0,
    k: float = 1.0,
    seeds: int = 20,
    first_seed: int = 0,
    confidence: float = 0.95,
) -> GapStudy:
    r"""Measure spatial against distance softmax on ``seeds`` independent Gaussian draws.

    For each seed :math:`s` (``first_seed``, ``first_seed + 1``, ...) one ``torch.Generator`` seeded
    with :math:`s` draws ``n`` queries, then ``m`` keys, with :func:`hypviz.data.lifted_gaussian`
    (isotropic Gaussian spatial parts of mean norms ``query_norm`` and ``key_norm``, lifted to
    :math:`\langle x, x\rangle_L = -k`, float64); :func:`hypviz.attention.compare` of
    ``"spatial"`` (:math:`S`) against ``"distance"`` (:math:`P`) at ``temperature`` gives, per seed,

    .. math::

        \text{ratio}_s = \frac{\frac1N\sum_i \mathrm{TV}(S_i, P_i)}{\frac1N\sum_i \mathrm{TV}(P_i, U)},
        \qquad \text{top-1}_s = \frac1N \sum_i [\text{same largest key, tie-aware}],

    summarised over the seeds by :func:`seed_interval`.  All seeds go through one batched
    ``compare`` (leading axis = seed), on the CPU.

    Raises
    ------
    ValueError
        For non-positive norms, ``temperature`` or ``k``, or counts below their minimum (``n, m, d >= 1``,
        ``seeds >= 2``).
    """
    qn = validate.positive(query_norm, "query_norm")
    kn = validate.positive(key_norm, "key_norm")
    n = validate.integer(n, "n", 1)
    m = validate.integer(m, "m", 1)
    d = validate.integer(d, "d", 1)
    temperature = validate.temperature(temperature)
    k = lorentz.check_k(k)
    seeds = validate.integer(seeds, "seeds", 2)
    first_seed = validate.integer(first_seed, "first_seed", 0)
    qs, ks = [], []
    for s in range(first_seed, first_seed + seeds):
        gen = torch.Generator().manual_seed(s)
        qs.append(data.lifted_gaussian(n, d, qn, k=k, seed=gen))
        ks.append(data.lifted_gaussian(m, d, kn, k=k, seed=gen))
    res = compare(torch.stack(qs), torch.stack(ks), "spatial", "distance", k=k, temperature=temperature,
                            topk=1, spearman=False, device="cpu")
    tv, tvu = res.tv.double().mean(-1), res.tv_uniform_b.double().mean(-1)
    top1 = res.top1.double().mean(-1)
    setup = {"query_norm": qn, "key_norm": kn, "rho": qn / kn, "n": n, "m": m, "d": d, "temperature": temperature, "k": k,
             "seeds": seeds, "first_seed": first_seed}
    return GapStudy(seed_interval(tv / tvu, confidence), seed_interval(top1, confidence), seed_interval(tv, confidence),
                    seed_interval(tvu, confidence), setup, predicted_gap_ratio(qn / kn, qn, k=k))
