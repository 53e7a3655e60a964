r"""The verdict's calibration table: hand-built and measured cases, each with the verdict a careful reader gives and why.

:func:`cases` builds every case (points through :func:`hypviz.attention.compare`, given maps
through :func:`hypviz.attention.compare_maps`) and returns them with their expected verdict; the
tests hold :func:`hypviz.attention.verdict` to this table and notebook 05 shows it.  Each case is
small (at most a few hundred rows, or two rows of :math:`10^5` keys) and deterministic.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from hypviz import data
from hypviz import lorentz as L
from hypviz.attention.comparison.given_maps import compare_maps
from hypviz.attention.comparison.result import Comparison
from hypviz.attention.comparison.streamed_compare import compare
from hypviz.attention.maps.kernels import distance_logits, raw_scores

__all__ = ["Case", "cases", "CASES"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One calibration case: ``name``, its ``setup``, the ``expected`` verdict, ``why`` (one sentence), and ``build``
    (makes the :class:`Comparison`)."""

    name: str
    setup: str
    expected: str
    why: str
    build: Callable[[], Comparison]


def _gaussian(r: float, n: int = 256, d: int = 64, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return data.lifted_gaussian(n, d, r, seed=seed, dtype=dtype)


def _lorentz_vs_distance(dtype: torch.dtype) -> Comparison:
    # independent computations: <q, kappa>_L directly as -q_t kappa_t + q_s . kappa_s (the lorentz kind's scores,
    # no shared operands), against the distance map of hypviz (identity 3's stable operands)
    from hypviz.attention.maps.dense import attention_map

    q, keys = _gaussian(0.1, seed=1, dtype=dtype), _gaussian(0.1, seed=2, dtype=dtype)
    inner = raw_scores("lorentz", q, keys, k=1.0)
    return compare_maps(torch.softmax(inner / 8.0, dim=-1), attention_map(q, keys, "distance", temperature=8.0),
                        a="softmax(<q,kappa>_L / tau), direct", b="distance")


def _equal_norm_keys() -> Comparison:
    g = torch.Generator().manual_seed(3)
    ks = torch.randn(256, 64, generator=g, dtype=torch.float64)
    ks = 2.0 * ks / ks.norm(dim=-1, keepdim=True)  # every key's spatial norm 2: kappa_t the same for all
    return compare(_gaussian(2.0, seed=4), L.lift(ks), "spatial", "distance", temperature=8.0)


def _one_key_each(m: int = 100_000, share: float = 0.04) -> Comparison:
    pa = torch.full((2, m), (1.0 - share) / (m - 1), dtype=torch.float64)
    pb = pa.clone()
    pa[0, 0] = pa[1, 1] = share  # each row of P_a puts 4 % on one key, P_b on another
    pb[0, 1] = pb[1, 0] = share
    return compare_maps(pa, pb)


def _two_nearby_keys(radial: float = 0.002, temperature: float = 0.005) -> Comparison:
    # 12 queries on a circle of spatial radius 1.5 in H^2; each has two keys 0.03 rad to either side, one of them
    # `radial` farther out: the distance map splits its weight evenly, the spatial map's bias prefers the outer key
    n = 12
    ang = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)

    def ring(r: float, offset: float) -> torch.Tensor:
        return torch.stack([r * torch.cos(ang + offset), r * torch.sin(ang + offset)], dim=-1)

    q = L.lift(ring(1.5, 0.0))
    keys = L.lift(torch.cat([ring(1.5, 0.03), ring(1.5 + radial, -0.03)]))
    return compare(q, keys, "spatial", "distance", temperature=temperature)


def _minority(n: int = 200, m: int = 64, different: float = 0.15) -> Comparison:
    eye = torch.eye(m, dtype=torch.float64)
    pa = eye[torch.arange(n) % m]
    pb = pa.clone()
    bad = int(round(different * n))
    pb[:bad] = eye[(torch.arange(bad) + 1) % m]  # 15 % of the rows put all their weight elsewhere
    return compare_maps(pa, pb)


def _near_tie() -> Comparison:
    base = torch.full((1, 256), 0.6 / 254, dtype=torch.float64)
    pa, pb = base.clone(), base.clone()
    pa[0, 0], pa[0, 1] = 0.2005, 0.1995  # the two top keys swapped, 0.1 % of the weight apart
    pb[0, 0], pb[0, 1] = 0.1995, 0.2005
    return compare_maps(pa, pb)


def _logit_noise(scale: float = 0.02) -> Comparison:
    q, keys = _gaussian(3.0, seed=5), _gaussian(3.0, seed=6)
    logits = distance_logits(q, keys, k=1.0)  # -1/2 |q - kappa|^2_L at tau = 1, by the distance kernel
    g = torch.Generator().manual_seed(7)
    noisy = logits + scale * torch.randn(logits.shape, generator=g, dtype=torch.float64)
    return compare_maps(torch.softmax(noisy, dim=-1), torch.softmax(logits, dim=-1))


def _float32_vs_float64() -> Comparison:
    q, keys = _gaussian(1.0, seed=8), _gaussian(1.0, seed=9)
    from hypviz.attention.maps.dense import attention_map

    p32 = attention_map(q.float(), keys.float(), "distance", temperature=8.0)
    p64 = attention_map(q, keys, "distance", temperature=8.0)
    return compare_maps(p32, p64)


def _small_m_soft() -> Comparison:
    pa = torch.tensor([[0.26, 0.25, 0.25, 0.24]], dtype=torch.float64)
    pb = torch.tensor([[0.24, 0.25, 0.25, 0.26]], dtype=torch.float64)
    return compare_maps(pa, pb)


def _half_support() -> Comparison:
    m = 256
    pa = torch.zeros(1, m, dtype=torch.float64)
    pa[0, : m // 2] = 2.0 / m  # uniform over half the keys: no key above twice its uniform weight
    return compare_maps(pa, torch.full((1, m), 1.0 / m, dtype=torch.float64))


def _half_precision(dtype: torch.dtype) -> Comparison:
    from hypviz.attention.maps.dense import attention_map

    q, keys = _gaussian(5.0, seed=12), _gaussian(5.0, seed=13)
    pa = attention_map(q, keys, "spatial", temperature=8.0).to(dtype)
    pb = attention_map(q, keys, "distance", temperature=8.0).to(dtype)
    return compare_maps(pa, pb, a="spatial", b="distance")


def _one_hot_bfloat16() -> Comparison:
    eye = torch.eye(8, dtype=torch.bfloat16)
    return compare_maps(eye[:4], eye[4:])


def _noisy_lognormal(m: int, permute: bool = False, swap: bool = False, scale: float = 0.1, n: int = 64) -> Comparison:
    # Gaussian logits (lognormal weights) with N(0, 0.1^2) noise: the same perturbation at every M
    g = torch.Generator().manual_seed(21)
    logits = torch.randn(n, m, generator=g, dtype=torch.float64)
    noisy = logits + scale * torch.randn(n, m, generator=g, dtype=torch.float64)
    pa, pb = torch.softmax(noisy, dim=-1), torch.softmax(logits, dim=-1)
    if permute:
        order = torch.randperm(m, generator=g)
        pa, pb = pa[:, order], pb[:, order]
    return compare_maps(pb, pa) if swap else compare_maps(pa, pb)


def _tie(prefer: int) -> Comparison:
    m = 64
    pa = torch.full((1, m), 0.2 / (m - 2), dtype=torch.float64)
    pa[0, 0] = pa[0, 1] = 0.4  # an exact tie in P_a
    pb = pa.clone()
    pb[0, prefer], pb[0, 1 - prefer] = 0.42, 0.38  # P_b prefers one of the tied keys by 10 %
    return compare_maps(pa, pb)


def _summed_in_two_orders(logit_scale: float | None) -> Comparison:
    # float32 logits of size 1e4, the same sum of 64 terms taken in two orders: equal in exact arithmetic
    g = torch.Generator().manual_seed(22)
    terms = (1e4 / 64 + torch.randn(32, 512, 64, generator=g, dtype=torch.float64)).float()
    fwd, rev = torch.zeros(terms.shape[:-1]), torch.zeros(terms.shape[:-1])
    for i in range(64):  # float32 additions one term at a time: the same rounding on every CPU
        fwd, rev = fwd + terms[..., i], rev + terms[..., 63 - i]
    pa, pb = torch.softmax(fwd.double(), dim=-1), torch.softmax(rev.double(), dim=-1)
    return compare_maps(pa, pb, precision="float32", logit_scale=logit_scale)


def _bfloat16_logits() -> Comparison:
    # the logit-noise maps, said to come from bfloat16 logits of size 100: rounding (1.6 in TV) swamps the gap
    q, keys = _gaussian(3.0, seed=5), _gaussian(3.0, seed=6)
    logits = distance_logits(q, keys, k=1.0)  # -1/2 |q - kappa|^2_L at tau = 1, by the distance kernel
    g = torch.Generator().manual_seed(7)
    noisy = logits + 0.02 * torch.randn(logits.shape, generator=g, dtype=torch.float64)
    return compare_maps(torch.softmax(noisy, dim=-1), torch.softmax(logits, dim=-1), precision="bfloat16", logit_scale=100.0)


def _close_and_uniform() -> Comparison:
    m = 64
    base = torch.full((10, m), 1.0 / m, dtype=torch.float64)
    pa, pb = base.clone(), base.clone()
    pa[:5] = torch.softmax(torch.arange(m, dtype=torch.float64) / 8.0, dim=-1)  # half the rows peaked
    pb[:5] = torch.softmax(torch.arange(m, dtype=torch.float64) / 8.2, dim=-1)  # and close to each other
    pb[5:] = torch.softmax(torch.linspace(0.0, 0.01, m, dtype=torch.float64), dim=-1)  # the rest near uniform in both
    return compare_maps(pa, pb)


#: The cases, in the order notebook 05 shows them.
CASES: tuple[Case, ...] = (
    Case("identity 5, float64",
         "softmax of <q,kappa>_L computed directly vs the distance map, Gaussian r = 0.1, d = 64, N = M = 256, tau = 8, float64",
         "identical", "equal maps in exact arithmetic (identity 5); both are near uniform, but identical is what they are",
         lambda: _lorentz_vs_distance(torch.float64)),
    Case("identity 5, float32", "the same in float32", "identical",
         "the TV is at float32's rounding level (compare_maps' tolerance: float32 storage)",
         lambda: _lorentz_vs_distance(torch.float32)),
    Case("keys of equal norm", "spatial vs distance, keys on the sphere |kappa_s| = 2, queries Gaussian r = 2, d = 64, tau = 8",
         "identical", "the bias q_t kappa_t / tau is the same for every key, so it cancels in the softmax (identity 4)",
         _equal_norm_keys),
    Case("both near uniform", "spatial vs distance, Gaussian r = 0.05, d = 64, N = M = 256, tau = 8", "uninformative",
         "both maps are within TV 0.05 of uniform and no key gets twice its uniform weight: a small TV says nothing",
         lambda: compare(_gaussian(0.05, seed=10), _gaussian(0.05, seed=11), "spatial", "distance", temperature=8.0)),
    Case("equal-scale Gaussians, r = 1", "spatial vs distance, Gaussian r = 1, d = 64, N = M = 256, tau = 8 (r^2 / tau = 1/8)",
         "uninformative",
         "both maps are within TV 0.01 of uniform: the gap/baseline ratio of about 0.6 is there, but the maps carry no structure",
         lambda: compare(_gaussian(1.0, seed=12), _gaussian(1.0, seed=13), "spatial", "distance", temperature=8.0)),
    Case("equal-scale Gaussians, r = 5", "spatial vs distance, Gaussian r = 5, d = 64, N = M = 256, tau = 8", "different",
         "the gap is more than half of either map's distance from uniform and top-1 agreement is low",
         lambda: compare(_gaussian(5.0, seed=12), _gaussian(5.0, seed=13), "spatial", "distance", temperature=8.0)),
    Case("4 % on another key, M = 100,000", "two rows, each map 4 % on one key (4,000x the uniform weight), the keys differ",
         "different", "TV(., U) = 0.04 but the peak is 4,000 uniform weights: not near uniform, and the favourites differ",
         _one_key_each),
    Case("two nearby keys swap",
         "spatial vs distance in H^2, 12 queries, two keys each 0.03 rad apart, one 0.002 farther out, tau = 0.005",
         "different", "TV is 0.16 of the baseline, but the spatial map puts 65 % on the key the distance map ranks second",
         _two_nearby_keys),
    Case("a minority of rows", "one-hot maps, 200 rows: 85 % identical, 15 % on another key", "mixed",
         "no verdict holds on 90 % of the rows: the fractions are reported instead of a mean", _minority),
    Case("near-tie at the top", "one row, M = 256: the two top keys (0.2005 / 0.1995) swapped", "close",
         "TV 0.001 against a baseline of 0.39, and each favourite gets > 0.9 of the other map's top weight", _near_tie),
    Case("logit noise 0.02",
         "distance map, Gaussian r = 3, d = 64, N = M = 256, tau = 1, against itself with N(0, 0.02^2) noise on the logits",
         "close", "TV about 0.01 against a baseline of 0.48, the same favourite keys", _logit_noise),
    Case("float32 vs float64", "distance maps of one point set (Gaussian r = 1, d = 64, tau = 8) in float32 and float64",
         "identical", "the TV is at float32's rounding level", _float32_vs_float64),
    Case("soft rows, M = 4", "(0.26, 0.25, 0.25, 0.24) against its mirror image", "uninformative",
         "both rows are within TV 0.01 of uniform with peaks 1.04: nothing to agree or disagree on", _small_m_soft),
    Case("float16 storage, r = 5", "the maps of 'equal-scale Gaussians, r = 5' stored in float16", "different",
         "half precision is compared in float64 at a tolerance of float16's rounding (about 4e-3): TV 0.11 is a real gap",
         lambda: _half_precision(torch.float16)),
    Case("one-hot bfloat16 rows", "four bfloat16 one-hot rows against four others on other keys", "different",
         "TV 1 is far above bfloat16's rounding", _one_hot_bfloat16),
    Case("bfloat16 logits of size 100", "the 'logit noise 0.02' maps, stated to be computed in bfloat16 from logits of size 100",
         "unresolved", "that rounding (1.6 in TV) is above the TV (0.12) separating close from different: nothing can be told",
         _bfloat16_logits),
    Case("float32 logits 1e4, two orders",
         "one float32 sum of 64 terms of size 1e4/64 taken in two orders, 32 x 512, logit_scale = 1e4",
         "identical", "equal in exact arithmetic; the stated logit size makes float32's rounding of the logits the tolerance",
         lambda: _summed_in_two_orders(1e4)),
    Case("exact tie, P_b prefers key 0", "P_a: 0.4 on keys 0 and 1 (a tie), P_b: 0.42 / 0.38, M = 64", "close",
         "P_b gives P_a's top set (both keys) 0.95 of its largest weight: agreement read from the tied set, not one index",
         lambda: _tie(0)),
    Case("exact tie, P_b prefers key 1", "the same with P_b preferring the other tied key", "close",
         "the verdict does not depend on which tied key P_b prefers", lambda: _tie(1)),
    Case("lognormal, noise 0.1, M = 256", "64 rows of N(0, 1) logits against the same with N(0, 0.1^2) noise, M = 256", "close",
         "TV is about 0.1 of the baseline; the top keys carry a few % of the mass, so the TV decides",
         lambda: _noisy_lognormal(256)),
    Case("lognormal, noise 0.1, M = 100,000", "the same perturbation with M = 100,000 keys", "close",
         "the same perturbation gets the same verdict at every M: near-tied top keys of 0.05 % each do not decide it",
         lambda: _noisy_lognormal(100_000, n=4)),
    Case("lognormal, keys permuted, maps swapped", "the M = 256 case with its keys permuted and P_a, P_b swapped", "close",
         "the verdict is invariant to the order of the keys and to which map is the reference",
         lambda: _noisy_lognormal(256, permute=True, swap=True)),
    Case("close rows and near-uniform rows", "10 rows, M = 64: 5 peaked rows close in both maps, 5 near uniform in both", "close",
         "no row differs in substance: 'close (50% near uniform)', not mixed", _close_and_uniform),
    Case("half of the keys", "uniform over half of M = 256 keys against the uniform row", "different",
         "no key exceeds twice its uniform weight, but TV(., U) = 0.5: the map is far from uniform", _half_support),
)


def cases() -> list[tuple[Case, Comparison]]:
    """Every case of :data:`CASES` with its comparison built (a few seconds on a CPU)."""
    return [(case, case.build()) for case in CASES]
