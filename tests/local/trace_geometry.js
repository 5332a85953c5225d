// Test harness, injected into a copy of a trace page (tests/local/test_trace.py): unfolds the whole
// graph, reads what Chromium laid out in it and in the path taken, and writes it to
// <body data-geometry>, as JSON, for the test to check: the whole graph's at the top level, the
// path's under "path". Boxes are [left, top, right, bottom] in the SVG's user units.
(function () {
  "use strict";
  function box(element) {
    var b = element.getBBox();
    return [b.x, b.y, b.x + b.width, b.y + b.height];
  }
  document.getElementById("whole-graph").open = true;
  var out = measure(document.getElementById("graph"));
  var path = document.getElementById("path-graph");
  out.path = path ? measure(path) : null;
  document.body.setAttribute("data-geometry", JSON.stringify(out));

  function measure(graph) {
    var out = {labels: [], nodes: [], taken: []};
    graph.querySelectorAll("g.edge-label").forEach(function (g) {
      out.labels.push({
        edge: g.getAttribute("data-edge"),
        text: g.querySelector("text").textContent,
        rect: box(g.querySelector("rect")),
        ink: box(g.querySelector("text")),
        weight: window.getComputedStyle(g.querySelector("text")).fontWeight
      });
    });
    graph.querySelectorAll("g.node[data-state]").forEach(function (g) {
      out.nodes.push({
        name: g.getAttribute("data-state"),
        shape: box(g.querySelector(".shape")),
        ink: box(g.querySelector("text.name"))
      });
    });
    graph.querySelectorAll("g.terminal rect, g.final circle.ring").forEach(function (shape) {
      out.nodes.push({name: "(" + shape.parentNode.getAttribute("data-terminal") + ")", shape: box(shape)});
    });
    graph.querySelectorAll("path.edge.taken").forEach(function (path) {
      var length = path.getTotalLength();
      var points = [];
      for (var at = 0; at <= length; at += 1.5) {
        var p = path.getPointAtLength(at);
        points.push([p.x, p.y]);
      }
      out.taken.push({
        edge: path.getAttribute("data-edge"),
        width: parseFloat(window.getComputedStyle(path).strokeWidth),
        points: points
      });
    });
    return out;
  }
})();
