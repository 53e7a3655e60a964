/* Nothing hidden sideways (see docs/_ext/hypviz_site.py): a display equation, an inline formula
 * longer than a whole line, or a table wider than its column is scaled down to fit it.
 *
 * For a display equation (a MathJax SVG, sized in ex), the font size of its container becomes
 *     f = max(MIN_SCALE, (w_column - 2) / w_equation) * f_0
 * so the drawn width is at most the column's; a table's font is shrunk the same way (its columns
 * then reflow).  It runs once MathJax has typeset the page and again when the window is resized;
 * when done it sets <html data-hypviz-fitted="yes"> (the layout test waits for it). */
(function () {
  "use strict";
  var MIN_SCALE = 0.45; // below this an equation is unreadable: it scrolls in its box instead
  function fitOne(el, box) {
    el.style.fontSize = "";
    var room = box.clientWidth - 2;
    var need = el.scrollWidth;
    if (room > 0 && need > room + 1) {
      var scale = Math.max(MIN_SCALE, room / need);
      el.style.fontSize = (scale * 100).toFixed(2) + "%";
      // the font size rounds to whole device pixels: step down until it fits (or the floor is reached)
      for (var i = 0; i < 8 && el.scrollWidth > room + 1 && scale > MIN_SCALE; i++) {
        scale = Math.max(MIN_SCALE, scale * 0.97);
        el.style.fontSize = (scale * 100).toFixed(2) + "%";
      }
    }
  }
  function fit() {
    // display equations, and inline ones too long for a line (a formula in a printed Markdown output)
    var maths = document.querySelectorAll("mjx-container");
    Array.prototype.forEach.call(maths, function (m) {
      var display = m.getAttribute("display") === "true";
      var box = (display ? m.closest("div.math, div.output, .cell_output, dd, li, td, article")
                         : m.closest("p, li, dd, td, div.output, .cell_output, article")) || m.parentElement;
      if (display) { m.style.display = "block"; }
      var svg = m.querySelector("svg");
      m.style.fontSize = "";
      if (!svg) { return; }
      var room = box.clientWidth - 2;
      var need = svg.getBoundingClientRect().width;
      if (room > 0 && need > room + 1) {
        var scale = Math.max(MIN_SCALE, room / need);
        m.style.fontSize = (scale * 100).toFixed(2) + "%";
        for (var i = 0; i < 8 && svg.getBoundingClientRect().width > room + 1 && scale > MIN_SCALE; i++) {
          scale = Math.max(MIN_SCALE, scale * 0.97);
          m.style.fontSize = (scale * 100).toFixed(2) + "%";
        }
      }
    });
    var tables = document.querySelectorAll("article table");
    Array.prototype.forEach.call(tables, function (t) {
      var box = t.parentElement;
      if (box) { fitOne(t, box); }
    });
    document.documentElement.setAttribute("data-hypviz-fitted", "yes");
  }
  var pending = null;
  function later() {
    if (pending) { clearTimeout(pending); }
    pending = setTimeout(function () { pending = null; fit(); }, 100);
  }
  function start() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(fit, fit);
    } else if (document.querySelector("span.math, div.math") && !(mj && mj.version)) {
      setTimeout(start, 100); // MathJax not loaded yet
      return;
    } else {
      fit();
    }
    window.addEventListener("resize", later);
  }
  if (document.readyState === "complete") { start(); } else { window.addEventListener("load", start); }
})();
