"""The three-line workflow: capture a model's attention, save it, ``hypviz compare att.pt`` -> one report.

The model is the stand-in of ``tests/_standin.py`` (Hypformer's structure, written for the tests):
one linear-focused and one full layer, several heads, curvature parameter k = 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hypviz import attention, capture, cli
from hypviz.reports import input_files

from _standin import Encoder, StandInAttention, lifted_input


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    torch.manual_seed(0)
    k, d = 2.0, 4
    model = Encoder(
        [StandInAttention(d + 1, d, 3, k, "linear_focused", power_k=3.0), StandInAttention(d + 1, d, 2, k, "full")]
    ).double()
    x = lifted_input(40, d, k, dtype=torch.float64)
    with capture.attention(model) as cap:
        model(x)
    path = tmp_path_factory.mktemp("cap") / "att.pt"
    cap.save(path)
    return path, cap.layers, model


def test_compare_capture_file_writes_one_report_for_the_model(captured, tmp_path, capsys):
    path, records, model = captured
    input_files.STORED_K.clear()
    code = cli.main(["compare", str(path), "--out", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == 0, err
    files = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert files == ["layers.png", "metrics.json", "report.html", "rows.npz"]
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())
    focused, full = meta["layers"]
    assert (focused["mode"], focused["kind"], focused["heads"]) == ("linear_focused", "focused", 3)
    assert (full["mode"], full["kind"], full["heads"], full["model_map_is_distance"]) == ("full", "distance", 2, True)
    # the model's own map against distance, with baselines and a verdict per head, as attention.compare computes it
    rec = records[0]
    exp = attention.compare(rec.queries, rec.keys, "focused", "distance", k=2.0, power=3.0,
                            norm_scale=rec.norm_scale, temperature=focused["temperature"])
    heads = focused["model_vs_distance"]["heads"]
    assert len(heads) == 3
    for h, head in enumerate(heads):
        assert head["mean_tv"] == pytest.approx(float(exp.tv[h].double().mean()), rel=1e-9)
        assert head["verdict"] in attention.VERDICTS
        assert head["bound_met_fraction"] is None  # the softmax bound does not apply to the focused map
    # the full layer is compared at its own temperature k * scale / 2, and the thread's spatial softmax too
    scale = float(model.blocks[1].scale.detach())
    assert full["temperature"] == pytest.approx(2.0 * scale / 2)
    assert full["thread_spatial_vs_distance"]["summary"]["temperature"] == pytest.approx(full["temperature"])
    # worst queries named by layer, head and index, with their norms
    worst = meta["worst_queries"]
    assert worst and all({"layer", "head", "query", "query_norm", "tv"} <= set(w) for w in worst)
    assert worst == sorted(worst, key=lambda w: -w["tv"])
    rows = np.load(tmp_path / "r" / "rows.npz")
    assert rows["layer0_model_vs_distance_tv"].shape == (3, 40) and "layer1_model_vs_distance_tv" not in rows
    page = (tmp_path / "r" / "report.html").read_text()
    assert "blocks.0" in page and "blocks.1" in page and "distance softmax itself" in page
    assert "<script" not in page  # self-contained, nothing to load
    assert "hypviz compare (model)" in out and "head 2" in out


def test_a_keys_less_compare_of_a_plain_array_explains(tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.zeros((3, 4)))
    assert cli.main(["compare", str(tmp_path / "q.npy")]) == 2
    assert "KEYS is missing" in capsys.readouterr().err
    torch.save({"queries": torch.zeros(3, 4)}, tmp_path / "q.pt")
    assert cli.main(["compare", str(tmp_path / "q.pt"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "not a readable capture file" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
