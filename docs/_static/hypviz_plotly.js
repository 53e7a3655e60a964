/* Draws the plotly figures of a page of the hypviz site (see docs/_ext/hypviz_site.py).
 * Each figure is a <div class="hypviz-plotly"> followed by its JSON in a
 * <script type="application/json" class="hypviz-plotly-data" data-for="DIV-ID">.  plotly.js is the
 * site's local _static/plotly.min.js; figures are drawn once MathJax (if the page loads it) has
 * started, so that LaTeX in figure titles is typeset.  Frames are passed to Plotly.newPlot, so
 * sliders and animations work.
 *
 * Figures fit the text column: a figure is as wide as the column (config.responsive; a stored
 * layout.width is dropped), and a figure of several panels side by side whose panels would be
 * narrower than MIN_PANEL px is redrawn with its panels stacked one under the other (each panel
 * the column's width, its subplot title above it, its colour bar beside it; legend and sliders
 * keep their distance below the plot).  The decision is made again when the column's width
 * changes (window resized), so nothing scrolls sideways at any width.  The toolbar (modebar) sits
 * in a strip above the figure (CSS), never over its title. */
(function () {
  "use strict";
  var MIN_PANEL = 260; // px: narrower panels get stacked
  var GAP = 115; // px between stacked panels: room for a panel's x-axis title and the next panel's subplot title

  function mathjaxReady() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      return mj.startup.promise.catch(function () {});
    }
    return Promise.resolve();
  }

  function clone(obj) {
    return JSON.parse(JSON.stringify(obj));
  }

  // the panels of a figure: each cartesian x axis (with its y axis) and each 3-D scene, with its domain
  function panels(layout) {
    var out = [];
    Object.keys(layout).forEach(function (key) {
      var m = /^xaxis(\d*)$/.exec(key);
      if (m) {
        var x = layout[key] || {};
        var y = layout["yaxis" + m[1]] || {};
        if (x.overlaying) { return; }
        out.push({ kind: "xy", x: key, y: "yaxis" + m[1], ref: "x" + m[1], dx: x.domain || [0, 1], dy: y.domain || [0, 1] });
      }
      var s = /^scene(\d*)$/.exec(key);
      if (s) {
        var d = (layout[key] || {}).domain || {};
        out.push({ kind: "scene", key: key, ref: key, dx: d.x || [0, 1], dy: d.y || [0, 1] });
      }
    });
    out.sort(function (a, b) { return a.dx[0] - b.dx[0]; });
    return out;
  }

  // panels side by side in one row (same vertical domain, disjoint horizontal domains)
  function oneRow(ps) {
    if (ps.length < 2) { return false; }
    for (var i = 1; i < ps.length; i++) {
      if (Math.abs(ps[i].dy[0] - ps[0].dy[0]) > 1e-6 || Math.abs(ps[i].dy[1] - ps[0].dy[1]) > 1e-6) { return false; }
      if (ps[i].dx[0] < ps[i - 1].dx[1] - 1e-6) { return false; }
    }
    return true;
  }

  // the layout (and traces) with the panels of one row stacked vertically, top to bottom in reading order
  function stacked(fig, ps) {
    var layout = clone(fig.layout || {});
    var data = clone(fig.data || []);
    var margin = layout.margin || {};
    var top = margin.t === undefined ? 100 : margin.t;
    var bottom = margin.b === undefined ? 80 : margin.b;
    var oldHeight = layout.height || 525;
    var panelHeight = Math.max(260, (oldHeight - top - bottom) * (ps[0].dy[1] - ps[0].dy[0]));
    var n = ps.length;
    var area = n * panelHeight + (n - 1) * GAP; // the new plot area's height, px
    var oldArea = Math.max(1, oldHeight - top - bottom);
    var bands = ps.map(function (p, i) {
      var hi = 1 - (i * (panelHeight + GAP)) / area;
      var lo = 1 - (i * (panelHeight + GAP) + panelHeight) / area;
      return [Math.max(0, lo), Math.min(1, hi)];
    });
    ps.forEach(function (p, i) {
      if (p.kind === "xy") {
        layout[p.x] = Object.assign({}, layout[p.x] || {}, { domain: [0, 1] });
        layout[p.y] = Object.assign({}, layout[p.y] || {}, { domain: bands[i] });
      } else {
        layout[p.key] = Object.assign({}, layout[p.key] || {}, { domain: { x: [0, 1], y: bands[i] } });
      }
    });
    var panelOf = function (x) {
      for (var i = 0; i < n; i++) {
        if (x >= ps[i].dx[0] - 1e-6 && x <= ps[i].dx[1] + 1e-6) { return i; }
      }
      return -1;
    };
    // subplot titles (paper annotations above the row) follow their panel
    (layout.annotations || []).forEach(function (a) {
      if ((a.xref || "paper") !== "paper" || (a.yref || "paper") !== "paper") { return; }
      var i = panelOf(a.x === undefined ? 0.5 : a.x);
      var y = a.y === undefined ? 0.5 : a.y;
      if (i >= 0 && y >= ps[i].dy[1] - 1e-6) {
        a.x = 0.5;
        a.y = bands[i][1];
      } else if (y < 0) {
        a.y = (y * oldArea) / area; // below the plot: keep its distance in px
      }
    });
    // colour bars beside their own panel
    data.forEach(function (t) {
      var ref = t.type && /3d|surface|mesh|cone|streamtube|volume|isosurface/.test(t.type) ? (t.scene || "scene") : (t.xaxis || "x");
      var i = -1;
      ps.forEach(function (p, j) { if (p.ref === ref) { i = j; } });
      if (i >= 0 && (t.colorbar || t.showscale) && t.showscale !== false) {
        t.colorbar = Object.assign({}, t.colorbar || {}, {
          x: 1.02, xanchor: "left", y: (bands[i][0] + bands[i][1]) / 2, yanchor: "middle",
          len: bands[i][1] - bands[i][0], lenmode: "fraction",
        });
      }
      if (i >= 0 && t.marker && (t.marker.colorbar || t.marker.showscale) && t.marker.showscale !== false) {
        t.marker.colorbar = Object.assign({}, t.marker.colorbar || {}, {
          x: 1.02, xanchor: "left", y: (bands[i][0] + bands[i][1]) / 2, yanchor: "middle",
          len: bands[i][1] - bands[i][0], lenmode: "fraction",
        });
      }
    });
    // shared colour axes (layout.coloraxisN.colorbar) beside the panel of the first trace that uses them
    var placed = {};
    data.forEach(function (t) {
      var ax = t.coloraxis || (t.marker && t.marker.coloraxis);
      if (!ax || placed[ax] || !layout[ax]) { return; }
      var ref = t.scene || t.xaxis || "x";
      ps.forEach(function (p, j) {
        if (p.ref === ref && !placed[ax]) {
          placed[ax] = true;
          layout[ax] = Object.assign({}, layout[ax], {
            colorbar: Object.assign({}, layout[ax].colorbar || {}, {
              x: 1.02, xanchor: "left", y: (bands[j][0] + bands[j][1]) / 2, yanchor: "middle",
              len: bands[j][1] - bands[j][0], lenmode: "fraction",
            }),
          });
        }
      });
    });
    // legend, sliders and menus below the plot keep their distance from it in px
    var below = function (obj) {
      if (obj && typeof obj.y === "number" && obj.y < 0) { obj.y = (obj.y * oldArea) / area; }
    };
    below(layout.legend);
    (layout.sliders || []).forEach(below);
    (layout.updatemenus || []).forEach(below);
    margin = Object.assign({}, margin);
    margin.r = Math.max(margin.r || 0, (data.some(function (t) { return t.colorbar || (t.marker && (t.marker.colorbar || t.marker.showscale)); }) || Object.keys(placed).length) ? 90 : 20);
    layout.margin = margin;
    layout.height = Math.round(top + area + bottom);
    delete layout.width;
    return { data: data, layout: layout };
  }

  function figureFor(fig, width) {
    var layout = Object.assign({}, fig.layout || {});
    delete layout.width; // as wide as the column
    layout.autosize = true;
    var ps = panels(layout);
    if (oneRow(ps)) {
      var widest = 0;
      ps.forEach(function (p) { widest = Math.max(widest, (p.dx[1] - p.dx[0]) * width); });
      var narrowest = Math.min.apply(null, ps.map(function (p) { return (p.dx[1] - p.dx[0]) * width; }));
      if (narrowest < MIN_PANEL) {
        var s = stacked({ data: fig.data, layout: layout }, ps);
        return { data: s.data, layout: s.layout, stacked: true };
      }
    }
    return { data: fig.data || [], layout: layout, stacked: false };
  }

  function draw(script) {
    var div = document.getElementById(script.getAttribute("data-for"));
    if (!div || div.getAttribute("data-drawn")) {
      return Promise.resolve();
    }
    var fig = JSON.parse(script.textContent);
    var config = Object.assign({ responsive: true, displaylogo: false }, fig.config || {});
    config.responsive = true;
    var shown = figureFor(fig, div.clientWidth);
    div.style.width = "100%";
    div.style.height = shown.layout.height ? shown.layout.height + "px" : div.style.height;
    div.setAttribute("data-drawn", "pending");
    div.setAttribute("data-stacked", shown.stacked ? "yes" : "no");
    div._hypvizFigure = fig;
    div._hypvizWidth = div.clientWidth;
    return Plotly.newPlot(div, {
      data: shown.data,
      layout: shown.layout,
      frames: fig.frames || [],
      config: config,
    }).then(function () {
      div.setAttribute("data-drawn", "yes");
    });
  }

  // a column that changes width by a lot may need the other arrangement (stacked / side by side):
  // the figure is drawn again from its stored JSON
  function redrawIfNeeded(div) {
    var fig = div._hypvizFigure;
    if (!fig || div.getAttribute("data-drawn") !== "yes") { return Promise.resolve(); }
    var shown = figureFor(fig, div.clientWidth);
    if ((div.getAttribute("data-stacked") === "yes") === shown.stacked) { return Promise.resolve(); }
    Plotly.purge(div);
    div.removeAttribute("data-drawn");
    var script = document.querySelector('script.hypviz-plotly-data[data-for="' + div.id + '"]');
    return script ? draw(script) : Promise.resolve();
  }

  function drawAll() {
    if (typeof window.Plotly === "undefined") {
      console.error("hypviz: plotly.js did not load; the interactive figures cannot be drawn");
      return;
    }
    var scripts = Array.prototype.slice.call(document.querySelectorAll("script.hypviz-plotly-data"));
    mathjaxReady().then(function () {
      return Promise.all(scripts.map(draw));
    }).then(function () {
      document.documentElement.setAttribute("data-hypviz-plots", "drawn");
      var timer = null;
      window.addEventListener("resize", function () {
        clearTimeout(timer);
        timer = setTimeout(function () {
          Array.prototype.forEach.call(document.querySelectorAll("div.hypviz-plotly"), redrawIfNeeded);
        }, 150);
      });
    });
  }
  if (document.readyState === "complete") {
    drawAll();
  } else {
    window.addEventListener("load", drawAll);
  }
})();
