/* Click-to-enlarge for the figures of the hypviz site (see docs/_ext/hypviz_site.py).
 * A click on a figure (an <img> in the article) opens it in an overlay at its full resolution,
 * scrollable when it is larger than the window; a click, Escape or the close button closes it.
 * Works from file:// (no request: the overlay shows the image the page has already loaded). */
(function () {
  "use strict";
  var overlay = null;
  function close() {
    if (overlay) {
      overlay.remove();
      overlay = null;
      document.documentElement.removeAttribute("data-hypviz-enlarged");
    }
  }
  function open(img) {
    close();
    overlay = document.createElement("div");
    overlay.className = "hypviz-lightbox";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", img.alt || "figure");
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt || "";
    // full resolution, but never wider than the window: a 2x image is shown at its displayed size
    // times the window's room, never upscaled beyond its pixels
    big.style.maxWidth = "none";
    big.style.width = Math.min(img.naturalWidth, Math.max(img.getBoundingClientRect().width, window.innerWidth - 40)) + "px";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "hypviz-lightbox-close";
    button.textContent = "×";
    button.setAttribute("aria-label", "close");
    overlay.appendChild(button);
    overlay.appendChild(big);
    overlay.addEventListener("click", close);
    document.body.appendChild(overlay);
    document.documentElement.setAttribute("data-hypviz-enlarged", "yes");
    button.focus();
  }
  function setUp() {
    var images = document.querySelectorAll("article.bd-article img, article img");
    Array.prototype.forEach.call(images, function (img) {
      var link = img.closest("a");
      // an image inside a real link is left alone; Sphinx's link to a scaled image's own file is the same action
      if ((link && !link.classList.contains("image-reference")) || img.getAttribute("data-hypviz-enlarge")) { return; }
      img.setAttribute("data-hypviz-enlarge", "yes");
      if (!link) { img.setAttribute("tabindex", "0"); }
      // the hint in the page's language (the Chinese pages are <html lang="zh-CN">)
      var hint = (document.documentElement.lang || "").toLowerCase().indexOf("zh") === 0 ? "（点击放大）" : " (click to enlarge)";
      img.title = (img.alt || "") + hint;
      img.addEventListener("click", function (e) { e.preventDefault(); e.stopPropagation(); open(img); });
      img.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(img); }
      });
    });
    document.addEventListener("keydown", function (e) { if (e.key === "Escape") { close(); } });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
