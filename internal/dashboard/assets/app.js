// Portero's dashboard: reads /state once (with the history), then one
// server-sent event per sample; polls /state instead while the stream is
// down. No library, no external asset.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  let hist = null;      // {t:[], rules:{name:{allowed:[],refused:[],shadow:[]}}, p99_ms:[]}
  let state = null;
  let maxPoints = 900;
  let lastEvent = 0;

  const fmt = (n) => {
    if (n === null || n === undefined || Number.isNaN(n)) return "–";
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 0 : 1) + "M";
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(n >= 1e5 ? 0 : 1) + "k";
    if (Number.isInteger(n)) return n.toLocaleString("en-US");
    return n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US");
  };
  const exact = (n) => (n === undefined ? "0" : Math.round(n).toLocaleString("en-US"));
  const ms = (v) => (v === null || v === undefined ? "–" : v < 1 ? v.toFixed(3) + " ms" : v.toFixed(1) + " ms");
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };
  const ago = (t) => {
    const s = Math.round((Date.now() - t) / 1000);
    return s < 2 ? "just now" : s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
  };
  const until = (iso) => {
    const s = (new Date(iso).getTime() - Date.now()) / 1000;
    if (s <= 0) return "now";
    if (s < 120) return "in " + Math.round(s) + " s";
    if (s < 7200) return "in " + Math.round(s / 60) + " min";
    if (s < 172800) return "in " + Math.round(s / 3600) + " h";
    return "in " + Math.round(s / 86400) + " d";
  };

  const SVG = "http://www.w3.org/2000/svg";
  // area draws values as a filled path over width w, height h, scaled to max.
  function area(values, w, h, max, cls, fill) {
    const p = document.createElementNS(SVG, "path");
    const n = values.length;
    if (n === 0) return p;
    const x = (i) => (n === 1 ? w : (i / (n - 1)) * w);
    const y = (v) => h - (max > 0 ? (v / max) * (h - 4) : 0);
    let d = "M" + x(0).toFixed(1) + "," + y(values[0]).toFixed(1);
    for (let i = 1; i < n; i++) d += "L" + x(i).toFixed(1) + "," + y(values[i]).toFixed(1);
    if (fill) d += "L" + w + "," + h + "L0," + h + "Z";
    p.setAttribute("d", d);
    p.setAttribute("class", cls);
    return p;
  }
  function chart(series, label) {
    const w = 300, h = 70;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    let max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    const base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", 0); base.setAttribute("x2", w); base.setAttribute("y1", h - 0.5); base.setAttribute("y2", h - 0.5);
    base.setAttribute("class", "axis");
    svg.append(base);
    for (const s of series) svg.append(area(s.values.map((v) => v || 0), w, h, max, s.cls, s.fill));
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", 2); t.setAttribute("y", 10);
    t.textContent = max > 0 ? "max " + (label.includes("latency") ? ms(max) : fmt(max) + "/s") : "";
    svg.append(t);
    return svg;
  }

  function renderRules() {
    const box = $("rules");
    box.replaceChildren();
    const usage = {};
    for (const u of state.usage) if (!usage[u.rule]) usage[u.rule] = u;
    for (const r of state.rules) {
      // The decisions of the window the charts show, not since the start.
      const [allowed, refused, shadow] = (state.window && state.window[r.name]) || [0, 0, 0];
      const h = (hist && hist.rules[r.name]) || { allowed: [], refused: [], shadow: [] };
      const u = usage[r.name];
      let bar = null;
      if (u) {
        const pct = Math.min(100, (100 * u.used) / u.limit);
        const span = el("span", { class: pct >= 100 ? "hot" : pct >= 80 ? "warm" : "" });
        span.style.width = pct.toFixed(1) + "%";
        bar = el("div", { class: "muted small" }, "closest key " + u.key + ": " + pct.toFixed(0) + "% of the limit",
          el("div", { class: "usage" }, span));
      }
      const card = el("article", { class: "rule", "data-rule": r.name },
        el("header", {},
          el("div", { class: "name" }, r.name,
            r.mode === "shadow" ? el("span", { class: "badge shadow", text: "shadow" }) : null,
            r.quota ? el("span", { class: "badge quota", text: "quota" }) : null),
          el("div", { class: "limit" }, r.limit + " · ", el("code", { text: r.key }))),
        el("div", { class: "nums" },
          el("div", { class: "allowed" }, el("b", { class: "v-allowed", text: exact(allowed) }), "allowed"),
          el("div", { class: "refused" }, el("b", { class: "v-refused", text: exact(refused) }), "refused"),
          el("div", { class: "shadow" }, el("b", { class: "v-shadow", text: exact(shadow) }), "shadow-refused")),
        el("div", { class: "chart" }, chart([
          { values: h.allowed, cls: "allowed", fill: true },
          { values: h.refused, cls: "refused", fill: true },
          { values: h.shadow, cls: "shadow", fill: false }], r.name + ": allowed and refused per second")),
        bar);
      box.append(card);
    }
    if (state.rules.length === 0) box.append(el("p", { class: "muted", text: "No rules in the configuration." }));
  }

  function rows(tbody, items, make, cols, empty) {
    const tb = $(tbody);
    tb.replaceChildren();
    if (items.length === 0) { tb.append(el("tr", {}, el("td", { class: "empty", colspan: cols, text: empty }))); return; }
    for (const it of items) tb.append(make(it));
  }
  function usageBar(u) {
    const pct = Math.min(100, (100 * u.used) / u.limit);
    const span = el("span", { class: pct >= 100 ? "hot" : pct >= 80 ? "warm" : "" });
    span.style.width = pct.toFixed(1) + "%";
    return el("td", { class: "bar-col" }, el("div", { class: "usage" }, span), el("span", { class: "muted small", text: pct.toFixed(0) + "%" }));
  }

  function render() {
    if (!state) return;
    $("service").textContent = state.service ? "· " + state.service : "";
    document.title = "Portero — " + (state.service || "dashboard");
    const st = state.store;
    const ss = $("store-state");
    if (!st.connected) { ss.textContent = st.type + ": not reached yet"; ss.className = "pill bad"; }
    else if (st.fallback) { ss.textContent = st.type + ": failing, on_error " + st.on_error + " decides"; ss.className = "pill bad"; }
    else { ss.textContent = st.type + " store healthy"; ss.className = "pill ok"; }

    // Tiles: the latest sample's rates.
    let refusedNow = 0;
    if (hist && hist.t.length) {
      const n = hist.t.length;
      for (const name in hist.rules) refusedNow += hist.rules[name].refused[n - 1] || 0;
    }
    $("t-rps").textContent = fmt(state.requests_per_second);
    $("t-refused").textContent = fmt(refusedNow);
    $("t-share").textContent = exact(state.refused_last_minute);
    $("t-p99").textContent = ms(state.latency.p99_ms);
    $("t-fallback").textContent = exact(st.fallback_decisions);
    $("window").textContent = hist && hist.t.length ? "· last " + Math.max(1, Math.round((hist.t[hist.t.length - 1] - hist.t[0]) / 60000)) + " min: decisions, and per second in the charts" : "";

    renderRules();
    rows("near", state.usage.slice(0, 10), (u) => el("tr", {},
      el("td", { text: u.rule }), el("td", {}, el("code", { text: u.key })),
      el("td", { class: "num", text: exact(u.used) + " / " + exact(u.limit) }), usageBar(u)), 4, "No key near its limit.");
    $("top-window").textContent = state.top_refused_window ? "· last " + state.top_refused_window : "";
    rows("top", state.top_refused.slice(0, 15), (k) => el("tr", { "data-key": k.key, "data-rule": k.rule },
      el("td", { text: k.rule + (k.shadow ? " (shadow)" : "") }), el("td", {}, el("code", { text: k.key })),
      el("td", { class: "num v-count", text: exact(k.count) })), 3, "No refusals.");
    rows("quotas", state.quotas, (u) => el("tr", {},
      el("td", { text: u.rule }), el("td", {}, el("code", { text: u.key })),
      el("td", { class: "num", text: exact(u.used) + " / " + exact(u.limit) }), usageBar(u), el("td", { text: until(u.reset) })),
      5, state.rules.some((r) => r.quota) ? "No quota used yet." : "No quota rule in the configuration.");

    const kv = (id, pairs) => {
      const dl = $(id);
      dl.replaceChildren();
      for (const [k, v, tid] of pairs) dl.append(el("dt", { text: k }), el("dd", tid ? { "data-testid": tid } : {}, v));
    };
    kv("store", [
      ["type", st.type], ["failure policy", "on_error: " + st.on_error],
      ["state", !st.connected ? "not reached yet" : st.fallback ? "failing: the failure policy decides" : "healthy"],
      ["latency (last minute)", "p50 " + ms(state.latency.p50_ms) + " · p99 " + ms(state.latency.p99_ms)],
      ["store errors", exact(st.errors), "store-errors"],
      ["failure-policy decisions", exact(st.fallback_decisions)]]);
    const lc = $("latency-chart");
    lc.replaceChildren(chart([{ values: hist ? hist.p99_ms : [], cls: "lat", fill: false }], "store latency p99"));
    const c = state.config;
    kv("config", [["source", el("code", { text: c.source })], ["applied", new Date(c.loaded).toLocaleString()],
      ["reloads", exact(c.reloads) + " applied, " + exact(c.reload_errors) + " refused"], ["rules", String(state.rules.length)]]);
    rows("config-rules", state.rules, (r) => el("tr", {}, el("td", { text: r.name }), el("td", {}, el("code", { text: r.key })),
      el("td", { text: r.algorithm || "" }), el("td", { text: r.limit }), el("td", { text: r.mode })), 5, "No rules.");
    $("updated").textContent = new Date(state.now).toLocaleTimeString();
    document.body.dataset.sample = String(state.now);
  }

  function live(ok, text) {
    const l = $("live");
    l.textContent = text;
    l.className = "pill live " + (ok ? "ok" : "warn");
  }

  async function load() {
    const res = await fetch("state", { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401) { location.reload(); return; }
    const s = await res.json();
    hist = s.history;
    delete s.history;
    state = s;
    maxPoints = Math.max(maxPoints, hist.t.length);
    render();
  }

  function append(p) {
    if (!hist) return;
    hist.t.push(p.t);
    hist.p99_ms.push(p.p99_ms);
    for (const name of Object.keys(p.rules)) {
      if (!hist.rules[name]) hist.rules[name] = { allowed: hist.t.slice(1).map(() => 0), refused: hist.t.slice(1).map(() => 0), shadow: hist.t.slice(1).map(() => 0) };
    }
    for (const name of Object.keys(hist.rules)) {
      const v = p.rules[name] || [0, 0, 0];
      const r = hist.rules[name];
      r.allowed.push(v[0]); r.refused.push(v[1]); r.shadow.push(v[2]);
    }
    while (hist.t.length > maxPoints) {
      hist.t.shift(); hist.p99_ms.shift();
      for (const name of Object.keys(hist.rules)) { const r = hist.rules[name]; r.allowed.shift(); r.refused.shift(); r.shadow.shift(); }
    }
  }

  function connect() {
    if (!window.EventSource) { live(false, "polling"); return; }
    const es = new EventSource("events");
    es.addEventListener("open", () => live(true, "live"));
    es.addEventListener("sample", (ev) => {
      const p = JSON.parse(ev.data);
      lastEvent = Date.now();
      append(p);
      state = p.state;
      render();
      live(true, "live");
    });
    es.addEventListener("error", () => live(false, "reconnecting"));
  }

  // Polling while no event came for three intervals (a proxy that buffers
  // streams, a stream that broke).
  setInterval(() => {
    const iv = state ? state.interval_ms : 1000;
    if (Date.now() - lastEvent > 3 * iv) load().catch(() => live(false, "offline"));
    if (state) $("updated").textContent = new Date(state.now).toLocaleTimeString() + " (" + ago(state.now) + ")";
  }, 2000);

  load().then(connect).catch(() => { live(false, "offline"); connect(); });
})();
