"""The landing page's headline figure (``docs/headline.png``): drawn by ``scripts/headline.py``, readable at its shown size.

Readable: every tick label and legend text is at least ``MIN_SHOWN_PX`` CSS pixels when the figure
fills the landing page's column (``SHOWN_PX`` at a 1280 px window); the committed file holds twice
those pixels, so that a click enlarges it (``tests/test_layout.py`` clicks it in the browser).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hypviz_headline_script", ROOT / "scripts" / "headline.py")
assert _spec is not None and _spec.loader is not None  # a .py path: a spec with a loader
headline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(headline)


@pytest.fixture(scope="module")
def figure():
    """The headline figure as the script draws it (its 21 comparisons of 128 x 256 maps: a few seconds)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = headline.figure()
    FigureCanvasAgg(fig).draw()
    return fig


def _texts(fig):
    """(what, text) for every tick label and legend entry of ``fig``."""
    for i, ax in enumerate(fig.axes):
        for tick in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
            if tick.get_text():
                yield f"axes {i} tick {tick.get_text()!r}", tick
        legend = ax.get_legend()
        for text in legend.get_texts() if legend is not None else []:
            yield f"axes {i} legend {text.get_text()!r}", text


def test_ticks_and_legends_are_readable_at_the_shown_width(figure):
    fig = figure
    assert tuple(fig.get_size_inches()) == (headline.WIDTH_IN, headline.HEIGHT_IN)
    texts = list(_texts(fig))
    assert sum("legend" in what for what, _ in texts) >= 3 + 2 + 3, [w for w, _ in texts]  # every panel's legend
    small = [f"{what}: {headline.shown_px(t.get_fontsize()):.1f} px" for what, t in texts
             if headline.shown_px(t.get_fontsize()) < headline.MIN_SHOWN_PX]
    assert not small, small


def test_no_legend_covers_a_curve(figure):
    """Each legend's box, in display coordinates, holds no point of its panel's curves."""
    import numpy as np

    fig = figure
    renderer = fig.canvas.get_renderer()
    for i, ax in enumerate(fig.axes):
        box = ax.get_legend().get_window_extent(renderer)
        for line in ax.get_lines():
            xy = line.get_xydata()
            if line.get_transform() != ax.transData:  # a threshold line across the panel: the legend may cross it
                continue
            shown = ax.transData.transform(xy[np.isfinite(xy).all(axis=1)])
            inside = (shown[:, 0] > box.x0) & (shown[:, 0] < box.x1) & (shown[:, 1] > box.y0) & (shown[:, 1] < box.y1)
            assert not inside.any(), f"axes {i}: the legend covers {line.get_label()!r} at {xy[inside][:3]}"


def test_the_committed_figure_holds_twice_the_shown_pixels():
    from PIL import Image

    with Image.open(ROOT / "docs" / "headline.png") as im:
        width, height = im.size
    assert abs(width - 2 * headline.SHOWN_PX) <= 2, width
    assert abs(height / width - headline.HEIGHT_IN / headline.WIDTH_IN) < 0.03, (width, height)
