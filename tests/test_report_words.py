"""The reports say it first in words: one plain sentence per comparison and per layer, then the numbers.

Also the figures' reading aids: legends never over the data, the difference colourbar labelled as its panels,
hypviz's default temperature named beside the verdict it affects, every figure text readable at 800 px.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hypviz import capture, data
from hypviz.reports import figures, html, model_report, point_report
from hypviz.reports import inputs as report_inputs
from hypviz.reports.point_report import ratio_words, sentence, share_words

from _standin import Encoder, StandInAttention, lifted_input


# --------------------------------------------------------------------------- #
# the sentence from constructed fractions
# --------------------------------------------------------------------------- #
def test_all_close_says_close_on_all_rows():
    text = sentence({"close": 1.0, "different": 0.0}, "spatial", "distance")
    assert text == "The spatial map is close to the distance map on all the rows."


def test_half_different_half_uniform_says_both_halves():
    text = sentence({"different": 0.5, "uninformative": 0.5}, "spatial", "distance")
    assert text == ("The spatial map weighs the keys differently from the distance map on half the rows; "
                    "on the other half both maps are nearly uniform.")


def test_mixed_names_every_share_largest_first_and_uniform_rows_last():
    text = sentence({"uninformative": 0.4, "different": 0.35, "close": 0.25}, "focused", "distance")
    assert text.startswith("The focused (Hypformer, linear) map weighs the keys differently from the distance map on "
                           "35 % of the rows; on a quarter of the rows it is close to the distance map;")
    assert text.endswith("on the other 40 % both maps are nearly uniform.")


def test_unresolved_says_rounding_cannot_tell():
    text = sentence({"unresolved": 0.93, "close": 0.07}, "spatial", "distance")
    assert text.startswith("The spatial map may or may not be close to the distance map")
    assert "rounding at this precision cannot tell" in text and "93 % of the rows" in text
    assert "on the other 7 % it is close to the distance map" in text


def test_identical_and_all_uniform():
    assert sentence({"identical": 1.0}, "lorentz", "distance") == \
        "The Lorentz map equals the distance map up to rounding on all the rows."
    text = sentence({"uninformative": 1.0}, "spatial", "distance")
    assert text.startswith("The spatial and distance maps are both nearly uniform on all the rows")
    assert "says nothing" in text


def test_shares_in_words():
    assert [share_words(f) for f in (1.0, 0.996, 0.5, 0.25, 0.75, 0.003, 0.37)] == [
        "all the rows", "nearly all the rows", "half the rows", "a quarter of the rows", "three quarters of the rows",
        "a few rows (under 1 %)", "37 % of the rows"]


def test_a_gap_far_above_its_baseline_is_explained_and_a_modest_one_is_not():
    text = sentence({"different": 1.0}, "spatial", "distance", gap_ratio=2060.4)
    assert ("The mean gap is 2,060 times the distance map's own distance from uniform: the distance map is nearly "
            "uniform here") in text
    assert ratio_words(1.72, "spatial", "distance") == "" and ratio_words(None, "a", "b") == ""
    assert "12.3 times" in ratio_words(12.34, "spatial", "distance")


# --------------------------------------------------------------------------- #
# the compare report
# --------------------------------------------------------------------------- #
def _result(temperature, kinds=("spatial",)):
    q = torch.stack([data.lifted_gaussian(24, 4, r, seed=2 * i, dtype=torch.float64) for i, r in enumerate((0.5, 2.0))])
    k = torch.stack([data.lifted_gaussian(24, 4, r, seed=2 * i + 1, dtype=torch.float64) for i, r in enumerate((0.5, 2.0))])
    described = {role: {"path": f"{role}.npy", "shape": list(t.shape), "dtype": "float64"}
                 for role, t in (("queries", q), ("keys", k))}
    inputs = report_inputs.prepare(q.numpy(), k.numpy(), k=1.0, spatial=False, heads_axis=None, dtype="auto",
                                   described=described)
    settings = report_inputs.Settings(kinds=list(kinds), reference="distance", temperature=temperature, device="cpu",
                                      sample_rows=6, progress=False, command="compare")
    return point_report.analyse(inputs, settings)


@pytest.fixture(scope="module")
def default_tau():
    return _result(None, ("spatial", "focused"))


def test_the_default_temperature_is_named_beside_the_verdict_and_only_when_used(default_tau, tmp_path):
    words = point_report.sentences(default_tau)
    assert len(words) == 2
    for w in words:
        assert w.startswith("At hypviz's default tau = sqrt(d) = 2 (d = 4; not a temperature you gave), the ")
    given = _result(1.5)
    assert all("default" not in w for w in point_report.sentences(given))
    # the printed summary says the sentence before the numbers of its comparison
    lines = point_report.summary(default_tau, tmp_path, ["report.html"]).splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("  spatial vs distance: "))
    numbers = next(i for i, ln in enumerate(lines) if "TV mean" in ln)
    assert first < numbers and lines[first].endswith(words[0])


def test_the_page_says_the_sentences_before_the_verdict_table(default_tau):
    page = html.page(default_tau, {"heatmaps": b"", "difference": b"", "rows": b""}, "", "", {"version": "x", "created": "now"})
    words = point_report.sentences(default_tau)
    at = [page.index(html_text(w)) for w in words]
    assert max(at) < page.index("<table")
    meta = point_report.metrics(default_tau)
    assert [c["in_words"] for c in meta["comparisons"]] == words


def html_text(text):
    import html as h

    return h.escape(text)


def _overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_the_rows_figure_legends_lie_outside_the_axes(default_tau):
    fig = figures.rows_figure(default_tau)
    renderer = _drawn(fig)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for leg in legends:
            lb = leg.get_window_extent(renderer)
            assert not _overlaps(lb, box), (lb, box)
            assert fig.bbox.x0 <= lb.x0 and lb.x1 <= fig.bbox.x1 + 1 and fig.bbox.y0 - 1 <= lb.y0  # not cut off
            assert not _overlaps(lb, ax.xaxis.label.get_window_extent(renderer))


def test_the_difference_colorbar_says_what_the_panel_says():
    result = _result(1.5)
    fig = figures.figures(result)["difference"]
    panel, bar = fig.axes
    assert panel.get_title() == r"$A^{\mathrm{spatial}} - A^{\mathrm{distance}}$"
    assert bar.get_ylabel() == panel.get_title() + " (weight difference)"


def test_several_difference_panels_share_the_reference_and_the_order_of_the_colorbar(default_tau):
    fig = figures.figures(default_tau)["difference"]
    *panels, bar = fig.axes
    ref = r" - A^{\mathrm{distance}}$"
    assert [p.get_title() for p in panels] == [r"$A^{\mathrm{spatial}}" + ref, r"$A^{\mathrm{focused}}" + ref]
    assert bar.get_ylabel().startswith(r"$A^{\mathrm{kind}}" + ref)


def test_the_plots_difference_colorbar_defaults_to_its_title():
    from hypviz.plots import attention as pa

    a, b = np.full((3, 4), 0.25), np.array([[0.4, 0.2, 0.2, 0.2]] * 3)
    fig = pa.difference_map_mpl(a, b, title="$A^x - A^y$")
    assert fig.axes[1].get_ylabel() == "$A^x - A^y$ (weight difference)"
    fig = pa.difference_maps_mpl([(a, b)], ["$A^x - A^y$"])
    assert fig.axes[-1].get_ylabel() == "$A^x - A^y$ (weight difference)"


def _shown_px(fig):
    """The smallest drawn text of ``fig``, in screen pixels, written at the reports' dpi and shown at most 780 px wide."""
    from matplotlib.text import Text

    renderer = _drawn(fig)
    width_px = fig.get_size_inches()[0] * figures.DPI
    scale = min(1.0, figures.SHOWN_WIDTH_PX / width_px)
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0]
    for ax in fig.axes:
        sizes += [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text().strip()]
    return min(sizes) * figures.DPI / 72 * scale


def test_every_text_of_the_report_figures_is_readable_at_800_px(default_tau):
    for name, fig in figures.figures(default_tau).items():
        assert _shown_px(fig) >= figures.MIN_TEXT_PX, name
    assert figures.text_pt(10.0) == pytest.approx(72 * 9 * 10.0 / 780)


# --------------------------------------------------------------------------- #
# the model report
# --------------------------------------------------------------------------- #
@pytest.fixture(scope="module")
def layers():
    torch.manual_seed(0)
    k, d = 2.0, 4
    model = Encoder(
        [StandInAttention(d + 1, d, 2, k, "linear_focused", power_k=3.0), StandInAttention(d + 1, d, 2, k, "full")]
    ).double()
    x = lifted_input(20, d, k, dtype=torch.float64)
    with capture.attention(model) as cap:
        model(x)
    return model_report.analyse(cap.layers, device="cpu", progress=False)


def test_each_layer_is_said_in_words_with_its_default_temperature(layers, tmp_path):
    focused, full = layers
    assert focused.default_temperature and not full.default_temperature
    words = model_report.layer_sentence(focused)
    assert words.startswith("At hypviz's default tau = sqrt(d) = 2 (d = 4; not a temperature you gave), the layer's "
                            "focused (Hypformer, linear) map ")
    assert "For comparison, the spatial " in words
    assert model_report.layer_sentence(full).startswith("The layer's map is the distance softmax itself")
    lines = model_report.summary(layers, tmp_path, ["report.html"]).splitlines()
    assert lines[2] == f"    in words: {words}" and lines[3].startswith("    head 0:")
    page = html.model_page(layers, b"", {"version": "x", "created": "now"})
    assert html_text(words) in page and page.index(html_text(words)) < page.index("<table")
    assert "at hypviz's default &tau; = &radic;d = 2, not the layer's" in page  # beside the focused layer's verdicts
    assert [e["in_words"] for e in model_report.metrics(layers, {})["layers"]] == [words, model_report.layer_sentence(full)]


def test_the_model_page_shows_the_family_detail_the_step_checked_and_why_not_verified(layers):
    focused, full = layers
    shown = dataclasses.replace(full, record=dataclasses.replace(full.record, detail="with RoPE",
                                                                  checked="per-head centroids entering final_linear"))
    reason = "the aggregation step <by a learned map> is not modelled"
    unverified = dataclasses.replace(focused, own=None, record=dataclasses.replace(
        focused.record, verify_note=f"not verified: {reason}", verify_error=None))
    assert not unverified.verified and unverified.reason == reason
    page = html.model_page([shown, unverified], b"", {"version": "x", "created": "now"})
    words = page[page.index("In words"):page.index("<table")]
    assert "full (with RoPE)" in words and "step checked: per-head centroids entering final_linear" in words
    assert "not verified</span>: the aggregation step &lt;by a learned map&gt; is not modelled" in words
    assert "nothing is said about the layer&#x27;s own map" in words
    layers_table = page[page.index("<h2>Layers</h2>"):]
    assert "<th class=\"l\">detail</th>" in layers_table and "with RoPE" in layers_table
    assert "per-head centroids entering final_linear" in layers_table
    assert "not verified: the aggregation step &lt;by a learned map&gt; is not modelled" in layers_table


def test_the_model_figure_legends_lie_beside_the_data_and_read_at_800_px(layers):
    fig = figures.model_figure(layers)
    renderer = _drawn(fig)
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 4
    for leg in legends:
        lb = leg.get_window_extent(renderer)
        assert not any(_overlaps(lb, box) for box in boxes)
        assert lb.x1 <= fig.bbox.x1 + 1
    assert _shown_px(fig) >= figures.MIN_TEXT_PX


def test_a_far_ratio_in_a_table_says_what_it_means():
    assert html.ratio_html(1.72, "distance") == "1.72" and html.ratio_html(None, "distance") == "n/a"
    assert html.ratio_html(2060.4, "distance") == "2.06e+03 <small>(the distance map is nearly uniform here)</small>"
