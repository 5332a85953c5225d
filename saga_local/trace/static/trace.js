// saga trace's page (saga_local/trace/html.py inlines it; the page's CSP allows it by its hash).
// The page draws the state machine twice: the path taken (#path-graph), and the whole graph folded
// under it (#graph). Selecting a state (click or Enter on a node of either, or click an event row)
// highlights its node in both, opens its step and shows only its event rows; "show all events" (or
// Escape) brings every row back. The state the execution ended in starts highlighted, with every
// event shown (nothing is hidden before the reader asks). The whole graph zooms and pans inside its
// own box: the buttons, the wheel (on the focused graph, or with Ctrl), dragging, and the keyboard
// (+ and - zoom, arrows pan, 0 fits).
(function () {
  "use strict";
  var body = document.body;
  var nodes = Array.prototype.slice.call(document.querySelectorAll("svg.graph .node[data-state]"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("#events tbody tr"));
  var steps = Array.prototype.slice.call(document.querySelectorAll("details.step"));
  var label = document.getElementById("selection");
  var showAll = document.getElementById("show-all");
  // Record what the browser actually painted, so a reader (or a headless check) can confirm
  // the outcome classes took effect.
  nodes.forEach(function (node) {
    var shape = node.querySelector(".shape");
    var style = window.getComputedStyle(shape);
    node.setAttribute("data-fill", style.fill);
    node.setAttribute("data-stroke", style.stroke);
  });

  // -- selecting a state filters the events table ---------------------------------------------
  function select(name, filter) {
    var filtering = name !== null && filter !== false;
    nodes.forEach(function (node) {
      node.classList.toggle("selected", name !== null && node.getAttribute("data-state") === name);
    });
    var shown = 0;
    rows.forEach(function (row) {
      var hit = name !== null && row.getAttribute("data-state") === name;
      row.classList.toggle("sel", hit);
      row.hidden = filtering && !hit;
      if (!row.hidden) { shown += 1; }
    });
    var first = null;
    steps.forEach(function (step) {
      var hit = name !== null && step.getAttribute("data-state") === name;
      step.classList.toggle("sel", hit);
      step.open = hit;
      if (hit && first === null) { first = step; }
    });
    if (name === null) { body.removeAttribute("data-selected"); }
    else { body.setAttribute("data-selected", name); }
    label.textContent = filtering
      ? name + ": " + shown + " of " + rows.length + " events"
      : "all " + rows.length + " events";
    showAll.hidden = !filtering;
    return first;
  }
  nodes.forEach(function (node) {
    function pick() {
      var step = select(node.getAttribute("data-state"));
      if (step) { step.scrollIntoView({block: "nearest"}); }
    }
    node.addEventListener("click", pick);
    node.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); pick(); }
    });
  });
  rows.forEach(function (row) {
    row.addEventListener("click", function () {
      if (row.hasAttribute("data-state")) { select(row.getAttribute("data-state")); }
    });
  });
  showAll.addEventListener("click", function () { select(null); });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { select(null); }
  });

  // -- zoom and pan ---------------------------------------------------------------------------
  // The view is one transform on <g id="graph-zoom">: translate(x y) scale(k), in the graph's own
  // units; scale 1 at the origin is the whole graph, fitted to its box.
  var svg = document.getElementById("graph");
  var view = document.getElementById("graph-view");
  var group = document.getElementById("graph-zoom");
  var MIN = 0.5, MAX = 8, STEP = 1.25, PAN = 40;
  var zoom = {k: 1, x: 0, y: 0};
  function apply() {
    group.setAttribute("transform",
      "translate(" + zoom.x.toFixed(1) + " " + zoom.y.toFixed(1) + ") scale(" + zoom.k.toFixed(3) + ")");
    body.setAttribute("data-zoom", zoom.k.toFixed(3));
  }
  function centre() {
    var box = svg.viewBox.baseVal;
    return {x: box.x + box.width / 2, y: box.y + box.height / 2};
  }
  // A point on the screen in the graph's (untransformed) units.
  function toGraph(clientX, clientY) {
    var matrix = svg.getScreenCTM();
    if (!matrix) { return centre(); }
    var point = svg.createSVGPoint();
    point.x = clientX;
    point.y = clientY;
    return point.matrixTransform(matrix.inverse());
  }
  // Zoom by `factor`, keeping the graph point `at` where it is.
  function zoomBy(factor, at) {
    var k = Math.min(MAX, Math.max(MIN, zoom.k * factor));
    zoom.x = at.x - (at.x - zoom.x) * (k / zoom.k);
    zoom.y = at.y - (at.y - zoom.y) * (k / zoom.k);
    zoom.k = k;
    apply();
  }
  function panBy(dx, dy) {
    zoom.x += dx;
    zoom.y += dy;
    apply();
  }
  function fit() {
    zoom = {k: 1, x: 0, y: 0};
    apply();
  }
  document.getElementById("zoom-in").addEventListener("click", function () { zoomBy(STEP, centre()); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomBy(1 / STEP, centre()); });
  document.getElementById("zoom-fit").addEventListener("click", fit);
  // The wheel zooms once the graph has the focus (a click in it, or Tab), or with Ctrl (a trackpad's
  // pinch): a reader scrolling the page past the graph must not be caught zooming it.
  view.addEventListener("wheel", function (event) {
    if (!(event.ctrlKey || event.metaKey || view.contains(document.activeElement))) { return; }
    event.preventDefault();
    zoomBy(event.deltaY < 0 ? STEP : 1 / STEP, toGraph(event.clientX, event.clientY));
  }, {passive: false});
  view.addEventListener("pointerdown", function () { view.focus({preventScroll: true}); });
  view.addEventListener("keydown", function (event) {
    var moves = {ArrowLeft: [PAN, 0], ArrowRight: [-PAN, 0], ArrowUp: [0, PAN], ArrowDown: [0, -PAN]};
    if (event.key === "+" || event.key === "=") { zoomBy(STEP, centre()); }
    else if (event.key === "-" || event.key === "_") { zoomBy(1 / STEP, centre()); }
    else if (event.key === "0") { fit(); }
    else if (moves[event.key]) { panBy(moves[event.key][0], moves[event.key][1]); }
    else { return; }
    event.preventDefault();
  });
  // Dragging pans. A press that hardly moves stays a click (it selects the node under it); the
  // pointer is captured only once the drag has begun, so that such a click still reaches its node.
  var drag = null;
  var dragged = false;
  view.addEventListener("pointerdown", function (event) {
    if (event.button !== 0) { return; }
    drag = {id: event.pointerId, start: toGraph(event.clientX, event.clientY), x: zoom.x, y: zoom.y,
      sx: event.clientX, sy: event.clientY, moving: false};
    dragged = false;
  });
  view.addEventListener("pointermove", function (event) {
    if (drag === null || event.pointerId !== drag.id) { return; }
    if (!drag.moving && Math.abs(event.clientX - drag.sx) + Math.abs(event.clientY - drag.sy) < 4) { return; }
    if (!drag.moving) {
      drag.moving = true;
      view.setPointerCapture(event.pointerId);
      view.classList.add("panning");
    }
    var here = toGraph(event.clientX, event.clientY);
    // toGraph reads the screen matrix of the <svg>, which the pan does not change: the delta is exact.
    zoom.x = drag.x + (here.x - drag.start.x);
    zoom.y = drag.y + (here.y - drag.start.y);
    apply();
  });
  function endDrag(event) {
    if (drag === null || event.pointerId !== drag.id) { return; }
    dragged = drag.moving;
    drag = null;
    view.classList.remove("panning");
  }
  view.addEventListener("pointerup", endDrag);
  view.addEventListener("pointercancel", endDrag);
  // The click that ends a drag selects nothing.
  view.addEventListener("click", function (event) {
    if (dragged) { event.stopPropagation(); event.preventDefault(); dragged = false; }
  }, true);
  apply();

  var initial = body.getAttribute("data-initial-state");
  select(initial === null || initial === "" ? null : initial, false);
  body.setAttribute("data-rendered", "true");
})();
