"""The files of the two reports, written into a folder: the last of the reports' one-way chain.

``point_report`` -> ``model_report`` -> ``figures`` -> ``html`` -> ``writing``: the analysis
(:mod:`hypviz.reports.point_report`, :mod:`hypviz.reports.model_report`) computes every number, the
figures (:mod:`hypviz.reports.figures`) draw them, the pages (:mod:`hypviz.reports.html`) lay them out,
and this module puts them on disk.  No module of the chain imports one after it.

:func:`write_point_report` writes the report of ``hypviz compare QUERIES KEYS`` and ``hypviz demo``
(``report.html``, ``metrics.json``, ``rows.npz``, ``heatmaps.png``, ``difference.png``, ``rows.png``);
:func:`write_model_report` that of ``hypviz compare CAPTURE.pt`` (``report.html``, ``metrics.json``,
``rows.npz``, ``layers.png``).  Both write into a folder that exists (the command's temporary folder,
:func:`hypviz.reports.publishing.produce`) and return the sorted names of the files in it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hypviz.reports import figures, html, model_report, point_report

__all__ = ["write_point_report", "write_model_report"]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_point_report(result: point_report.Result, folder: Path, options: dict[str, Any] | None = None) -> list[str]:
    """Write the compare report of ``result`` into ``folder`` (see :mod:`hypviz.reports.point_report`).

    ``options`` are stored with the inputs in ``metrics.json``.  Returns the sorted names of the
    files in ``folder``.
    """
    import plotly.io as pio
    import plotly.offline

    folder = Path(folder)
    images = {name: figures.png_bytes(fig) for name, fig in figures.figures(result).items()}
    for name, data in images.items():
        (folder / f"{name}.png").write_bytes(data)
    meta = point_report.metrics(result, options)
    _write_json(folder / "metrics.json", meta)
    np.savez_compressed(folder / "rows.npz", **point_report.row_arrays(result))  # type: ignore[arg-type]  # numpy's stub: a ** mapping might name allow_pickle
    div = pio.to_html(
        figures.plotly_rows(result),
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        div_id="hypviz-rows",
        config={"displaylogo": False, "responsive": True},
    )
    meta["inputs_file"] = (folder / "inputs.npz").exists()
    text = html.page(result, images, div, plotly.offline.get_plotlyjs(), meta)
    (folder / "report.html").write_text(text, encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())


def write_model_report(results: Sequence[model_report.LayerResult], folder: Path, meta: dict[str, Any]) -> list[str]:
    """Write the model report of ``results`` (``report.html``, ``metrics.json``, ``rows.npz``, ``layers.png``)
    into ``folder``; ``meta`` (``path``, ``layers``) is stored as the inputs.  Returns the sorted names of the
    files in ``folder``."""
    folder = Path(folder)
    png = figures.png_bytes(figures.model_figure(results), dpi=90)
    (folder / "layers.png").write_bytes(png)
    data = model_report.metrics(results, meta)
    _write_json(folder / "metrics.json", data)
    np.savez_compressed(folder / "rows.npz", **model_report.row_arrays(results))  # type: ignore[arg-type]  # numpy's stub: a ** mapping might name allow_pickle
    page = html.model_page(results, png, {**meta, "version": data["version"], "created": data["created"]})
    (folder / "report.html").write_text(page, encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())
