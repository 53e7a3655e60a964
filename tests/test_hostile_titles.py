"""A name read from a file (a capture layer's) is drawn literally in the figures' titles: ``$``, ``\\frac{`` and
``$x^2$`` are text, never mathtext (which would fail to parse or draw math the file chose)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hypviz import cli, data
from hypviz.capture import records
from hypviz.reports import figures, input_files

NAMES = ["enc$\\frac{$0", "$x^2$", "a\\$b", "$", "\\frac{", "cost $5 and $6", "_^{}\\\\"]


def _layer(label: str) -> dict:
    rng = np.random.default_rng(0)
    return {"label": label, "what": "model's map", "tv": rng.random((2, 5)), "query_norms": rng.random((2, 5)) + 1,
            "key_norm_spread": [0.5, 1.0], "mean_tv": [0.1, 0.2], "baseline": [0.3, 0.4]}


@pytest.mark.parametrize("name", NAMES)
def test_a_layer_name_is_drawn_as_text(name):
    fig = figures.layers_figure([_layer(name)])
    png = figures.png_bytes(fig, dpi=30)  # draws every title: a mathtext parse error would raise here
    assert png.startswith(b"\x89PNG")
    for ax in fig.axes:
        title = ax.title
        shown, is_math = title._preprocess_math(title.get_text())
        assert not is_math and shown.startswith(f"{name}: ")


@pytest.mark.parametrize("name", ["enc$\\frac{$0", "$x^2$"])
def test_a_capture_with_such_a_layer_name_gives_a_report(name, tmp_path, capsys):
    q = data.lifted_gaussian((1, 6), 3, 1.0, seed=1)
    rec = records.LayerRecord(name=name, queries=q, keys=q, values=None, k=1.0, mode="full", kind="distance",
                              temperature=1.0)
    records.save([rec], tmp_path / "cap.pt")
    input_files.STORED_K.clear()
    code = cli.main(["compare", os.fspath(tmp_path / "cap.pt"), "--device", "cpu", "--no-progress", "--out",
                     os.fspath(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (tmp_path / "r" / "layers.png").stat().st_size > 0
