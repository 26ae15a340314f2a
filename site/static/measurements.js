/* Measurements table: filter (search and one select per facet) and sort (click a column header).
 * The table is complete without this script; it only hides rows and reorders them, reading the values the
 * page already holds (data-* attributes), and keeps the choice in the URL fragment so a view can be linked. */
(function () {
  "use strict";
  var form = document.getElementById("meas-filters");
  var table = document.getElementById("meas");
  if (!form || !table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var shown = document.getElementById("meas-shown");
  var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
  var search = form.querySelector("input[name=q]");
  var sort = { col: null, desc: false };

  // Like the claim list's search, '_', '-' and '.' separate words.
  function norm(text) { return text.toLowerCase().replace(/[_\-.]+/g, " "); }
  rows.forEach(function (r) { r.kbText = norm(r.textContent); });

  function apply() {
    var words = norm(search.value).split(/\s+/).filter(Boolean);
    var n = 0;
    rows.forEach(function (r) {
      var ok = selects.every(function (s) { return !s.value || r.getAttribute("data-" + s.name) === s.value; });
      ok = ok && words.every(function (w) { return r.kbText.indexOf(w) >= 0; });
      r.hidden = !ok;
      if (ok) { n += 1; }
    });
    shown.textContent = String(n);
    if (sort.col === null) {
      rows.forEach(function (r) { body.appendChild(r); });  // the page's own order
    } else {
      var i = sort.col, type = heads[i].getAttribute("data-type"), dir = sort.desc ? -1 : 1;
      var keyed = rows.map(function (r, pos) { return { r: r, pos: pos, v: r.cells[i].getAttribute("data-v") || "" }; });
      keyed.sort(function (a, b) {
        var c;
        if (type === "num") {
          // Empty values sort last whichever the direction.
          if (a.v === "" || b.v === "") { return (a.v === "") - (b.v === "") || a.pos - b.pos; }
          c = parseFloat(a.v) - parseFloat(b.v);
        } else {
          c = a.v.localeCompare(b.v);
        }
        return dir * c || a.pos - b.pos;
      });
      keyed.forEach(function (k) { body.appendChild(k.r); });
    }
    heads.forEach(function (h, j) {
      if (sort.col === j) { h.setAttribute("aria-sort", sort.desc ? "descending" : "ascending"); }
      else { h.removeAttribute("aria-sort"); }
    });
    writeHash();
  }

  function writeHash() {
    var p = new URLSearchParams();
    if (search.value) { p.set("q", search.value); }
    selects.forEach(function (s) { if (s.value) { p.set(s.name, s.value); } });
    if (sort.col !== null) { p.set("sort", (sort.desc ? "-" : "") + heads[sort.col].getAttribute("data-col")); }
    var text = p.toString();
    history.replaceState(null, "", text ? "#" + text : location.pathname + location.search);
  }

  function readHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    search.value = p.get("q") || "";
    selects.forEach(function (s) {
      var v = p.get(s.name) || "";
      s.value = Array.prototype.some.call(s.options, function (o) { return o.value === v; }) ? v : "";
    });
    var key = p.get("sort") || "";
    var desc = key.charAt(0) === "-";
    var col = heads.map(function (h) { return h.getAttribute("data-col"); }).indexOf(desc ? key.slice(1) : key);
    sort = { col: col >= 0 ? col : null, desc: desc };
  }

  heads.forEach(function (h, j) {
    var b = h.querySelector("button.sort");
    b.addEventListener("click", function () {
      sort = { col: j, desc: sort.col === j ? !sort.desc : false };
      apply();
    });
  });
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("reset", function () { setTimeout(function () { sort = { col: null, desc: false }; apply(); }, 0); });
  form.addEventListener("submit", function (e) { e.preventDefault(); });
  window.addEventListener("hashchange", function () { readHash(); apply(); });
  form.hidden = false;
  readHash();
  apply();
  document.documentElement.setAttribute("data-meas-ready", "1");
}());
