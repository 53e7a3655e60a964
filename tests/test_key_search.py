"""The top keys of distance attention as a search (issue 30): exact blocked search against dense ``torch.topk``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hypviz.attention import exact_top_keys
from hypviz.lorentz import lift, pairwise_sqdist


def _points(shape, scale=1.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return lift(scale * torch.randn(*shape, generator=g, dtype=dtype))


def _dense_top(q, kk, top):
    s = -0.5 * pairwise_sqdist(q, kk)
    return torch.topk(s, top, dim=-1)


@pytest.mark.parametrize("block_rows", [None, 1, 7])
def test_exact_search_equals_dense_topk_with_heads(block_rows):
    q, kk = _points((2, 3, 40, 6), seed=1), _points((3, 55, 6), seed=2)  # keys broadcast over the first axis
    got = exact_top_keys(q, kk, 5, block_rows=block_rows)
    v, i = _dense_top(q, kk, 5)
    assert got.indices.shape == got.logits.shape == (2, 3, 40, 5) and got.indices.dtype == torch.int64
    assert torch.equal(got.indices, i)
    assert torch.allclose(got.logits, v, rtol=1e-12, atol=1e-12)
    assert (got.logits <= 0).all() and (got.logits[..., 1:] <= got.logits[..., :-1]).all()


def test_exact_search_float32_and_numpy_input():
    q, kk = _points((30, 9), seed=3), _points((64, 9), seed=4)
    got = exact_top_keys(q.numpy().astype(np.float32), kk.float(), 3)
    assert got.logits.dtype == torch.float32
    v, _ = _dense_top(q, kk, 3)
    assert torch.allclose(got.logits.double(), v, rtol=1e-4, atol=1e-4)  # same keys up to float32 near-ties: same logits


def test_equal_logits_are_listed_by_index_deterministically():
    kk = _points((20, 4), seed=5)
    keys = torch.cat([kk, kk, kk], dim=0)  # every logit appears three times: at j, j + 20, j + 40
    q = _points((8, 4), seed=6)
    got = exact_top_keys(q, keys, 4, block_rows=3)
    best = _dense_top(q, kk, 2).indices
    assert torch.equal(got.indices[:, :3], torch.stack([best[:, 0], best[:, 0] + 20, best[:, 0] + 40], -1))
    assert torch.equal(got.indices[:, 3], best[:, 1])
    assert torch.equal(got.logits[:, 0], got.logits[:, 2])
    # all keys equal: the first `top` indices
    same = kk[:1].expand(10, 5)
    assert torch.equal(exact_top_keys(q, same, 6).indices, torch.arange(6).expand(8, 6))


def test_top_equal_to_m_sorts_every_key():
    q, kk = _points((5, 3), seed=7), _points((9, 3), seed=8)
    got = exact_top_keys(q, kk, 9)
    assert torch.equal(got.indices.sort(dim=-1).values, torch.arange(9).expand(5, 9))
    assert torch.equal(got.indices, _dense_top(q, kk, 9).indices)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top": 0}, "top must be an integer from 1 to 12"),
        ({"top": 13}, "top must be an integer from 1 to 12"),
        ({"top": 2.0}, "top must be an integer from 1 to 12"),
        ({"top": 2, "block_rows": 0}, "block_rows must be a positive integer or None"),
        ({"top": 2, "k": -1.0}, "k must be"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, message):
    q, kk = _points((4, 3)), _points((12, 3))
    with pytest.raises(ValueError) as err:
        exact_top_keys(q, kk, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_points_off_the_hyperboloid_and_mixed_dtypes_are_refused():
    q, kk = _points((4, 3)), _points((12, 3))
    with pytest.raises(ValueError, match="keys"):
        exact_top_keys(q, kk * 2.0, 2)
    with pytest.raises(TypeError, match="float64 but keys are torch.float32"):
        exact_top_keys(q, kk.float(), 2)
