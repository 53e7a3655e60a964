"""Fuzz test (hypothesis) of :func:`hypviz.attention.compare_maps`'s contract, masks included.

Any maps (softmax rows of logits of any size, masked or not, one-hot rows, raw numbers that are no map at all,
NaN, negative weights), any dtypes (float16, bfloat16, float32, float64, each map its own), any shapes
(broadcast leading axes, one query, one key) and any ``keep`` (none, random, causal, padding, sparse): either a
finite, consistent :class:`~hypviz.attention.comparison.result.Comparison` -- TV and both distances from uniform in
[0, 1], top-k overlap and ``top1_weight`` in [0, 1], the verdict one of ``VERDICTS``, the row fractions summing to
1, every symmetric measure the same with the maps swapped, a printable summary -- or a one-line ``ValueError`` /
``TypeError``.  A fixed number of examples, derandomized (the same examples every run), no deadline.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypviz import attention as att
from hypviz.attention.comparison.result import VERDICTS

FUZZ: dict[str, Any] = dict(deadline=None, database=None, derandomize=True, max_examples=120,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SYMMETRIC = ("tv", "tv_uniform_a", "tv_uniform_b", "peak_a", "peak_b", "top1_weight", "topk_overlap", "tv_tolerance")
SWAPPED = {"tv_uniform_a": "tv_uniform_b", "tv_uniform_b": "tv_uniform_a", "peak_a": "peak_b", "peak_b": "peak_a"}


def _keep(kind: str, lead: tuple[int, ...], n: int, m: int, g: torch.Generator) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "causal":
        return torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    if kind == "padding":
        return (torch.arange(m) < torch.randint(0, m + 1, (*lead, 1, 1), generator=g))
    return torch.rand(*lead[-1:], n, m, generator=g) < 0.6  # random, possibly with empty rows


def _map(kind: str, shape: tuple[int, ...], keep: torch.Tensor | None, scale: float, g: torch.Generator) -> torch.Tensor:
    logits = scale * torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "softmax":
        if keep is not None:
            k = keep.to_dense() != 0 if keep.layout != torch.strided else keep
            k = k | ~k.any(dim=-1, keepdim=True)  # a fully masked row is uniform, as masked_fill makes it
            logits = logits.masked_fill(~k, -math.inf)
        return torch.softmax(logits, dim=-1)
    if kind == "onehot":
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), shape[-1]).double()
    if kind == "raw":
        return logits.abs()
    if kind == "negative":
        return torch.softmax(logits, dim=-1) - 0.01
    out = torch.softmax(logits, dim=-1)
    out.view(-1)[0] = math.nan
    return out


@st.composite
def cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    g = torch.Generator().manual_seed(seed)
    n, m = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    lead_a = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    lead_b = draw(st.sampled_from([lead_a, lead_a[-1:], (), (1,) * len(lead_a)]))
    keep_kind = draw(st.sampled_from(["none", "causal", "padding", "random"]))
    keep = _keep(keep_kind, lead_a or (1,), n, m, g)
    if keep is not None and keep_kind == "random" and draw(st.booleans()):
        keep = keep[-1].to(torch.float64).to_sparse() if keep.dim() == 3 else keep.to(torch.float64).to_sparse()
    kinds = ["softmax"] * 6 + ["onehot", "raw", "negative", "nan"]
    kind_a, kind_b = draw(st.sampled_from(kinds)), draw(st.sampled_from(kinds))
    scale = draw(st.sampled_from([0.0, 1e-3, 1.0, 10.0, 300.0]))
    pa = _map(kind_a, (*lead_a, n, m), keep, scale, g)
    pb = pa.clone() if draw(st.booleans()) else _map(kind_b, (*lead_b, n, m), keep, scale, g)
    da, db = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    kw = dict(keep=keep, topk=draw(st.integers(1, 8)))
    return pa.to(da), pb.to(db), kw


@settings(**FUZZ)
@given(cases())
def test_compare_maps_is_consistent_or_one_line(case):
    pa, pb, kw = case
    try:
        c = att.compare_maps(pa, pb, **kw)
    except (ValueError, TypeError) as exc:
        text = str(exc)
        assert text and "\n" not in text and len(text) < 400, text
        return
    assert c.verdict in VERDICTS
    for f in SYMMETRIC + ("kl",):
        t = getattr(c, f).double()
        assert t.shape == (*c.batch_shape, c.n_queries), f
        if f != "kl":  # KL(P_b || P_a) is infinite where P_a = 0 < P_b
            assert bool(torch.isfinite(t).all()), f
    for f in ("tv", "tv_uniform_a", "tv_uniform_b", "top1_weight", "topk_overlap"):
        t = getattr(c, f).double()
        assert bool((t >= 0).all()) and bool((t <= 1.0 + 1e-9).all()), (f, t)
    assert bool((c.kl.double() >= 0).all())
    assert math.isclose(sum(c.row_verdicts.values()), 1.0, rel_tol=0, abs_tol=1e-9)
    assert str(c)
    swapped = att.compare_maps(pb, pa, **kw)
    for f in SYMMETRIC:
        assert torch.allclose(getattr(swapped, SWAPPED.get(f, f)).double(), getattr(c, f).double(), rtol=1e-6, atol=1e-7), f
    assert torch.equal(swapped.row_verdict_codes, c.row_verdict_codes)
    assert swapped.verdict == c.verdict
