"""hypviz.plots.curves: labelled, non-blank figures; clear errors on bad input; and the naming and
composition rules every public figure function of hypviz.plots follows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from hypviz.plots import curves


def _pixels(fig: Figure) -> np.ndarray:
    fig.set_dpi(40)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3]


def _non_blank(fig: Figure) -> None:
    px = _pixels(fig)
    assert px.std() > 5
    colours = np.unique(px.reshape(-1, 3), axis=0)
    assert len(colours) > 20


def test_public_names():
    assert set(curves.__all__) >= {"error_curves_mpl", "bound_scatter_mpl", "interval_curves_mpl"}
    assert not hasattr(curves, "error_curves") and not hasattr(curves, "bound_scatter")  # one name a function


# the modules of hypviz.plots whose figures follow one naming scheme (explorables: tests/test_plots_explorables.py)
FIGURE_MODULES = ("curves", "attention", "sweeps", "manifold_mpl", "manifold_plotly", "scenes")


def test_every_public_function_is_named_one_way_typed_and_composable():
    import importlib
    import inspect

    for module_name in FIGURE_MODULES:
        module = importlib.import_module(f"hypviz.plots.{module_name}")
        for name in module.__all__:
            obj = getattr(module, name)
            if not inspect.isfunction(obj):
                continue
            sig = inspect.signature(obj)
            assert sig.return_annotation is not inspect.Signature.empty, f"{module_name}.{name}: no return type"
            if name == "crossover" or name.endswith("_scene") or name == "top_attention" \
                    or name == "project_for_display":
                continue
            assert name.endswith(("_mpl", "_plotly")), f"{module_name}.{name}: a figure function named neither _mpl nor _plotly"
            ret = str(sig.return_annotation)
            if name.endswith("_mpl"):
                assert ret in ("Figure", "matplotlib.figure.Figure"), f"{module_name}.{name}: returns {ret}"
                assert {"ax", "axes"} & set(sig.parameters), f"{module_name}.{name}: no ax= or axes="
                assert sig.parameters[({"ax", "axes"} & set(sig.parameters)).pop()].default is None
            else:
                assert ret == "go.Figure", f"{module_name}.{name}: returns {ret}"


def test_error_curves_labels_and_rendering():
    x = np.logspace(-7, -1, 7)
    samples = np.abs(np.random.default_rng(0).normal(size=(7, 5))) * 1e-8 / x[:, None] ** 2
    samples[0, 0] = 0.0  # an exact zero is drawn at the floor
    samples[1, 1] = np.nan  # ignored
    fig = curves.error_curves_mpl(
        x,
        {"textbook, float32": samples, "stable, float64": torch.full((7,), 1e-16)},
        reference_lines={"float64 eps": 2.2e-16},
        title=r"Relative error of $\|x - y\|_L^2$",
    )
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "separation" in ax.get_xlabel() and "(" in ax.get_xlabel()
    assert "relative error" in ax.get_ylabel()
    assert "$" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["textbook, float32", "stable, float64"]
    assert ax.lines[0].get_linestyle() == "--" and ax.lines[1].get_linestyle() == "-"
    assert np.all(ax.lines[0].get_ydata() > 0)
    _non_blank(fig)


def test_bound_scatter_labels_colorbar_and_rendering():
    rng = np.random.default_rng(1)
    bound = 10 ** rng.uniform(-6, -0.5, 500)
    measured = bound * rng.uniform(0.05, 1.0, 500)
    measured[:3] = 0.0
    scale = 10 ** rng.uniform(-2, 1, 500)
    fig = curves.bound_scatter_mpl(bound, measured, color=scale)
    ax, cax = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "tanh" in ax.get_xlabel() and "TV" in ax.get_ylabel()
    assert "norm" in cax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("497 rows") and "3 with a zero" in labels[0]
    assert "y = x" in labels[1]
    line = ax.lines[0]
    assert np.allclose(line.get_xdata(), line.get_ydata())  # the y = x line
    _non_blank(fig)


def test_bound_scatter_without_colour():
    fig = curves.bound_scatter_mpl(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.05, 0.1, 0.3]))
    assert len(fig.axes) == 1
    _non_blank(fig)


def test_curves_compose_into_given_axes():
    fig = Figure(figsize=(9, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    x = np.logspace(-3, 0, 5)
    out = curves.error_curves_mpl(x, {"stable, float64": 1e-16 / x}, ax=left, title="left")
    assert out is fig and left.get_title() == "left" and left.get_yscale() == "log" and len(left.lines) == 1
    rng = np.random.default_rng(2)
    bound = 10 ** rng.uniform(-4, -1, 50)
    out = curves.bound_scatter_mpl(bound, bound * 0.5, color=bound, ax=right)
    assert out is fig and right.get_xscale() == "log" and len(right.collections) == 1
    assert len(fig.axes) == 3  # the two panels and the scatter's colourbar
    _non_blank(fig)
    with pytest.raises(TypeError, match="Axes"):
        curves.error_curves_mpl(x, {"a": x}, ax="left")
    # into a subfigure: drawn there, the root figure returned
    host = Figure(figsize=(9, 4), layout="constrained")
    sub = host.subfigures(1, 2)[1]
    assert curves.bound_scatter_mpl(bound, bound * 0.5, ax=sub.subplots()) is host


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: curves.error_curves_mpl([1.0, -1.0], {"a": [1, 2]}), "positive"),
        (lambda: curves.error_curves_mpl([1.0, 2.0], {}), "at least one"),
        (lambda: curves.error_curves_mpl([1.0, 2.0], {"a": [1, 2, 3]}), "expected shape"),
        (lambda: curves.error_curves_mpl([], {"a": []}), "empty"),
        (lambda: curves.bound_scatter_mpl([0.1, 0.2], [0.1]), "same number"),
        (lambda: curves.bound_scatter_mpl([0.1, 0.2], [0.1, 0.2], color=[1.0]), "one value per point"),
        (lambda: curves.bound_scatter_mpl([0.0, -1.0], [0.1, 0.2]), "no pair"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_interval_curves_are_labelled_with_their_intervals_and_references():
    x = np.array([0.1, 1.0, 10.0])
    y = np.array([0.58, 0.6, 0.67])
    fig = curves.interval_curves_mpl(
        {"20 draws": (x, y, y - 0.01, y + 0.02), "one draw": (torch.tensor(x), torch.tensor([0.6, 0.6, 0.7]))},
        xlabel="norm $r$ (spatial units)", ylabel="ratio", title=r"the ratio $\rho$", references={"first order": 0.577},
    )
    ax = fig.axes[0]
    assert ax.get_xlabel() == "norm $r$ (spatial units)" and ax.get_title() == r"the ratio $\rho$" and ax.get_xscale() == "log"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["20 draws", "first order", "one draw"]
    bars = [c for c in ax.collections if c.get_segments()]          # the error bars: one segment per point
    assert len(bars) == 1
    spans = sorted((seg[0][1], seg[1][1]) for seg in bars[0].get_segments())
    np.testing.assert_allclose(spans, np.stack([y - 0.01, y + 0.02], axis=1))
    assert [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"] == [0.577]
    _non_blank(fig)


def test_interval_curves_refuse_bad_series_and_compose():
    x = np.arange(1.0, 4.0)
    with pytest.raises(ValueError, match="no series"):
        curves.interval_curves_mpl({}, xlabel="x", ylabel="y", title="t")
    with pytest.raises(ValueError, match="one common length"):
        curves.interval_curves_mpl({"a": (x, x[:2])}, xlabel="x", ylabel="y", title="t")
    with pytest.raises(ValueError, match=r"\(x, y\) or \(x, y, lo, hi\)"):
        curves.interval_curves_mpl({"a": (x, x, x)}, xlabel="x", ylabel="y", title="t")
    with pytest.raises(ValueError, match="hold its value"):
        curves.interval_curves_mpl({"a": (x, x, x + 1, x + 2)}, xlabel="x", ylabel="y", title="t")
    host = Figure(figsize=(9, 4), layout="constrained")
    ax0, ax1 = host.subplots(1, 2)
    assert curves.interval_curves_mpl({"a": (x, x)}, xlabel="x", ylabel="y", title="t", xscale="linear", ax=ax1) is host
    assert ax1.get_lines() and not ax0.get_lines()
    with pytest.raises(TypeError):
        curves.interval_curves_mpl({"a": (x, x)}, xlabel="x", ylabel="y", title="t", ax="not an axes")


def test_notebook_png_stores_twice_the_pixels_in_256_colours():
    import base64
    import io

    from PIL import Image

    from hypviz.plots import style

    fig = Figure(figsize=(4.0, 3.0), dpi=80)
    ax = fig.subplots()
    ax.plot([0, 1, 2], [1, 0, 1], color=style.BLUE)
    ax.set_title("a curve")
    b64, meta = style.notebook_png(fig)
    with Image.open(io.BytesIO(base64.b64decode(b64))) as im:
        assert im.mode == "P" and len(im.getcolors(256)) <= 256
        assert im.size == (2 * meta["width"] + im.size[0] % 2, 2 * meta["height"] + im.size[1] % 2)
    assert 0.8 * 320 < meta["width"] <= 330 and 0.8 * 240 < meta["height"] <= 250   # 4 x 3 in at 80 dpi, tight box
    assert style.notebook_png(Figure()) is None                                        # an empty figure shows nothing
