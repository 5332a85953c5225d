// saga trace's page (saga_local/trace/html.py inlines it; the page's CSP allows it by its hash).
// Selecting a state (click or Enter on a node, or click an event row) highlights its node, its event
// rows and opens its step; the state the execution ended in starts selected.
(function () {
  "use strict";
  var body = document.body;
  var nodes = Array.prototype.slice.call(document.querySelectorAll("#graph .node[data-state]"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("#events tbody tr"));
  var steps = Array.prototype.slice.call(document.querySelectorAll("details.step"));
  var label = document.getElementById("selection");
  // Record what the browser actually painted, so a reader (or a headless check) can confirm
  // the outcome classes took effect.
  nodes.forEach(function (node) {
    var shape = node.querySelector(".shape");
    var style = window.getComputedStyle(shape);
    node.setAttribute("data-fill", style.fill);
    node.setAttribute("data-stroke", style.stroke);
  });
  function select(name) {
    nodes.forEach(function (node) {
      node.classList.toggle("selected", name !== null && node.getAttribute("data-state") === name);
    });
    rows.forEach(function (row) {
      row.classList.toggle("sel", name !== null && row.getAttribute("data-state") === name);
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
    label.textContent = name === null ? "all events" : name;
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
  document.getElementById("clear").addEventListener("click", function () { select(null); });
  var initial = body.getAttribute("data-initial-state");
  select(initial === null || initial === "" ? null : initial);
  body.setAttribute("data-rendered", "true");
})();
