/* Draws the plotly figures of a page of the hypviz site (see docs/_ext/hypviz_site.py).
 * Each figure is a <div class="hypviz-plotly"> followed by its JSON in a
 * <script type="application/json" class="hypviz-plotly-data" data-for="DIV-ID">.  plotly.js is the
 * site's local _static/plotly.min.js; figures are drawn once MathJax (if the page loads it) has
 * started, so that LaTeX in figure titles is typeset.  Frames are passed to Plotly.newPlot, so
 * sliders and animations work. */
(function () {
  "use strict";
  function mathjaxReady() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      return mj.startup.promise.catch(function () {});
    }
    return Promise.resolve();
  }
  function draw(script) {
    var div = document.getElementById(script.getAttribute("data-for"));
    if (!div || div.getAttribute("data-drawn")) {
      return Promise.resolve();
    }
    var fig = JSON.parse(script.textContent);
    var config = Object.assign({ responsive: true, displaylogo: false }, fig.config || {});
    var layout = Object.assign({}, fig.layout || {});
    // a figure of several panels side by side needs room: never narrower than 320 px a panel
    // (its box scrolls sideways in a narrow column instead of overlapping the panels' labels)
    var panels = Object.keys(layout).filter(function (k) { return /^xaxis\d*$/.test(k); }).length;
    if (panels >= 2 && !layout.width && div.clientWidth < 320 * panels + 120) {
      layout.width = 320 * panels + 120;
      config.responsive = false;
    }
    div.setAttribute("data-drawn", "pending");
    return Plotly.newPlot(div, {
      data: fig.data || [],
      layout: layout,
      frames: fig.frames || [],
      config: config,
    }).then(function () {
      div.setAttribute("data-drawn", "yes");
    });
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
    });
  }
  if (document.readyState === "complete") {
    drawAll();
  } else {
    window.addEventListener("load", drawAll);
  }
})();
