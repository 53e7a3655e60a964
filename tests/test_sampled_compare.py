"""compare(..., rows=R): exact statistics on R uniformly drawn query rows, means with confidence intervals."""

from __future__ import annotations

import math

import pytest
import torch

from hypviz import attention, data


@pytest.fixture(scope="module")
def full():
    q = data.lifted_gaussian((2, 600), 16, 2.0, seed=1)
    kk = data.lifted_gaussian((2, 300), 16, 2.0, seed=2)
    return q, kk, attention.compare(q, kk, "spatial", "distance", temperature=4.0)


def test_sampled_rows_are_the_full_computation_on_those_rows(full):
    q, kk, ref = full
    res = attention.compare(q, kk, "spatial", "distance", temperature=4.0, rows=50, seed=3)
    assert res.sampled and res.n_queries == 50 and res.n_queries_total == 600 and res.tv.shape == (2, 50)
    idx = res.row_index
    assert idx.shape == (50,) and bool((idx[1:] > idx[:-1]).all())  # distinct, sorted
    for name in ("tv", "kl", "tv_uniform_a", "tv_uniform_b", "topk_overlap"):  # float64: other block shapes, same rows
        torch.testing.assert_close(getattr(res, name), getattr(ref, name)[:, idx], rtol=1e-12, atol=1e-15)
    assert torch.equal(res.top1, ref.top1[:, idx])
    assert "sampled 50 of 600 query rows" in res.summary()
    d = res.to_dict()
    assert d["sampled_rows"] == 50 and set(d["ci95"]) >= {"tv", "kl", "top1"}
    # the same seed draws the same rows; another seed other rows
    again = attention.compare(q, kk, "spatial", "distance", temperature=4.0, rows=50, seed=3)
    other = attention.compare(q, kk, "spatial", "distance", temperature=4.0, rows=50, seed=4)
    assert torch.equal(again.row_index, idx) and not torch.equal(other.row_index, idx)


def test_the_interval_covers_the_full_mean_about_as_often_as_it_says(full):
    q, kk, ref = full
    for name in ("tv", "tv_uniform_b", "top1"):
        truth = float(getattr(ref, name).double().mean())
        covered = 0
        for seed in range(40):
            res = attention.compare(q, kk, "spatial", "distance", temperature=4.0, rows=40, seed=seed)
            _, lo, hi = res.ci(name)
            covered += lo <= truth <= hi
        # nominal 95 %: at least 34 of 40 (a binomial(40, 0.95) falls below 34 with probability < 1 %)
        assert covered >= 34, (name, covered)


def test_an_unsampled_comparison_has_an_exact_mean_and_bad_rows_are_refused(full):
    q, kk, ref = full
    mean, lo, hi = ref.ci("tv")
    assert lo == hi == mean == pytest.approx(ref.mean_tv)
    assert not attention.compare(q, kk, rows=600).sampled  # asking for every row computes them all
    for bad in (0, 1, 2.5, True):
        with pytest.raises(ValueError, match="rows must be an integer >= 2"):
            attention.compare(q, kk, rows=bad)
    assert math.isfinite(ref.ci("kl")[0])


def test_the_cli_option_rows_samples_and_says_so(tmp_path, capsys):
    import json

    import numpy as np

    from hypviz import cli
    from hypviz.reports import input_files

    q = data.lifted_gaussian((2, 300), 8, 1.5, seed=5)
    np.save(tmp_path / "q.npy", q.numpy())
    input_files.STORED_K.clear()
    assert cli.main(["compare", str(tmp_path / "q.npy"), str(tmp_path / "q.npy"), "--rows", "40", "--seed", "2",
                     "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert meta["setup"]["sampled_rows"] == 40 and meta["setup"]["n_queries_total"] == 300
    summary = meta["comparisons"][0]["summary"]
    expected = attention.compare(q, q, "spatial", "distance", rows=40, seed=2)
    assert summary["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-9)
    assert summary["ci95"]["tv"] == pytest.approx(list(expected.ci("tv")[1:]), rel=1e-9)
    assert "SAMPLED" in (tmp_path / "r" / "report.html").read_text()
