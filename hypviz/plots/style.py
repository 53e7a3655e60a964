"""One style for every figure: Okabe and Ito's colour-blind-safe palette, markers, figure defaults.

Every figure of :mod:`hypviz.plots`, :mod:`hypviz.reports.point_report` and :mod:`hypviz.reports.model_report` takes
its colours from here: series in the order of :data:`CYCLE`, fixed roles (points, geodesics,
the query, bounds) by name, continuous values on :data:`SEQUENTIAL` and signed differences on
:data:`DIVERGING`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BLACK", "ORANGE", "SKY_BLUE", "GREEN", "YELLOW", "BLUE", "VERMILLION", "PURPLE",
    "OKABE_ITO", "CYCLE", "MARKERS", "POINT", "EDGE", "QUERY", "BOUND",
    "SEQUENTIAL", "DIVERGING", "colour", "marker", "new_figure", "notebook_png",
]

BLACK = "#000000"
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
GREEN = "#009E73"  # Okabe and Ito's "bluish green"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"  # Okabe and Ito's "reddish purple"

#: the palette in Okabe and Ito's own order
OKABE_ITO = (BLACK, ORANGE, SKY_BLUE, GREEN, VERMILLION, BLUE, PURPLE, YELLOW)
#: the order of data series, the two strongest contrasts first, black and yellow last
CYCLE = (BLUE, VERMILLION, GREEN, ORANGE, SKY_BLUE, PURPLE, BLACK, YELLOW)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

POINT = BLUE  # points on the hyperboloid and the disks
EDGE = VERMILLION  # geodesics, tree edges
QUERY = VERMILLION  # the query star
BOUND = BLACK  # bounds, thresholds, reference lines

SEQUENTIAL = "viridis"  # weights, norms, any non-negative value
DIVERGING = "RdBu_r"  # signed differences, centred on zero


def colour(i: int) -> str:
    """The ``i``-th series colour (:data:`CYCLE`, repeating)."""
    return CYCLE[i % len(CYCLE)]


def marker(i: int) -> str:
    """The ``i``-th series marker (:data:`MARKERS`, repeating)."""
    return MARKERS[i % len(MARKERS)]


def new_figure(figsize: tuple[float, float]) -> Any:
    """A matplotlib ``Figure`` with constrained layout, not registered with pyplot (no global state)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def notebook_png(fig: Any) -> tuple[str, dict[str, int]] | None:
    """A figure as a notebook's PNG output: twice its pixels, 256 colours, shown at its own size.

    IPython's ``"retina"`` PNG (drawn at twice ``fig.dpi``, tight bounding box, with the ``width``
    and ``height`` of the 1x size as metadata, where the site and Jupyter show it) reduced to a
    256-colour palette (median cut, no dithering: about a third of the bytes; notebooks must stay
    small).  Returns ``(base64 PNG, metadata)``, or ``None`` for an empty figure, as IPython's own
    formatter does; the house preamble registers it for matplotlib figures.
    """
    import base64
    import io

    from IPython.core.pylabtools import retina_figure
    from PIL import Image

    out = retina_figure(fig)
    if out is None:
        return None
    png, metadata = out
    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        buf = io.BytesIO()
        small.save(buf, format="PNG", optimize=True)
    return base64.b64encode(buf.getvalue()).decode("ascii"), metadata
