/* Claim list filters: reads the claims.json index and shows or hides the server-rendered rows.
 * Without this script the page still lists every claim. It never inserts markup built from data. */
(function () {
  "use strict";
  var SELECTS = ["generation", "topic", "phase", "label", "status", "strength", "hardware", "source"];

  function loadIndex(done) {
    if (window.KB_CLAIMS) { return done(window.KB_CLAIMS); }
    if (location.protocol === "file:") {
      // fetch() of a local file is refused by browsers: the same index ships as a script.
      var s = document.createElement("script");
      s.src = "claims-index.js";
      s.onload = function () { done(window.KB_CLAIMS); };
      document.head.appendChild(s);
      return;
    }
    fetch("claims.json").then(function (r) { return r.json(); }).then(done);
  }

  // Like the CLI's full-text search, '_', '-' and '.' separate words: dq_accum finds dq-accum ids and "dQ accum…".
  function norm(text) { return text.toLowerCase().replace(/[_\-.]+/g, " "); }

  function readHash() {
    var out = {};
    new URLSearchParams(location.hash.replace(/^#/, "")).forEach(function (v, k) { out[k] = v; });
    return out;
  }

  function start(index) {
    var form = document.getElementById("filters");
    var q = document.getElementById("q");
    var count = document.getElementById("count");
    var none = document.getElementById("none");
    var rows = {};
    document.querySelectorAll("#claims tbody tr").forEach(function (tr) { rows[tr.getAttribute("data-id")] = tr; });
    var items = index.claims.map(function (c) {
      return {
        c: c, row: rows[c.id],
        text: norm([c.id, c.statement, c.review || "", c.topics.join(" "), c.sources.join(" "), c.generation,
                    c.label].join(" "))
      };
    }).filter(function (it) { return it.row; });
    var controls = {};
    SELECTS.forEach(function (f) { controls[f] = document.getElementById("f-" + f); });

    function matches(it, want, terms) {
      var c = it.c;
      if (want.generation && c.generation !== want.generation) return false;
      if (want.phase && c.phase !== want.phase) return false;
      if (want.label && c.label !== want.label) return false;
      if (want.topic && c.topics.indexOf(want.topic) < 0) return false;
      if (want.source && c.sources.indexOf(want.source) < 0) return false;
      if (want.hardware && !(want.hardware in c.classes)) return false;
      var st = want.hardware ? c.classes[want.hardware] : c.status;
      if (want.status && st !== want.status) return false;
      if (want.strength && c.strength !== want.strength) return false;
      for (var i = 0; i < terms.length; i++) { if (it.text.indexOf(terms[i]) < 0) return false; }
      return true;
    }

    function apply() {
      var want = {};
      SELECTS.forEach(function (f) { want[f] = controls[f].value; });
      var terms = q.value.split(/\s+/).filter(Boolean).map(norm);
      var shown = 0;
      items.forEach(function (it) {
        var ok = matches(it, want, terms);
        if (it.row.hidden === ok) it.row.hidden = !ok;
        if (ok) shown++;
      });
      count.textContent = shown + " of " + items.length + " claims shown";
      none.hidden = shown > 0;
      var params = new URLSearchParams();
      SELECTS.forEach(function (f) { if (want[f]) params.set(f, want[f]); });
      if (q.value) params.set("q", q.value);
      try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { /* some file:// setups */ }
    }

    function fromHash() {
      var h = readHash();
      SELECTS.forEach(function (f) {
        var v = h[f] || "";
        var ok = Array.prototype.some.call(controls[f].options, function (o) { return o.value === v; });
        controls[f].value = ok ? v : "";
      });
      q.value = h.q || "";
      apply();
    }

    var pending = 0;
    function schedule() {
      if (pending) return;
      pending = requestAnimationFrame(function () { pending = 0; apply(); });
    }
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    form.addEventListener("reset", function () { setTimeout(apply, 0); });
    window.addEventListener("hashchange", fromHash);
    form.hidden = false;
    fromHash();
  }

  loadIndex(start);
})();
