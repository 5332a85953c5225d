// Test harness, injected into a copy of a trace page after its own script (tests/local/test_trace_path.py):
// reads how large Chromium drew the path taken and each state's name in it (CSS px on the screen),
// where those names sit, and whether the whole graph is still folded, and writes it to
// <body data-readable>, as JSON.
(function () {
  "use strict";
  var path = document.getElementById("path-graph");
  var whole = document.getElementById("whole-graph");
  var scale = path.getBoundingClientRect().width / path.viewBox.baseVal.width;
  var out = {
    viewport: document.documentElement.clientWidth,
    pageWidth: document.documentElement.scrollWidth,
    scale: scale,
    wholeOpen: whole.open,
    // A closed <details> renders none of its content (checkVisibility: content-visibility hidden).
    wholeVisible: document.getElementById("graph").checkVisibility(),
    names: []
  };
  path.querySelectorAll("g.node[data-state]").forEach(function (node) {
    var name = node.querySelector("text.name");
    var box = name.getBoundingClientRect();
    out.names.push({
      state: node.getAttribute("data-state"),
      text: name.textContent,
      px: parseFloat(window.getComputedStyle(name).fontSize) * scale,
      left: box.left,
      right: box.right,
      top: box.top
    });
  });
  document.body.setAttribute("data-readable", JSON.stringify(out));
})();
