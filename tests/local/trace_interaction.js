// Test harness, injected into a copy of a trace page after its own script (tests/local/test_trace.py):
// uses the page as a reader would (unfold the whole graph, select each state entered, show all events
// again, zoom with the buttons, the wheel and the keyboard) and writes what it saw to
// <body data-probe>, as JSON.
(function () {
  "use strict";
  var body = document.body;
  var view = document.getElementById("graph-view");
  var group = document.getElementById("graph-zoom");
  var out = {selections: [], zoom: {}};
  out.foldedAtFirst = !document.getElementById("whole-graph").open;
  out.pathWidths = widths(document.getElementById("path-view"));
  document.getElementById("whole-graph").open = true;  // the reader unfolds the whole graph
  function visibleRows() {
    var shown = [];
    document.querySelectorAll("#events tbody tr").forEach(function (row) {
      var box = row.getBoundingClientRect();
      if (box.height > 0) { shown.push(row.getAttribute("data-state")); }
    });
    return shown;
  }
  function widths(box) {
    var graph = (box || view).getBoundingClientRect();
    var table = document.getElementById("events").getBoundingClientRect();
    return {
      viewport: document.documentElement.clientWidth,
      page: document.documentElement.scrollWidth,
      graphRight: graph.right,
      graphWidth: graph.width,
      tableRight: table.right
    };
  }
  out.widths = widths();
  out.initialRows = visibleRows();
  document.querySelectorAll("#graph .node[data-taken='true']").forEach(function (node) {
    node.dispatchEvent(new MouseEvent("click", {bubbles: true}));
    out.selections.push({
      state: node.getAttribute("data-state"),
      rows: visibleRows(),
      label: document.getElementById("selection").textContent,
      showAll: !document.getElementById("show-all").hidden
    });
  });
  document.getElementById("show-all").click();
  out.afterShowAll = {rows: visibleRows(), showAll: !document.getElementById("show-all").hidden};
  out.zoom.initial = group.getAttribute("transform");
  document.getElementById("zoom-in").click();
  out.zoom.button = group.getAttribute("transform");
  var box = view.getBoundingClientRect();
  function wheel() {
    view.dispatchEvent(new WheelEvent("wheel", {
      deltaY: -100, clientX: box.left + box.width / 3, clientY: box.top + box.height / 3,
      bubbles: true, cancelable: true
    }));
  }
  document.getElementById("zoom-in").blur();
  wheel();  // scrolling the page past the graph
  out.zoom.unfocusedWheel = group.getAttribute("transform");
  view.focus();  // the reader clicks into the graph
  wheel();
  out.zoom.wheel = group.getAttribute("transform");
  out.widthsZoomed = widths();
  view.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowLeft", bubbles: true, cancelable: true}));
  out.zoom.arrow = group.getAttribute("transform");
  view.dispatchEvent(new KeyboardEvent("keydown", {key: "0", bubbles: true, cancelable: true}));
  out.zoom.fit = group.getAttribute("transform");
  body.setAttribute("data-probe", JSON.stringify(out));
})();
