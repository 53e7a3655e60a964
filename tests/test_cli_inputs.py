"""Inputs that explain themselves: the CLI's diagnoses, in process (``hypviz.cli.main``), plus the API side.

A curvature parameter other than the default is named (``pass --k c``) or read from the file, a
misplaced head axis and a time coordinate stored last are recognised, Poincare-ball points are
mapped, float32 points upcast to float64 are re-lifted, and tensors that require grad are detached.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hypviz import attention, cli, data, lorentz
from hypviz.reports import input_files


def run(capsys, *args) -> tuple[int, str, str]:
    input_files.STORED_K.clear()
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def pts():
    q = data.lifted_gaussian((2, 12), 3, 1.0, seed=1, k=2.0, dtype=torch.float64)
    kk = data.lifted_gaussian((2, 10), 3, 1.0, seed=2, k=2.0, dtype=torch.float64)
    return q, kk


def test_points_on_another_hyperboloid_name_the_k_to_pass(tmp_path, capsys, pts):
    q, kk = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", kk.numpy())
    code, out, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--out", tmp_path / "r")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "pass k=2 (hypviz compare: --k 2)" in err and "--spatial" not in err
    assert not (tmp_path / "r").exists()
    code, out, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--k", "2", "--out", tmp_path / "r")
    assert code == 0, err


def test_a_k_stored_in_the_file_is_used_and_said(tmp_path, capsys, pts):
    q, kk = pts
    torch.save({"queries": q, "keys": kk, "k": torch.tensor(2.0)}, tmp_path / "qk.pt")
    code, out, err = run(capsys, "compare", tmp_path / "qk.pt", tmp_path / "qk.pt", "--out", tmp_path / "r")
    assert code == 0, err
    assert "using k = 2 stored in" in out
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert meta["setup"]["k"] == 2.0
    # --k overrides it (and then the points are off that hyperboloid)
    code, out, err = run(capsys, "compare", tmp_path / "qk.pt", tmp_path / "qk.pt", "--k", "1", "--out", tmp_path / "s")
    assert code == 2 and "pass k=2" in err


def test_more_heads_than_points_asks_for_the_heads_axis(tmp_path, capsys):
    x = data.lifted_gaussian((34, 2), 2, 1.0, seed=3, dtype=torch.float64)  # (34, 2, 3): N = 34, H = 2 stored (N, H, d+1)
    np.save(tmp_path / "x.npy", x.numpy())
    code, out, err = run(capsys, "compare", tmp_path / "x.npy", tmp_path / "x.npy", "--out", tmp_path / "r")
    assert code == 2 and "34 heads x 2 points" in err and "--heads-axis 1" in err
    code, out, err = run(
        capsys, "compare", tmp_path / "x.npy", tmp_path / "x.npy", "--heads-axis", "1", "--out", tmp_path / "r"
    )
    assert code == 0, err
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["setup"]["heads_shape"] == [2]


def test_a_time_coordinate_stored_last_is_recognised(tmp_path, capsys, pts):
    q, kk = pts
    last = torch.cat([q[..., 1:], q[..., :1]], -1)
    np.save(tmp_path / "q.npy", last.numpy())
    np.save(tmp_path / "k.npy", kk.numpy())
    code, out, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--k", "2", "--out", tmp_path / "r")
    assert code == 2 and "LAST coordinate looks like the time coordinate" in err


def test_poincare_ball_points_are_mapped(tmp_path, capsys, pts):
    q, kk = pts
    np.save(tmp_path / "q.npy", lorentz.to_poincare(q, k=2.0).numpy())
    np.save(tmp_path / "k.npy", lorentz.to_poincare(kk, k=2.0).numpy())
    code, out, err = run(
        capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--model", "poincare", "--k", "2", "--out", tmp_path / "r"
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    expected = attention.compare(q, kk, "spatial", "distance", k=2.0)
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-9)
    code, out, err = run(
        capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--model", "poincare", "--spatial", "--out", tmp_path / "s"
    )
    assert code == 2 and "exclude each other" in err


def test_focused_kind_with_its_options(tmp_path, capsys, pts):
    q, kk = pts
    np.save(tmp_path / "q.npy", q.numpy())
    np.save(tmp_path / "k.npy", kk.numpy())
    code, out, err = run(
        capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--k", "2", "--kinds", "focused",
        "--power", "3", "--norm-scale", "0.5", "--out", tmp_path / "r",
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    (comp,) = meta["comparisons"]
    expected = attention.compare(q, kk, "focused", "distance", k=2.0, power=3.0, norm_scale=0.5)
    assert comp["summary"]["mean_tv"] == pytest.approx(expected.mean_tv, rel=1e-9)
    assert comp["summary"]["power"] == 3.0 and comp["summary"]["verdict"] == expected.verdict
    code, out, err = run(capsys, "compare", tmp_path / "q.npy", tmp_path / "k.npy", "--norm-scale", "nan")
    assert code == 2 and "--norm-scale must be a finite number" in err


# --------------------------------------------------------------------------- #
# the API side
# --------------------------------------------------------------------------- #
def test_float32_points_upcast_to_float64_are_relifted():
    q = data.lifted_gaussian(40, 8, 3.0, seed=4, dtype=torch.float32)
    kk = data.lifted_gaussian(50, 8, 3.0, seed=5, dtype=torch.float32)
    with pytest.raises(ValueError, match="off the hyperboloid"):
        lorentz.check_points(q.double())  # float32 rounding is far above float64's tolerance
    res = attention.compare(q.double(), kk.double(), "spatial", "distance")
    ref = attention.compare(lorentz.lift(q[:, 1:].double()), lorentz.lift(kk[:, 1:].double()), "spatial", "distance")
    assert res.dtype == "float64" and torch.equal(res.tv, ref.tv)
    # but float64 points that are merely wrong are still refused
    bad = q.double().clone()
    bad[3, 0] += 0.5
    with pytest.raises(ValueError, match="off the hyperboloid"):
        attention.compare(bad, kk.double())


def test_heads_axis_and_requires_grad_in_the_api():
    q = data.lifted_gaussian((3, 16), 4, 1.0, seed=6, dtype=torch.float64)  # (H, N, d+1)
    kk = data.lifted_gaussian((3, 20), 4, 1.0, seed=7, dtype=torch.float64)
    nh_q, nh_k = q.transpose(0, 1).contiguous(), kk.transpose(0, 1).contiguous()  # (N, H, d+1)
    a = attention.compare(q, kk)
    b = attention.compare(nh_q.requires_grad_(True), nh_k, heads_axis=1)
    assert b.batch_shape == (3,) and torch.equal(a.tv, b.tv)
    assert not b.tv.requires_grad
    m = attention.attention_map(nh_q.detach(), nh_k, "distance", heads_axis=1)
    assert torch.equal(m, attention.attention_map(q, kk, "distance"))
    with pytest.raises(ValueError, match="heads_axis=3 is out of range"):
        attention.compare(nh_q, nh_k, heads_axis=3)


def test_cli_relifts_float32_points_stored_as_float64(tmp_path, capsys):
    q = data.lifted_gaussian((2, 30), 8, 3.0, seed=8, dtype=torch.float32)
    np.save(tmp_path / "q64.npy", q.double().numpy())  # float32 rounding is far above float64's tolerance
    code, out, err = run(capsys, "compare", tmp_path / "q64.npy", tmp_path / "q64.npy", "--out", tmp_path / "r")
    assert code == 0, err
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    ref = attention.compare(lorentz.lift(q[..., 1:].double()), lorentz.lift(q[..., 1:].double()), "spatial", "distance")
    assert meta["comparisons"][0]["summary"]["mean_tv"] == pytest.approx(ref.mean_tv, rel=1e-12)
    bad = q.double().clone()
    bad[0, 3, 0] += 0.25  # a float32 number too, but off the hyperboloid at any precision
    np.save(tmp_path / "bad.npy", bad.numpy())
    code, out, err = run(capsys, "compare", tmp_path / "bad.npy", tmp_path / "bad.npy", "--out", tmp_path / "s")
    assert code == 2 and "off the hyperboloid" in err
