"use strict";
// The teaching page: the audit (GET /live), the lock timeline (timeline.js, GET /trace), the
// lessons (GET /lessons, POST /admin/lesson) and their results side by side.

const $ = id => document.getElementById(id);
const POLL_MS = 400;          // the audit, read twice a second or more
const WINDOW_S = 60;          // the sales chart's width in time
let COLORS = {};               // variant -> colour, from GET /variants (the registry)
// [field of /stats, alarm when above 0, shown only when the sale has it]
const FIGURES = [
  ["initial"], ["remaining"], ["sold"],
  ["oversold", true], ["lost_updates", true], ["lock_overlaps", true],
  ["lock_busy"], ["lock_lost"], ["sold_out"], ["fenced"], ["unconfirmed"],
  ["buyers"], ["over_limit.units", true], ["limit_reached"], ["idempotency.replayed"],
  ["close.sold_after_close", true, true], ["multi.timed_out", false, true],
  ["optimistic.conflicts", false, true],
  ["payment.reserved", false, true], ["payment.paid", false, true], ["payment.expired", false, true],
  ["orders_of_record.in_database", false, true], ["orders_of_record.backlog", false, true],
  ["orders_of_record.drift", true, true],
];
const RECONCILE_EVERY = 6;    // polls between two reconciliations with the orders' database
let polls = 0;
let record = null;            // the last orders_of_record, kept between reconciliations
let lastStats = null;

// The token is kept in this tab only (sessionStorage), never sent anywhere but /admin.
let token = sessionStorage.getItem("seckill-admin-token") || "";
$("token").value = token;
$("token").addEventListener("change", () => { token = $("token").value; sessionStorage.setItem("seckill-admin-token", token); });

let product = $("product").value;
$("product").addEventListener("change", () => { product = $("product").value.trim() || "101"; resetHistory(); Timeline.clear(); });

// ---- the audit ----
let history = [];             // [{t, perVariant: {variant: units/s}}]
let last = null;              // the previous /stats, and when it came
const lockSeen = {};          // shard -> {ttl, at, holder, renewals}

function resetHistory() { history = []; last = null; record = null; polls = 0; for (const k in lockSeen) delete lockSeen[k]; }

async function poll() {
  try {
    const reconcile = polls++ % RECONCILE_EVERY === 0;
    const r = await fetch("/live?product=" + encodeURIComponent(product) + (reconcile ? "&orders=1" : ""), { cache: "no-store" });
    if (!r.ok) { $("status").textContent = t("stats-failed", r.status); return; }
    const s = (await r.json()).stats;
    if (!s) { $("status").textContent = t("no-stock", product); return; }
    if (reconcile) record = s.orders_of_record || null;
    else if (record) s.orders_of_record = record;
    $("status").textContent = t("live-at") + new Date().toLocaleTimeString();
    $("status").dataset.said = "1";
    lastStats = s;
    render(s, performance.now());
    await Timeline.poll(product);
  } catch (e) {
    $("status").textContent = t("no-answer");
  }
}

function render(s, now) {
  const field = key => key.split(".").reduce((o, k) => o?.[k], s);
  $("figures").innerHTML = FIGURES.filter(([key, , optional]) => !optional || field(key) !== undefined)
    .map(([key, bad, optional]) => {
      // An optional figure that is null (the database not answering, drift while entries wait): a dash.
      const v = field(key) ?? (optional ? "—" : 0);
      const cls = bad ? (v > 0 ? "alarm" : "ok") : "";
      return `<div class="figure ${cls}" data-field="${key}"><b>${v}</b><span>${t("f-" + key)}</span></div>`;
    }).join("");

  // Goodput per variant: how many more units each sold since the last poll.
  const point = { t: now, perVariant: {} };
  if (last && s.sold >= last.s.sold) {
    const dt = (now - last.at) / 1000;
    for (const [variant, sold] of Object.entries(s.by_variant)) {
      const before = last.s.by_variant[variant] || 0;
      point.perVariant[variant] = Math.max(0, sold - before) / dt;
    }
  }
  history.push(point);
  history = history.filter(p => now - p.t < WINDOW_S * 1000);
  last = { s, at: now };
  drawChart(now);

  const perShard = s.initial / Math.max(1, s.shards);
  $("shards").innerHTML = s.shard_remaining.map((left, i) =>
    bar(`#${i} ${s.shard_nodes[i] || ""}`, left, Math.max(perShard, left, 1))).join("");
  const biggest = o => Math.max(1, ...Object.values(o));
  const none = `<p class="muted">${t("no-sales")}</p>`;
  $("instances").innerHTML = Object.entries(s.by_instance).map(([k, v]) => bar(k, v, biggest(s.by_instance))).join("") || none;
  $("variants").innerHTML = Object.entries(s.by_variant).map(([k, v]) => bar(k, v, biggest(s.by_variant))).join("") || none;

  for (const lock of s.locks) {
    const seen = lockSeen[lock.shard];
    const renewed = seen && lock.held && seen.holder === lock.holder && lock.ttl_ms !== null && seen.ttl !== null &&
      lock.ttl_ms > seen.ttl - (now - seen.at) + 100;
    lockSeen[lock.shard] = { ttl: lock.ttl_ms, at: now, held: lock.held, holder: lock.holder,
      forever: lock.never_expires, renewals: (seen ? seen.renewals : 0) + (renewed ? 1 : 0), flash: renewed };
  }
  drawLocks();
}

function bar(label, value, max) {
  const pct = Math.max(0, Math.min(100, 100 * value / max));
  return `<div class="bar"><span class="label" title="${label}">${label}</span><span class="track"><span class="fill" style="display:block;width:${pct}%"></span></span><span class="value">${value}</span></div>`;
}

// TTLs count down between polls.
function drawLocks() {
  const now = performance.now();
  $("locks").innerHTML = Object.entries(lockSeen).map(([shard, l]) => {
    let ttl = t("free");
    if (l.forever) ttl = `<span class="forever">${t("never-expires")}</span>`;
    else if (l.held && l.ttl !== null) ttl = Math.max(0, (l.ttl - (now - l.at)) / 1000).toFixed(1) + " s";
    const who = l.held ? `<span class="held">${l.holder || t("held")}</span>` : '<span class="muted">—</span>';
    const cls = l.flash ? ' class="renewed"' : "";
    l.flash = false;
    return `<tr${cls}><td>${shard}</td><td>${who}</td><td class="num">${ttl}</td><td class="num">${l.renewals}</td></tr>`;
  }).join("");
}

function drawChart(now) {
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 34;
  ctx.clearRect(0, 0, w, h);
  const variants = [...new Set(history.flatMap(p => Object.keys(p.perVariant)))];
  const top = Math.max(10, ...history.flatMap(p => Object.values(p.perVariant))) * 1.1;
  ctx.strokeStyle = "#d9dee5"; ctx.fillStyle = "#5f6b7a"; ctx.font = "12px system-ui";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad + (-(h - 2 * pad) * i) / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 8, y); ctx.stroke();
    ctx.fillText(Math.round((top * i) / 4), 2, y + 4);
  }
  ctx.fillText(t("last-s", WINDOW_S), w - 80, h - 8);
  const x = tm => pad + ((w - pad - 8) * (WINDOW_S * 1000 - (now - tm))) / (WINDOW_S * 1000);
  const y = v => h - pad - ((h - 2 * pad) * v) / top;
  for (const variant of variants) {
    ctx.strokeStyle = COLORS[variant] || "#333"; ctx.lineWidth = 2.5; ctx.beginPath();
    history.forEach((p, i) => { const v = p.perVariant[variant] || 0; i ? ctx.lineTo(x(p.t), y(v)) : ctx.moveTo(x(p.t), y(v)); });
    ctx.stroke();
  }
  $("legend").innerHTML = variants.map(v => `<span><i style="background:${COLORS[v] || "#333"}"></i>${v}</span>`).join("");
}

// ---- lessons ----
let lessons = [];
let current = null;           // the lesson this tab started
const title = l => LANG === "zh" ? l.title_zh : l.title;
const watch = l => LANG === "zh" ? l.watch_zh : l.watch;

async function loadLessons() {
  const r = await fetch("/lessons");
  lessons = await r.json();
  drawLessons();
}

// The texts that change as the page goes, before there is anything else to say.
function drawIntro() {
  if (!lastStats && !$("status").dataset.said) $("status").textContent = t("connecting");
  if (!$("lesson-status").dataset.state) $("lesson-status").textContent = t("lessons-intro");
  const lesson = lessons.find(l => l.name === current);
  $("watch").textContent = lesson ? watch(lesson) : t("watch-intro");
}

function drawLessons() {
  $("lessons").innerHTML = lessons.map(l => {
    const needs = l.available ? "" : ` <span class="lesson-needs">(${t("needs", l.needs)})</span>`;
    return `<button id="lesson-${l.name}" data-lesson="${l.name}" title="${title(l)}"${l.available ? "" : " disabled"}>${title(l)}${needs}</button>`;
  }).join(" ");
  for (const b of document.querySelectorAll("#lessons [data-lesson]")) {
    b.classList.toggle("on", b.dataset.lesson === current);
    b.addEventListener("click", () => startLesson(b.dataset.lesson));
  }
  drawIntro();
}

function admin(path, options = {}) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = "Bearer " + token;
  return fetch(path, { ...options, headers });
}

async function startLesson(name) {
  current = name;
  runId = null;
  // Until this lesson's first status: a "done" left by the last one is not this one's.
  $("lesson-status").dataset.state = "starting";
  drawLessons();
  resetHistory();
  Timeline.clear();
  const r = await admin("/admin/lesson", { method: "POST", body: JSON.stringify({ lesson: name, product }) });
  if (r.status === 401) { $("token-box").hidden = false; $("lesson-status").textContent = t("needs-token"); return; }
  const body = await r.json();
  if (!r.ok) { $("lesson-status").textContent = t("could-not-start", body.error || r.status); return; }
  runId = body.run;
  watchLesson();
}

let lessonTimer = null;
let lessonStatus = null;       // the last status of this tab's lesson

function drawLessonStatus() {
  const st = lessonStatus;
  if (!st) return;
  const codes = Object.entries(st.statuses).map(([c, n]) => `${n}×${c}`).join(" ");
  const state = st.running ? "running" : st.cancelled ? "cancelled" : "done";
  $("lesson-status").textContent = t("requests-progress", st.lesson, st.sent, st.total, (st.elapsed_ms / 1000).toFixed(1)) +
    (codes ? ` · ${codes}` : "") + ` · ${t(state)}` + (st.error ? ` · ${st.error}` : "");
}
function watchLesson() {
  clearInterval(lessonTimer);
  lessonTimer = setInterval(async () => {
    const r = await admin("/admin/lesson");
    if (!r.ok) return;
    const st = await r.json();
    // Behind Nginx another instance may answer: only the one running this tab's lesson counts.
    if (!st || st.run !== runId) return;
    lessonStatus = st;
    drawLessonStatus();
    $("cancel").hidden = !st.running;
    keepResults(st);
    if (!st.running) {
      clearInterval(lessonTimer);
      // Frozen for discussion; the last poll first, so the last bars are closed.
      await poll();
      Timeline.fit();
    }
    $("lesson-status").dataset.state = st.running ? "running" : "done";
  }, 500);
}
// Behind Nginx: asked until the instance running the lesson is the one that answers.
$("cancel").addEventListener("click", async () => {
  for (let i = 0; i < 8; i++) {
    const r = await admin("/admin/lesson/cancel", { method: "POST" });
    const st = r.ok ? await r.json() : null;
    if (st && st.run === runId) return;
  }
});

// ---- side by side ----
// Each phase's result, kept in this tab (sessionStorage) as a row, and drawn small.
let results = JSON.parse(sessionStorage.getItem("seckill-results") || "[]");
let runId = null;             // the run of the lesson this tab started (the server's id)

function keepResults(status) {
  const run = `${status.lesson}@${status.product}#${runId}`;
  for (const [i, r] of status.results.entries()) {
    if (!results.some(k => k.run === run && k.index === i)) results.push({ ...r, run, index: i });
  }
  sessionStorage.setItem("seckill-results", JSON.stringify(results));
  drawResults();
}

function drawResults() {
  const num = (v, digits = 0) => Number(v).toFixed(digits);
  $("results").querySelector("tbody").innerHTML = results.map(r => {
    const lesson = lessons.find(l => l.name === r.lesson);
    const bad = v => v > 0 ? ' class="num bad"' : ' class="num"';
    return `<tr data-lesson="${r.lesson}"><td>${lesson ? title(lesson).split(/[:：]/)[0] : r.lesson}</td><td>${r.phase}</td>` +
      `<td class="num" data-col="sold">${r.sold}</td><td${bad(r.oversold)} data-col="oversold">${r.oversold}</td>` +
      `<td${bad(r.lost_updates)} data-col="lost_updates">${r.lost_updates}</td><td${bad(r.lock_overlaps)} data-col="lock_overlaps">${r.lock_overlaps}</td>` +
      `<td class="num" data-col="goodput">${num(r.goodput, 1)}</td><td class="num" data-col="p99_ms">${num(r.p99_ms, 1)}</td></tr>` +
      (r.door ? `<tr class="door" data-lesson="${r.lesson}" data-first-share="${r.door.first_share}" ` +
        `data-told="${r.door.told_sold_out}" data-undersold="${r.door.undersold}" data-flagged="${r.door.flagged}">` +
        `<td></td><td colspan="7" class="muted">` +
        t("door-line", num(r.door.first_share * 100), r.door.queue, num(r.door.admitted_per_s, 1),
          r.door.told_sold_out, r.door.flagged, r.door.undersold, r.door.remaining) + `</td></tr>` : "");
  }).join("");
  $("no-runs").hidden = results.length > 0;
  drawMultiples();
}

// Small multiples: one chart per figure, a bar per row, in the variant's colour.
function drawMultiples() {
  const charts = [["goodput", "col-goodput"], ["p99_ms", "col-p99"], ["oversold", "col-oversold"],
    ["lock_overlaps", "col-overlaps"], ["lost_updates", "col-lost"], ["sold", "col-sold"]];
  $("multiples").innerHTML = results.length ? charts.map(([key, label]) =>
    `<figure><figcaption>${t(label)}</figcaption><canvas data-multiple="${key}"></canvas></figure>`).join("") : "";
  for (const canvas of document.querySelectorAll("[data-multiple]")) {
    const key = canvas.dataset.multiple;
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 200, h = 110;
    canvas.width = w * ratio; canvas.height = h * ratio;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const top = Math.max(1, ...results.map(r => r[key]));
    const bw = Math.max(3, (w - 4) / results.length - 2);
    results.forEach((r, i) => {
      const bh = ((h - 14) * r[key]) / top;
      ctx.fillStyle = (key !== "goodput" && key !== "p99_ms" && key !== "sold" && r[key] > 0) ? "#c62828" : (COLORS[r.variant] || "#3d6fb6");
      ctx.fillRect(2 + i * (bw + 2), h - 12 - bh, bw, bh);
    });
    ctx.fillStyle = "#5f6b7a"; ctx.font = "10px system-ui";
    ctx.fillText(String(Math.round(top * 10) / 10), 2, 9);
  }
}
$("results-clear").addEventListener("click", () => { results = []; sessionStorage.removeItem("seckill-results"); drawResults(); });

// ---- the timeline's controls ----
$("timeline-freeze").addEventListener("click", () => Timeline.freeze());
$("timeline-follow").addEventListener("click", () => Timeline.follow());
$("timeline-earlier").addEventListener("click", () => Timeline.scroll(-0.5));
$("timeline-later").addEventListener("click", () => Timeline.scroll(0.5));
$("timeline-zoom-in").addEventListener("click", () => Timeline.zoom(0.5));
$("timeline-zoom-out").addEventListener("click", () => Timeline.zoom(2));
$("timeline").addEventListener("wheel", e => { e.preventDefault(); Timeline.zoom(e.deltaY > 0 ? 1.25 : 0.8); }, { passive: false });

// ---- language ----
$("language").addEventListener("click", toggleLanguage);
window.addEventListener("languagechange-seckill", () => {
  drawLessons(); drawResults(); Timeline.draw(); drawIntro(); drawLessonStatus();
  if (lastStats) render(lastStats, performance.now());
});

async function loadVariants() {
  const r = await fetch("/variants");
  for (const v of await r.json()) COLORS[v.name] = v.color;
  Timeline.setColors(COLORS);
}

translatePage();
drawIntro();
loadVariants().catch(e => window.__pageErrors.push(String(e)));
loadLessons().then(drawResults).catch(e => window.__pageErrors.push(String(e)));
poll();
setInterval(poll, POLL_MS);
setInterval(drawLocks, 100);
// Live, the bars grow five times a second: enough to follow, light on a class's laptop.
setInterval(() => { if (Timeline.isLive()) Timeline.draw(); }, 200);
