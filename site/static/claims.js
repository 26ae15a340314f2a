/* Claim list: filters, sorts and pages the claims.json index, rendering one page of rows at a time.
 * 10,000 claims never become 10,000 table rows. Without this script the page shows its first page
 * (server-rendered) and links to claims-all.html. Rows are built with DOM calls and textContent only:
 * no markup is ever built from data. */
(function () {
  "use strict";
  // The same filters as `kb claims` (plus the hardware class a status was found on), in the form's order.
  var FACETS = ["generation", "topic", "phase", "label", "status", "strength", "rests_on", "arch", "hardware", "source"];

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

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function start(index) {
    var form = document.getElementById("filters");
    var q = document.getElementById("q");
    var sortSel = document.getElementById("sort");
    var count = document.getElementById("count");
    var none = document.getElementById("none");
    var tbody = document.querySelector("#claims tbody");
    var PAGE = parseInt(document.getElementById("claims").getAttribute("data-page-size"), 10) || 100;
    var pager = document.getElementById("pager");
    var prev = document.getElementById("prev");
    var next = document.getElementById("next");
    var pageinfo = document.getElementById("pageinfo");
    var controls = {};
    FACETS.forEach(function (f) { controls[f] = document.getElementById("f-" + f); });
    var archChoices = Array.prototype.map.call(controls.arch.options, function (o) { return o.value; }).filter(Boolean);
    var rank = {
      status: index.statuses, strength: index.strengths, generation: index.generations
    };
    function order(list, v) { var i = list.indexOf(v); return i < 0 ? list.length : i; }

    var items = index.claims.map(function (c, i) {
      var arch = (c.arch || "").toLowerCase();
      return {
        c: c, n: i,
        text: norm([c.id, c.statement, c.review || "", c.topics.join(" "), c.sources.join(" "), c.generation,
                    c.label].join(" ")),
        // Like `kb claims --arch`: a choice matches every scope whose arch text contains it.
        arch: archChoices.filter(function (a) { return arch.indexOf(a.toLowerCase()) >= 0; }),
        hw: Object.keys(c.classes),
        status: order(rank.status, c.status), strength: order(rank.strength, c.strength),
        generation: order(rank.generation, c.generation)
      };
    });
    var page = 1;

    function statusOf(it, hw) { return hw ? it.c.classes[hw] : it.c.status; }

    // The values an item has for one facet (given the hardware class chosen, for status).
    function values(it, f, want) {
      var c = it.c;
      switch (f) {
        case "topic": return c.topics;
        case "source": return c.sources;
        case "hardware": return it.hw;
        case "arch": return it.arch;
        case "status": return [statusOf(it, want && want.hardware)];
        case "rests_on": return [c.rests_on || ""];
        default: return [c[f]];
      }
    }

    // Filters other than status and hardware are independent of each other; those two read each other
    // (a status filter with a hardware class chosen applies to the status on that class).
    var PLAIN = FACETS.filter(function (f) { return f !== "status" && f !== "hardware"; });

    function holds(it, f, v) { return values(it, f, null).indexOf(v) >= 0; }

    function coupledOk(it, want) {
      if (want.hardware && !(want.hardware in it.c.classes)) return false;
      return !want.status || statusOf(it, want.hardware) === want.status;
    }

    function textOk(it, terms) {
      for (var i = 0; i < terms.length; i++) { if (it.text.indexOf(terms[i]) < 0) return false; }
      return true;
    }

    var sorters = {
      id: function (a, b) { return a.n - b.n; },
      status: function (a, b) { return a.status - b.status || a.n - b.n; },
      strength: function (a, b) { return a.strength - b.strength || a.n - b.n; },
      generation: function (a, b) { return a.generation - b.generation || a.n - b.n; }
    };

    // Status words, grades and causes link to their glossary entries, as on the server-rendered pages.
    function term(cls, text, anchor, title) {
      var a = el("a", cls, text);
      a.href = "glossary.html#" + anchor;
      if (title) a.title = title;
      return a;
    }
    function badge(status) { return term("badge st-" + status, status, "status-" + status); }

    function row(it) {
      var c = it.c;
      var tr = document.createElement("tr");
      tr.setAttribute("data-id", c.id);
      var td = el("td");
      var a = el("a", "cid", c.id);
      a.href = "claims/" + encodeURIComponent(c.id) + ".html";
      td.appendChild(a);
      td.appendChild(el("div", "stmt", c.statement));
      var topics = el("div", "topics");
      c.topics.forEach(function (t) { topics.appendChild(el("span", "topic", t)); });
      td.appendChild(topics);
      tr.appendChild(td);
      tr.appendChild(el("td", "", c.generation));
      tr.appendChild(el("td", "", c.phase));
      tr.appendChild(el("td", "", c.label));
      var st = el("td");
      st.appendChild(badge(c.status));
      if (c.strength !== "none") {
        st.appendChild(document.createTextNode(" "));
        st.appendChild(term("grade st-" + c.strength, c.strength, "grade-" + c.strength, "evidence grade"));
      }
      if (c.cause) {
        st.appendChild(document.createTextNode(" "));
        st.appendChild(term("cause", c.cause, "cause-" + c.cause, "cause of the verdict"));
      }
      tr.appendChild(st);
      return tr;
    }

    function recount(counts) {
      FACETS.forEach(function (f) {
        Array.prototype.forEach.call(controls[f].options, function (o) {
          if (!o.value) return;
          var label = o.value + " (" + (counts[f][o.value] || 0) + ")";
          if (o.textContent !== label) o.textContent = label;
        });
      });
    }

    function apply(keepPage) {
      var want = {};
      FACETS.forEach(function (f) { want[f] = controls[f].value; });
      var terms = q.value.split(/\s+/).filter(Boolean).map(norm);
      var counts = {};
      FACETS.forEach(function (f) { counts[f] = {}; });
      var shown = [];
      var active = PLAIN.filter(function (f) { return want[f]; });
      function add(f, vs) {
        for (var m = 0; m < vs.length; m++) { if (vs[m]) counts[f][vs[m]] = (counts[f][vs[m]] || 0) + 1; }
      }
      // Counts beside each choice: how many claims it would show with the other filters as they are.
      for (var i = 0; i < items.length; i++) {
        var it = items[i];
        if (terms.length && !textOk(it, terms)) continue;
        var failed = null, fails = 0;
        for (var k = 0; k < active.length && fails < 2; k++) {
          if (!holds(it, active[k], want[active[k]])) { failed = active[k]; fails++; }
        }
        if (fails >= 2) continue;
        var coupled = coupledOk(it, want);
        if (fails === 1) {
          if (coupled) add(failed, values(it, failed, want));
          continue;
        }
        if (coupled) {
          shown.push(it);
          for (var j = 0; j < PLAIN.length; j++) add(PLAIN[j], values(it, PLAIN[j], want));
        }
        if (!want.hardware || want.hardware in it.c.classes) add("status", [statusOf(it, want.hardware)]);
        add("hardware", it.hw.filter(function (hw) { return !want.status || it.c.classes[hw] === want.status; }));
      }
      recount(counts);
      var key = sortSel.value || "id";
      var desc = key.charAt(0) === "-";
      var cmp = sorters[desc ? key.slice(1) : key] || sorters.id;
      shown.sort(desc ? function (a, b) { return cmp(b, a); } : cmp);
      var pages = Math.max(1, Math.ceil(shown.length / PAGE));
      if (!keepPage) page = 1;
      page = Math.min(Math.max(1, page), pages);
      var from = (page - 1) * PAGE;
      var slice = shown.slice(from, from + PAGE);
      var frag = document.createDocumentFragment();
      slice.forEach(function (it) { frag.appendChild(row(it)); });
      tbody.replaceChildren(frag);
      var all = shown.length === items.length;
      count.textContent = pages === 1
        ? (all ? items.length + " claims" : shown.length + " of " + items.length + " claims shown")
        : (from + 1) + "–" + (from + slice.length) + " of " + shown.length + " claims" +
          (all ? "" : " that match (" + items.length + " in all)");
      none.hidden = shown.length > 0;
      pager.hidden = pages <= 1;
      pageinfo.textContent = "Page " + page + " of " + pages;
      prev.disabled = page <= 1;
      next.disabled = page >= pages;
      var params = new URLSearchParams();
      FACETS.forEach(function (f) { if (want[f]) params.set(f, want[f]); });
      if (q.value) params.set("q", q.value);
      if (key !== "id") params.set("sort", key);
      if (page > 1) params.set("page", String(page));
      try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { /* some file:// setups */ }
      window.kbApplied = performance.now();  // when the last filter, sort or page change was on screen (benchmarks)
      window.kbApplyCount = (window.kbApplyCount || 0) + 1;
    }

    function fromHash() {
      var h = readHash();
      FACETS.forEach(function (f) {
        var v = h[f] || "";
        var ok = Array.prototype.some.call(controls[f].options, function (o) { return o.value === v; });
        controls[f].value = ok ? v : "";
      });
      var s = h.sort || "id";
      sortSel.value = Array.prototype.some.call(sortSel.options, function (o) { return o.value === s; }) ? s : "id";
      q.value = h.q || "";
      page = parseInt(h.page || "1", 10) || 1;
      apply(true);
    }

    var pending = 0;
    function schedule() {
      if (pending) return;
      pending = requestAnimationFrame(function () { pending = 0; apply(false); });
    }
    function turn(by) {
      page += by;
      apply(true);
      document.getElementById("count-line").scrollIntoView({ block: "nearest" });
    }
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    form.addEventListener("reset", function () { setTimeout(function () { apply(false); }, 0); });
    prev.addEventListener("click", function () { turn(-1); });
    next.addEventListener("click", function () { turn(1); });
    window.addEventListener("hashchange", fromHash);
    form.hidden = false;
    fromHash();
    window.kbReadyAt = performance.now();  // read by bench/bench_site_list.py
    document.documentElement.setAttribute("data-kb-ready", "1");
  }

  loadIndex(start);
})();
