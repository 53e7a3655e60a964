r"""Draw the landing page's headline figure, ``docs/headline.png`` (also the README's).

    python scripts/headline.py [--out PATH]

The figure is notebook 05's section 4 sweep (the same points and comparisons): ``d = 64``,
``N = 128`` queries and ``M = 256`` keys from ``data.lifted_gaussian`` (seeds 10 and 11, the same
directions at every ``r``), mean norm ``r`` from 0.01 to 10 in half-decades, temperatures
``tau = 8, 80, 800``, each pair compared by ``attention.compare(..., "spatial", "distance")`` and
drawn by :func:`hypviz.plots.sweeps.comparison_sweep_mpl` against ``r^2/tau``.

It is laid out for the width it is shown at: the landing page's text column, :data:`SHOWN_PX`
CSS pixels at a 1280 px window (721 at 800 px).  The gap panel spans the top row, the ratio and
rank panels share the bottom one, and the figure is :data:`WIDTH_IN` inches wide, so that a
font of ``s`` points is shown at

.. math::

    s \cdot \frac{\mathrm{SHOWN\_PX}}{72 \cdot \mathrm{WIDTH\_IN}} \ \text{px}

(tick labels and legends at least :data:`MIN_SHOWN_PX`).  The file holds twice the shown pixels
(``dpi = 2 * SHOWN_PX / WIDTH_IN``), so a click on the landing page enlarges it to its full
resolution, and is reduced to 256 colours like the notebooks' figures.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "headline.png"

SHOWN_PX = 737  # the landing page's text column at a 1280 px window (CSS px)
WIDTH_IN = 7.0  # the figure's width, inches
HEIGHT_IN = 6.2
MIN_SHOWN_PX = 12.0  # the smallest tick label or legend text, shown
FONTS_PT: dict[RcKeyType, float] = {"font.size": 10.0, "xtick.labelsize": 10.0, "ytick.labelsize": 10.0,
                                    "axes.labelsize": 10.0, "axes.titlesize": 11.0, "figure.titlesize": 11.0,
                                    "legend.fontsize": 9.0}
LEGEND_PT = 9.0  # comparison_sweep_mpl's legends are drawn at 8 pt; set to this here

RADII = [10 ** (e / 2) for e in range(-4, 3)]  # 0.01, 0.0316, ..., 10
TAUS = (8.0, 80.0, 800.0)
N_QUERIES, N_KEYS, DIM = 128, 256, 64


def shown_px(points: float) -> float:
    """The CSS pixels a font of ``points`` takes on the landing page: ``points * SHOWN_PX / (72 * WIDTH_IN)``."""
    return points * SHOWN_PX / (72.0 * WIDTH_IN)


def sweep() -> dict[float, list]:
    """``{tau: [Comparison per r in RADII]}``: notebook 05's section 4 comparisons."""
    from hypviz import attention as att
    from hypviz import data

    return {tau: [att.compare(data.lifted_gaussian(N_QUERIES, DIM, r, seed=10), data.lifted_gaussian(N_KEYS, DIM, r, seed=11),
                              "spatial", "distance", temperature=tau) for r in RADII] for tau in TAUS}


def figure(results: dict[float, list] | None = None):
    """The headline figure (a matplotlib ``Figure``, :data:`WIDTH_IN` x :data:`HEIGHT_IN` inches)."""
    import matplotlib

    from hypviz.plots import style, sweeps

    results = sweep() if results is None else results
    with matplotlib.rc_context(FONTS_PT):
        fig = style.new_figure((WIDTH_IN, HEIGHT_IN))
        grid = fig.add_gridspec(2, 2, height_ratios=(1.0, 1.0))
        axes = [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]
        sweeps.comparison_sweep_mpl(
            {rf"$\tau = {tau:g}$": ([r * r / tau for r in RADII], results[tau]) for tau in TAUS},
            xlabel=r"$r^2/\tau$ (dimensionless)",
            title=rf"spatial ($P_a$) vs distance ($P_b$) softmax, $d = {DIM}$, ${N_QUERIES} \times {N_KEYS}$: "
                  r"the curves of three $\tau$ coincide",
            axes=axes,
        )
        # the legends at LEGEND_PT, where no data is: the ratio's above its curves (room made on top),
        # the rank measures' between the Spearman and the top-5 curves
        axes[1].set_ylim(0.0, 1.3)
        places: tuple[dict[str, Any], ...] = ({"loc": "upper left"}, {"loc": "upper center", "ncol": 2},
                                              {"loc": "center right", "bbox_to_anchor": (1.0, 0.59)})
        for ax, where in zip(axes, places):
            legend = ax.get_legend()
            ax.legend(legend.legend_handles, [t.get_text() for t in legend.get_texts()], fontsize=LEGEND_PT, **where)
        # the bottom panels are half as wide: their long y labels on two lines
        axes[1].set_ylabel("TV(P_a, P_b) / TV(P_b, U)\n(ratio of means)".replace("TV(P_a, P_b)", r"$\mathrm{TV}(P_a, P_b)$")
                           .replace("TV(P_b, U)", r"$\mathrm{TV}(P_b, U)$"))
        axes[2].set_ylabel("agreement (fraction of rows)\nor rank correlation")
    return fig


def png(fig) -> bytes:
    """``fig`` as a 256-colour PNG at twice its shown pixels (``dpi = 2 * SHOWN_PX / WIDTH_IN``)."""
    from PIL import Image

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=2 * SHOWN_PX / WIDTH_IN, facecolor="white")
    with Image.open(io.BytesIO(raw.getvalue())) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        small.save(out, format="PNG", optimize=True)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw the landing page's headline figure (docs/headline.png).")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the PNG (default: docs/headline.png)")
    args = parser.parse_args(argv)
    data = png(figure())
    args.out.write_bytes(data)
    print(f"headline.py: wrote {args.out} ({len(data)} bytes; tick labels {shown_px(FONTS_PT['xtick.labelsize']):.1f} px, "
          f"legends {shown_px(LEGEND_PT):.1f} px at {SHOWN_PX} px shown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
