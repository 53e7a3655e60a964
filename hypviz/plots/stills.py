"""Stills of plotly figures and the notebook output that carries both.

:func:`still_png` draws a plotly figure's default state (its sliders at their starting
positions) with matplotlib, as a small palette PNG; :func:`bundle` and :func:`show` make ONE
notebook output holding the figure JSON, exactly as plotly's ``"plotly_mimetype"`` renderer builds
it, and that PNG: the site and JupyterLab draw the interactive figure, a code host shows the PNG.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import TYPE_CHECKING, Any

import numpy as np

import hypviz.plots.style as style
from hypviz.base import validate

if TYPE_CHECKING:  # plotly and matplotlib are imported lazily, inside the functions
    import plotly.graph_objects as go

__all__ = ["PLOTLY_MIME", "still_png", "bundle", "show", "trace_array"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"


# --------------------------------------------------------------------------- #
# the still: the default state drawn with matplotlib
# --------------------------------------------------------------------------- #
_DASHES = {None: "-", "solid": "-", "dash": "--", "dot": ":", "dashdot": "-.", "longdash": "--"}
_SYMBOLS = {None: "o", "circle": "o", "square": "s", "diamond": "D", "cross": "P", "x": "X", "star": "*",
            "triangle-up": "^"}


def _mpl_text(text: Any) -> str:
    """Plotly's HTML-ish text as matplotlib text: ``<br>`` a new line, ``<sub>``/``<sup>`` mathtext, other tags dropped."""
    if not text:
        return ""
    s = str(text)
    s = re.sub(r"<br\s*/?>", "\n", s)
    s = re.sub(r"<sup>(.*?)</sup>", lambda m: "$^{\\mathrm{" + _math_escape(m.group(1)) + "}}$", s)
    s = re.sub(r"<sub>(.*?)</sub>", lambda m: "$_{\\mathrm{" + _math_escape(m.group(1)) + "}}$", s)
    s = re.sub(r"<[^>]+>", "", s)
    return html.unescape(s)


def _math_escape(s: str) -> str:
    s = re.sub(r"<[^>]+>", "", html.unescape(s))
    out = []
    for ch in s:
        if ch in "{}_^$%#&\\":
            out.append("\\" + ch)
        elif ch == " ":
            out.append("\\ ")
        else:
            out.append(ch)
    return "".join(out)


def _colormap(scale: Any):
    from matplotlib.colors import LinearSegmentedColormap, to_rgb

    stops = []
    for pos, colour in scale:
        c = str(colour)
        if c.startswith("rgb"):
            rgb = tuple(float(v) / 255.0 for v in re.findall(r"[\d.]+", c)[:3])
        else:
            rgb = to_rgb(c)
        stops.append((float(pos), rgb))
    return LinearSegmentedColormap.from_list("plotly", stops)


def trace_array(v: Any) -> np.ndarray:
    """A trace's array as float64 numpy (``None`` is NaN); plotly's typed arrays (``bdata``) decoded."""
    if v is None:
        return np.zeros(0)
    if isinstance(v, dict) and "bdata" in v:
        raw = v["bdata"]
        raw = base64.b64decode(raw) if isinstance(raw, str) else bytes(raw)
        arr = np.frombuffer(raw, dtype=np.dtype(v["dtype"])).astype(np.float64)
        shape = v.get("shape")
        return arr.reshape([int(n) for n in str(shape).split(",")]) if shape is not None else arr
    if isinstance(v, np.ndarray):
        return v.astype(np.float64)
    return np.array([np.nan if x is None else x for x in np.asarray(v, dtype=object).ravel()], dtype=float).reshape(
        np.shape(v))


def _axis_key(ref: str | None, letter: str) -> str:
    ref = ref or letter
    return f"{letter}axis" + ref[1:]


def _draw_trace(t: dict, ax: Any, panels: Any, coloraxis: dict, colour_images: list[tuple[Any, Any, dict]],
                handles: list[Any]) -> None:
    """Draw one visible trace ``t`` (heatmap, lines, markers) on ``ax``; note its colour bar and legend handle."""
    from matplotlib.colors import Normalize

    if t.get("type") == "heatmap":
        z = trace_array(t["z"])
        cmap = _colormap(t["colorscale"])
        norm = Normalize(t.get("zmin", np.nanmin(z)), t.get("zmax", np.nanmax(z)))
        image = ax.pcolormesh(np.arange(z.shape[1] + 1) - 0.5, np.arange(z.shape[0] + 1) - 0.5, z, cmap=cmap,
                              norm=norm, rasterized=True)
        if t.get("showscale", True) is not False:
            colour_images.append((image, [ax], t.get("colorbar", {})))
        return
    mode = t.get("mode", "lines")
    x, y = trace_array(t.get("x")), trace_array(t.get("y"))
    line = t.get("line", {})
    marker = t.get("marker", {})
    label = _mpl_text(t.get("name")) if t.get("showlegend", True) is not False else None
    if "lines" in mode:
        (h,) = ax.plot(x, y, color=line.get("color", style.CYCLE[0]), lw=0.75 * float(line.get("width", 2)),
                       ls=_DASHES.get(line.get("dash"), "-"),
                       marker="o" if "markers" in mode else None,
                       ms=0.75 * float(marker.get("size", 6)) if "markers" in mode else 0)
        if label:
            h.set_label(label)
            handles.append(h)
        return
    colour = marker.get("color", style.CYCLE[0])
    size = marker.get("size", 6)
    symbol = _SYMBOLS.get(marker.get("symbol"), "o")
    edge = marker.get("line", {})
    diameter = 0.75 * np.asarray(trace_array(size) if isinstance(size, list) else size)
    kwargs: dict[str, Any] = dict(marker=symbol, s=diameter**2, linewidths=0.75 * float(edge.get("width", 0.5)), zorder=3)
    if isinstance(colour, list):
        cax = coloraxis if marker.get("coloraxis") else marker
        kwargs.update(c=trace_array(colour), cmap=_colormap(cax.get("colorscale", [[0, "#440154"], [1, "#fde725"]])),
                      norm=Normalize(cax.get("cmin"), cax.get("cmax")), edgecolors=edge.get("color", "#333333"))
    elif str(colour).startswith("rgba(0,0,0,0)"):
        kwargs.update(facecolors="none", edgecolors=edge.get("color", style.BLACK))
    else:
        kwargs.update(color=colour, edgecolors=edge.get("color", colour))
    h = ax.scatter(x, y, **kwargs)
    if isinstance(colour, list) and marker.get("coloraxis"):  # one colour bar per colour axis (drawn below)
        colour_images.append((h, list(panels), coloraxis.setdefault("colorbar", {})))
    if label:
        h.set_label(label)
        handles.append(h)


def _style_axes(name: str, ax: Any, layout: dict) -> None:
    """Axis ``name``'s scales, ranges, labels, direction, aspect, grid and subplot title, from the plotly layout."""
    xa = layout.get(_axis_key(name, "x"), {})
    ya = layout.get(_axis_key("y" + name[1:], "y"), {})
    for spec, setter_scale, setter_lim, setter_label in ((xa, ax.set_xscale, ax.set_xlim, ax.set_xlabel),
                                                        (ya, ax.set_yscale, ax.set_ylim, ax.set_ylabel)):
        log = spec.get("type") == "log"
        if log:
            setter_scale("log")
        rng = spec.get("range")
        if rng:
            setter_lim(*(10.0 ** np.asarray(rng) if log else rng))
        setter_label(_mpl_text((spec.get("title") or {}).get("text")))
    if ya.get("autorange") == "reversed":
        ax.invert_yaxis()
    if xa.get("autorange") == "reversed":
        ax.invert_xaxis()
    if ya.get("scaleanchor"):
        ax.set_aspect("equal")
    if not ax.collections or not any(type(c).__name__ == "QuadMesh" for c in ax.collections):
        ax.grid(True, alpha=0.3)  # no grid lines over a heatmap
    domain = xa.get("domain", [0, 1])
    for ann in layout.get("annotations", []):
        if ann.get("xref") == "paper" and domain[0] <= float(ann.get("x", -1)) <= domain[1]:
            ax.set_title(_mpl_text(ann.get("text")), fontsize=9)


def still_png(fig: go.Figure, *, dpi: int = 72, width_px: int = 1150) -> bytes:
    """A PNG of the figure's default state (the sliders' starting positions), drawn with matplotlib.

    Handles what this module draws: one row of 2-D subplots holding scatter traces (lines and
    markers, colours from a colour axis) and heatmaps, log or linear axes with fixed ranges, equal
    aspect, subplot titles, colour bars, the legend, the figure title; the sliders' starting
    values are written under the title.  Hidden traces (``visible=False``) are not drawn.  The
    PNG carries no metadata (the same figure gives the same bytes) and a 256-colour palette
    (pillow, which matplotlib depends on), a third of the RGBA size: notebooks must stay small.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dpi = int(validate.positive(dpi, "dpi"))
    width_px = int(validate.positive(width_px, "width_px"))
    data = fig.to_dict()
    layout = data.get("layout", {})
    traces = [t for t in data.get("data", []) if t.get("visible", True) is True]
    axes_names = sorted({t.get("xaxis", "x") for t in data.get("data", [])}, key=lambda s: int(s[1:] or 1))
    height = float(layout.get("height") or 500)
    mfig = Figure(figsize=(width_px / dpi, 0.9 * height / dpi), dpi=dpi, layout="constrained")
    panels = mfig.subplots(1, len(axes_names), squeeze=False)[0]
    by_name = dict(zip(axes_names, panels))
    coloraxis = layout.get("coloraxis", {})
    colour_images: list[tuple[Any, Any, dict]] = []
    handles: list[Any] = []

    for t in traces:
        _draw_trace(t, by_name[t.get("xaxis", "x")], panels, coloraxis, colour_images, handles)

    for name, ax in by_name.items():
        _style_axes(name, ax, layout)

    seen = set()
    for artist, axs, bar in colour_images:
        key = id(bar)
        if key in seen:
            continue
        seen.add(key)
        cb = mfig.colorbar(artist, ax=axs, shrink=0.85)
        cb.set_label(_mpl_text((bar.get("title") or {}).get("text")))
    title = _mpl_text(re.sub(r"<br><sup>(.*)</sup>$", "<br>\\1", str((layout.get("title") or {}).get("text") or "")))
    state = []
    for slider in layout.get("sliders", []):
        steps = slider.get("steps", [])
        if steps:
            prefix = _mpl_text((slider.get("currentvalue") or {}).get("prefix", ""))
            state.append(f"{prefix}{steps[int(slider.get('active', 0))].get('label', '')}")
    if state:
        title += "\n(static still at " + ", ".join(state) + "; the interactive figure has sliders)"
    mfig.suptitle(title, fontsize=10)
    if handles:
        mfig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)
    FigureCanvasAgg(mfig)
    raw = io.BytesIO()
    mfig.savefig(raw, format="png", dpi=dpi, metadata={"Software": None})
    return _palette_png(raw.getvalue())


def _palette_png(png: bytes) -> bytes:
    """The same picture with a 256-colour palette (a third of the bytes; notebooks must stay small)."""
    try:
        from PIL import Image
    except ImportError:  # pillow comes with matplotlib; without it, keep the RGBA PNG
        return png
    with Image.open(io.BytesIO(png)) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        small.save(out, format="PNG", optimize=True)
    return out.getvalue()


# --------------------------------------------------------------------------- #
# one output, two mimetypes
# --------------------------------------------------------------------------- #
def bundle(fig: go.Figure, still: bytes | None = None, *, dpi: int = 72) -> dict:
    """The display bundle: the figure JSON exactly as plotly's ``"plotly_mimetype"`` renderer makes it, plus a PNG.

    ``still`` is PNG bytes (default: :func:`still_png` of ``fig``); it is stored base64-encoded
    under ``"image/png"``, the form a notebook keeps images in.
    """
    import plotly.graph_objects as go
    import plotly.io as pio

    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly.graph_objects.Figure, got {type(fig).__name__}")
    png = still_png(fig, dpi=dpi) if still is None else still
    if not isinstance(png, (bytes, bytearray)) or not bytes(png).startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("still must be the bytes of a PNG image (or None to draw one)")
    out = dict(pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict()))
    out["image/png"] = base64.b64encode(bytes(png)).decode("ascii")
    return out


def show(fig: go.Figure, still: bytes | None = None, *, dpi: int = 72) -> None:
    """Display ``fig`` as ONE output with both mimetypes (:func:`bundle`): interactive where plotly runs, a PNG elsewhere."""
    from IPython.display import display

    display(bundle(fig, still, dpi=dpi), raw=True)
