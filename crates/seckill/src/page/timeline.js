"use strict";
// The lock timeline: every critical section of the product as a bar, one lane per instance
// (a lane grows a row for each holder inside at once), from entering to leaving, on Redis's
// clock. A thin bar before it is the wait for the lock, ticks are the watchdog's renewals,
// a cross is where the lease ran out under the holder, an arrow a hand-off from the holder
// before, and two bars of one shard that overlap in time are red. Data: GET /trace.

const Timeline = (() => {
  const RED = "#c62828";
  const KEEP_MS = 60_000;      // frozen, the last minute stays to scroll and zoom over
  let events = new Map();       // "shard/id" -> event
  let sections = [];            // built from the events
  let since = 0;                // Redis time (ms) of the newest event seen
  let serverNow = 0, fetchedAt = 0;
  let live = true;
  let span = 12_000;            // ms shown
  let end = 0;                  // frozen: the right edge (Redis ms)
  let colors = {};

  function clear() { events = new Map(); sections = []; since = 0; live = true; end = 0; draw(); }

  async function poll(product) {
    const r = await fetch(`/trace?product=${encodeURIComponent(product)}&since=${since}`, { cache: "no-store" });
    if (!r.ok) return;
    const body = await r.json();
    serverNow = body.now_ms; fetchedAt = performance.now();
    for (const e of body.events) {
      events.set(`${e.shard}/${e.id}`, e);
      since = Math.max(since, e.at);
    }
    build();
    draw();
  }

  // Enter and leave events, paired by holder, into sections.
  function build() {
    const byHolder = new Map();
    for (const e of events.values()) {
      let s = byHolder.get(e.holder);
      if (!s) { s = { holder: e.holder, renewals: [] }; byHolder.set(e.holder, s); }
      if (e.event === "enter") {
        Object.assign(s, { shard: e.shard, enter: e.at, instance: e.instance, variant: e.variant,
          overlap: e.overlap, lease: e.lease_ms, granted: e.granted_ms ?? 0, handedBy: e.handed_by });
        if (e.waited_ms !== undefined) s.waited = e.waited_ms;
      } else {
        s.leave = e.at; s.outcome = e.outcome;
        if (s.shard === undefined) s.shard = e.shard;
        if (e.waited_ms !== undefined && s.waited === undefined) s.waited = e.waited_ms;
        s.renewals = e.renewals_ms || [];
        if (e.instance && !s.instance) s.instance = e.instance;
      }
    }
    // A section whose entry fell off the stream's cap cannot be drawn.
    sections = [...byHolder.values()].filter(s => s.enter !== undefined)
      .sort((a, b) => a.enter - b.enter || a.holder.localeCompare(b.holder));
    const cutoff = since - KEEP_MS * 5;
    sections = sections.filter(s => (s.leave ?? since) >= cutoff);
    // Red: a section that overlaps in time another of its shard.
    const open = {};
    for (const s of sections) s.red = false;
    for (const s of sections) {
      const inside = (open[s.shard] ||= []);
      for (const o of inside) {
        if ((o.leave ?? Infinity) > s.enter) { o.red = true; s.red = true; }
      }
      inside.push(s);
      open[s.shard] = inside.filter(o => (o.leave ?? Infinity) > s.enter);
    }
    // Lanes: one per instance, a row per holder inside at once.
    const lanes = new Map();
    for (const s of sections) {
      const name = s.instance || "?";
      if (!lanes.has(name)) lanes.set(name, []);
      const rows = lanes.get(name);
      const start = s.enter - (s.waited ?? 0);
      let row = rows.findIndex(last => last <= start);
      if (row < 0) { row = rows.length; rows.push(0); }
      rows[row] = s.leave ?? Infinity;
      s.lane = name; s.row = row;
    }
    Timeline.lanes = [...lanes.entries()].map(([name, rows]) => ({ name, rows: rows.length }));
  }

  function now() { return serverNow + (performance.now() - fetchedAt); }

  function view() {
    const right = live ? now() : end;
    return [right - span, right];
  }

  function draw() {
    const canvas = document.getElementById("timeline");
    if (!canvas) return;
    const ctx = canvas.getContext("2d");
    const cssWidth = canvas.clientWidth || 900;
    const lanes = Timeline.lanes || [];
    const rowH = 16, laneGap = 10, top = 8, axis = 22, left = 92;
    const rows = lanes.reduce((n, l) => n + l.rows, 0);
    const height = Math.max(80, top + rows * rowH + lanes.length * laneGap + axis);
    const ratio = window.devicePixelRatio || 1;
    canvas.style.height = height + "px";
    canvas.width = cssWidth * ratio; canvas.height = height * ratio;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, cssWidth, height);
    ctx.font = "12px system-ui"; ctx.textBaseline = "middle";
    const [t0, t1] = view();
    const x = at => left + ((cssWidth - left - 6) * (at - t0)) / (t1 - t0);
    const rightEdge = now();

    // Lane backgrounds and names.
    const laneTop = {};
    let y = top;
    for (const lane of lanes) {
      laneTop[lane.name] = y;
      ctx.fillStyle = "#f1f3f6"; ctx.fillRect(left, y - 2, cssWidth - left, lane.rows * rowH + 4);
      ctx.fillStyle = "#1c2430"; ctx.fillText(lane.name.slice(0, 13), 4, y + rowH / 2);
      y += lane.rows * rowH + laneGap;
    }
    const yOf = s => laneTop[s.lane] + s.row * rowH;

    // Time axis: a line a second (or every 5 or 10 when zoomed out).
    const step = span > 60_000 ? 10_000 : span > 20_000 ? 5_000 : 1_000;
    ctx.strokeStyle = "#d9dee5"; ctx.fillStyle = "#5f6b7a";
    for (let tick = Math.ceil(t0 / step) * step; tick <= t1; tick += step) {
      ctx.beginPath(); ctx.moveTo(x(tick), top - 4); ctx.lineTo(x(tick), height - axis + 4); ctx.stroke();
      ctx.fillText(`${((tick - t1) / 1000).toFixed(0)} s`, x(tick) - 10, height - axis / 2);
    }

    const byHolder = new Map(sections.map(s => [s.holder, s]));
    for (const s of sections) {
      const leave = s.leave ?? rightEdge;
      if (leave < t0 || s.enter - (s.waited ?? 0) > t1) continue;
      const top = yOf(s) + 2, h = rowH - 4;
      // The wait: a thin bar up to the entry.
      if (s.waited) {
        ctx.fillStyle = "#9aa5b1";
        ctx.fillRect(x(s.enter - s.waited), top + h / 2 - 1, x(s.enter) - x(s.enter - s.waited), 2);
      }
      ctx.fillStyle = s.red ? RED : (colors[s.variant] || "#3d6fb6");
      ctx.globalAlpha = s.outcome && s.outcome !== "deducted" ? 0.55 : 1;
      ctx.fillRect(x(s.enter), top, Math.max(2, x(leave) - x(s.enter)), h);
      ctx.globalAlpha = 1;
      // Renewals: ticks.
      ctx.strokeStyle = "#fff"; ctx.lineWidth = 2;
      for (const r of s.renewals) {
        ctx.beginPath(); ctx.moveTo(x(s.enter + r), top); ctx.lineTo(x(s.enter + r), top + h); ctx.stroke();
      }
      ctx.lineWidth = 1;
      // The lease running out under the holder: a cross.
      if (s.lease) {
        const renewed = s.renewals.length ? s.enter + s.renewals[s.renewals.length - 1] : s.enter - s.granted;
        const expiry = renewed + s.lease;
        if (expiry < leave) {
          ctx.strokeStyle = "#111"; ctx.lineWidth = 2;
          const cx = x(expiry), cy = top + h / 2;
          ctx.beginPath(); ctx.moveTo(cx - 4, cy - 4); ctx.lineTo(cx + 4, cy + 4);
          ctx.moveTo(cx + 4, cy - 4); ctx.lineTo(cx - 4, cy + 4); ctx.stroke();
          ctx.lineWidth = 1;
        }
      }
      // A hand-off: an arrow from the holder before.
      const from = s.handedBy && byHolder.get(s.handedBy);
      if (from && from.leave !== undefined) {
        const fx = x(from.leave), fy = yOf(from) + rowH / 2, tx = x(s.enter), ty = yOf(s) + rowH / 2;
        ctx.strokeStyle = "#1c2430"; ctx.fillStyle = "#1c2430";
        ctx.beginPath(); ctx.moveTo(fx, fy); ctx.lineTo(tx, ty); ctx.stroke();
        ctx.beginPath(); ctx.moveTo(tx, ty); ctx.lineTo(tx - 5, ty - 3); ctx.lineTo(tx - 5, ty + 3); ctx.fill();
      }
    }
    if (!sections.length) {
      ctx.fillStyle = "#5f6b7a"; ctx.fillText(t("timeline-empty"), left, top + 20);
    }
    const mode = document.getElementById("timeline-mode");
    if (mode) { mode.textContent = t(live ? "timeline-live" : "timeline-frozen"); mode.dataset.live = live; }
    const counted = document.getElementById("timeline-overlaps");
    if (counted) counted.textContent = sections.filter(s => s.overlap).length;
    const red = document.getElementById("timeline-red");
    if (red) red.textContent = sections.filter(s => s.red).length;
  }

  function freeze() { if (live) { live = false; end = now(); } draw(); }
  // Frozen on the whole of what was traced (up to the last minute), for discussion.
  function fit() {
    if (!sections.length) return freeze();
    const first = sections[0].enter - (sections[0].waited ?? 0);
    const last = Math.max(...sections.map(s => s.leave ?? now()));
    span = Math.min(KEEP_MS, Math.max(3_000, (last - first) * 1.08));
    end = last + span * 0.04;
    live = false;
    draw();
  }
  function follow() { live = true; draw(); }
  function zoom(factor) {
    const [t0, t1] = view();
    span = Math.min(KEEP_MS, Math.max(1_000, span * factor));
    if (!live) end = (t0 + t1) / 2 + span / 2;
    draw();
  }
  function scroll(by) {
    freeze();
    const newest = Math.max(since, ...sections.map(s => s.leave ?? 0)) + 1_000;
    end = Math.min(newest, Math.max(newest - KEEP_MS + span, end + by * span));
    draw();
  }

  return { clear, poll, draw, freeze, fit, follow, zoom, scroll, lanes: [],
    setColors: c => { colors = c; },
    isLive: () => live,
    // For the browser test: what is drawn.
    sections: () => sections };
})();
