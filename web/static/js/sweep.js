// @ts-check
// Sweeps (issue 24). Without an id: every sweep, newest first, with its best trial. With one
// (GET /api/sweeps/{id}, polled every 4 s while it runs): its trials as a table (one column per parameter,
// the metric's final and best values, status; sortable by any column; the best marked ★), a
// parallel-coordinates chart and one metric-vs-parameter scatter per parameter (drawn on canvas), the
// metric's curves of the top trials overlaid (uPlot through charts.js), and the actions: pause, resume,
// cancel, and "train the best longer" (POST /api/sweeps/{id}/extend-best: one new job).
import { api, ApiError } from "./api.js";
import { COLORS, LineChart, seriesStyle } from "./charts.js";
import { $, h, setText } from "./dom.js";
import { fmtNumber, statusBadge } from "./format.js";
import { may } from "./me.js";

/** @typedef {import("../../types/api").components["schemas"]["SweepDetail"]} SweepDetail */
/** @typedef {import("../../types/api").components["schemas"]["SweepPublic"]} SweepPublic */
/** @typedef {import("../../types/api").components["schemas"]["TrialPublic"]} TrialPublic */

const POLL_MS = 4000;
const TOP_CURVES = 5;
const root = /** @type {HTMLElement} */ ($("#sweep-root"));
const sweepId = Number(root.dataset.sweepId || 0);
/** @type {{key: string, dir: number}} the table's sort: a column key and 1 (ascending) or -1 */
const sort = { key: "rank", dir: 1 };
/** @type {SweepDetail | null} */
let detail = null;
/** @type {LineChart | null} */
let chart = null;
let curvesKey = "";

/** @param {string} text @param {boolean} [bad] */
function message(text, bad = false) {
  const el = /** @type {HTMLElement} */ ($("#sweep-message"));
  el.hidden = !text;
  el.classList.toggle("alert-error", bad);
  setText(el, text);
}

/** @param {unknown} v */
function fmtParam(v) {
  return typeof v === "number" ? fmtNumber(v) : v === undefined || v === null ? "–" : String(v);
}

// ---- the list of sweeps ----

async function loadList() {
  const page = await api("/sweeps", { query: { limit: 100 } });
  /** @type {SweepPublic[]} */
  const sweeps = page.sweeps;
  $("#sweep-head")?.replaceChildren(h("tr", {}, ...["Sweep", "Status", "Method", "Metric", "Trials", "Best"].map((c) => h("th", { scope: "col" }, c))));
  $("#sweep-body")?.replaceChildren(...sweeps.map((s) => h("tr", {},
    h("td", {}, h("a", { href: `/sweeps/${s.id}` }, `${s.name} #${s.id}`)),
    h("td", {}, statusBadge(s.status)), h("td", {}, s.method), h("td", {}, `${s.metric} (${s.goal})`),
    h("td", { class: "num" }, String(s.trials_total)),
    h("td", {}, s.best_job_id ? h("a", { href: `/jobs/${s.best_job_id}` }, `${fmtNumber(s.best_value)} (job ${s.best_job_id})`) : "–"))));
  setText($("#sweep-summary"), sweeps.length ? "" : "No sweep yet: start one with `rankzero sweep sweep.yaml` (docs/sweeps.md).");
}

// ---- one sweep ----

/** @param {TrialPublic} t @param {string} key @param {number} rank */
function sortValue(t, key, rank) {
  if (key === "rank") return rank;
  if (key === "trial") return t.number;
  if (key === "status") return t.status;
  if (key === "final") return t.final ?? null;
  if (key === "best") return t.best ?? null;
  if (key === "step") return t.step;
  return /** @type {any} */ (t.params)[key.slice(2)] ?? null;
}

/** @param {SweepDetail} d */
function renderTable(d) {
  const params = d.parameters;
  const cols = [["rank", "#"], ["trial", "Trial"], ["status", "Status"], ...params.map((p) => [`p:${p}`, p]),
    ["final", `${d.metric} (final)`], ["best", `${d.metric} (best)`], ["step", "Step"]];
  $("#sweep-head")?.replaceChildren(h("tr", {}, ...cols.map(([key, label]) => {
    const on = sort.key === key;
    const button = h("button", { type: "button" }, label, on ? (sort.dir > 0 ? " ▲" : " ▼") : "");
    button.addEventListener("click", () => {
      sort.dir = sort.key === key ? -sort.dir : 1;
      sort.key = key;
      renderTable(d);
    });
    return h("th", { scope: "col", "aria-sort": on ? (sort.dir > 0 ? "ascending" : "descending") : null }, button);
  })));
  const ranked = d.trials.map((t, i) => ({ t, rank: i + 1 }));
  ranked.sort((a, b) => {
    const x = sortValue(a.t, sort.key, a.rank);
    const y = sortValue(b.t, sort.key, b.rank);
    if (x === y) return a.rank - b.rank;
    if (x === null) return 1; // no value: last, whichever way
    if (y === null) return -1;
    return (x < y ? -1 : 1) * sort.dir;
  });
  $("#sweep-body")?.replaceChildren(...ranked.map(({ t, rank }) => h("tr", { class: t.is_best ? "best" : null, dataset: { jobId: t.job_id } },
    h("td", { class: "num" }, t.is_best ? h("span", { title: "the best trial", "aria-label": `${rank}, the best` }, `★ ${rank}`) : String(rank)),
    h("td", {}, h("a", { href: `/jobs/${t.job_id}` }, `${t.number} · job ${t.job_id}`)),
    h("td", {}, statusBadge(t.status)),
    ...params.map((p) => h("td", { class: "num" }, fmtParam(/** @type {any} */ (t.params)[p]))),
    h("td", { class: "num" }, fmtNumber(t.final)), h("td", { class: "num" }, fmtNumber(t.best)),
    h("td", { class: "num" }, String(t.step)))));
}

/** A numeric axis for a parameter (log when every value is > 0 and they span 2 decades); choices by position.
 * @param {unknown[]} values */
function axisOf(values) {
  const nums = values.filter((v) => typeof v === "number").map(Number);
  if (nums.length !== values.length || !nums.length) {
    const cats = Array.from(new Set(values.map(String)));
    return { at: (/** @type {unknown} */ v) => (cats.length < 2 ? 0.5 : cats.indexOf(String(v)) / (cats.length - 1)), label: (/** @type {number} */ f) => cats[Math.round(f * (cats.length - 1))] ?? "" };
  }
  let lo = Math.min(...nums), hi = Math.max(...nums);
  const log = lo > 0 && hi / lo >= 100;
  const f = (/** @type {number} */ v) => (log ? Math.log10(v) : v);
  if (f(hi) === f(lo)) { hi = lo + 1; }
  return { at: (/** @type {unknown} */ v) => (f(Number(v)) - f(lo)) / (f(hi) - f(lo) || 1), label: (/** @type {number} */ fr) => fmtNumber(log ? 10 ** (f(lo) + fr * (f(hi) - f(lo))) : lo + fr * (hi - lo), 3) };
}

/** @param {HTMLCanvasElement} canvas @param {number} height */
function prepare(canvas, height) {
  const width = Math.max(200, canvas.clientWidth || canvas.parentElement?.clientWidth || 300);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.height = `${height}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px system-ui, sans-serif";
  return { ctx, width };
}

/** @param {SweepDetail} d */
function drawParallel(d) {
  const canvas = /** @type {HTMLCanvasElement | null} */ ($("#sweep-parallel"));
  if (!canvas) return;
  const rows = d.trials.filter((t) => t.final !== null && t.final !== undefined);
  const height = 260;
  const { ctx, width } = prepare(canvas, height);
  const names = [...d.parameters, d.metric];
  const axes = names.map((n, i) => axisOf(rows.map((t) => (i < d.parameters.length ? /** @type {any} */ (t.params)[n] : t.final))));
  const left = 16, right = 16, top = 22, bottom = 30;
  const x = (/** @type {number} */ i) => left + (names.length === 1 ? 0.5 : i / (names.length - 1)) * (width - left - right);
  const y = (/** @type {number} */ f) => top + (1 - f) * (height - top - bottom);
  ctx.strokeStyle = "#9ca3af"; ctx.fillStyle = "#374151";
  names.forEach((n, i) => {
    ctx.beginPath(); ctx.moveTo(x(i), y(0)); ctx.lineTo(x(i), y(1)); ctx.stroke();
    ctx.textAlign = i === 0 ? "left" : i === names.length - 1 ? "right" : "center";
    ctx.fillText(n.length > 18 ? `${n.slice(0, 17)}…` : n, x(i), height - 10);
    if (rows.length) { ctx.fillText(axes[i].label(1), x(i), top - 8); }
  });
  const metricAxis = axes[names.length - 1];
  const good = (/** @type {TrialPublic} */ t) => { const f = metricAxis.at(t.final); return d.goal === "minimize" ? 1 - f : f; };
  for (const t of [...rows].sort((a, b) => good(a) - good(b))) {
    ctx.strokeStyle = t.is_best ? COLORS[1] : `rgba(0, 114, 178, ${0.15 + 0.6 * good(t)})`;
    ctx.lineWidth = t.is_best ? 3 : 1.5;
    ctx.beginPath();
    names.forEach((n, i) => {
      const v = i < d.parameters.length ? /** @type {any} */ (t.params)[n] : t.final;
      const px = x(i), py = y(axes[i].at(v));
      if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
    });
    ctx.stroke();
  }
  if (!rows.length) { ctx.textAlign = "center"; ctx.fillText("no trial has reported the metric yet", width / 2, height / 2); }
}

/** @param {SweepDetail} d */
function drawScatters(d) {
  const box = $("#sweep-scatters");
  if (!box) return;
  const rows = d.trials.filter((t) => t.final !== null && t.final !== undefined);
  if (box.childElementCount !== d.parameters.length) {
    box.replaceChildren(...d.parameters.map((p) => h("figure", {}, h("canvas", { role: "img", "aria-label": `${d.metric} against ${p}` }))));
  }
  const metricAxis = axisOf(rows.map((t) => t.final));
  d.parameters.forEach((p, i) => {
    const canvas = /** @type {HTMLCanvasElement} */ (box.children[i].querySelector("canvas"));
    const height = 180;
    const { ctx, width } = prepare(canvas, height);
    const axis = axisOf(rows.map((t) => /** @type {any} */ (t.params)[p]));
    const left = 8, bottom = 26, top = 16;
    ctx.strokeStyle = "#9ca3af";
    ctx.strokeRect(left, top, width - 2 * left, height - top - bottom);
    ctx.fillStyle = "#374151"; ctx.textAlign = "center";
    ctx.fillText(`${d.metric} vs ${p}`, width / 2, 11);
    ctx.textAlign = "left"; ctx.fillText(axis.label(0), left, height - 8);
    ctx.textAlign = "right"; ctx.fillText(axis.label(1), width - left, height - 8);
    for (const t of rows) {
      const px = left + 6 + axis.at(/** @type {any} */ (t.params)[p]) * (width - 2 * left - 12);
      const py = top + 6 + (1 - metricAxis.at(t.final)) * (height - top - bottom - 12);
      ctx.fillStyle = t.is_best ? COLORS[1] : COLORS[0];
      ctx.beginPath(); ctx.arc(px, py, t.is_best ? 5 : 3.5, 0, 2 * Math.PI); ctx.fill();
    }
  });
}

/** The metric of the best few trials, overlaid. @param {SweepDetail} d */
async function drawCurves(d) {
  const top = d.trials.filter((t) => t.final !== null && t.final !== undefined).slice(0, TOP_CURVES);
  const figure = /** @type {HTMLElement | null} */ ($("#sweep-curves"));
  if (!figure || !top.length) return;
  const key = top.map((t) => `${t.job_id}:${t.step}`).join();
  if (key === curvesKey) return;
  curvesKey = key;
  const query = { name: d.metric, max_points: 500 };
  const answers = await Promise.all(top.map((t) => api(`/jobs/${t.job_id}/metrics`, { query })));
  const tables = answers.map((a) => {
    const points = a.series[0]?.points || [];
    return { xs: points.map((/** @type {{step: number}} */ p) => p.step), ys: points.map((/** @type {{value: number}} */ p) => p.value) };
  });
  const series = top.map((t, i) => ({ label: `trial ${t.number}${t.is_best ? " ★" : ""}`, ...seriesStyle(i) }));
  figure.hidden = false;
  setText($("#sweep-curves-title"), `${d.metric} of the best ${top.length} trial${top.length > 1 ? "s" : ""}`);
  if (chart) chart.destroy();
  chart = new LineChart(figure, { series, x: "step", yLabel: d.metric.split("/").pop(), log: "auto" });
  chart.setTables(tables);
}

/** @param {SweepDetail} d */
function renderHead(d) {
  setText($("#sweep-title"), `${d.name} #${d.id}`);
  const best = d.best_job_id ? `; best: job ${d.best_job_id}, ${d.metric} ${fmtNumber(d.best_value)}` : "";
  setText($("#sweep-summary"), `${d.status} · ${d.method} · ${d.metric} (${d.goal}) · ${d.trials.length} of ${d.trials_total} trials, ${d.parallel} at a time${best}${d.note ? ` · ${d.note}` : ""}`);
  const actions = /** @type {HTMLElement} */ ($("#sweep-actions"));
  actions.hidden = false;
  // Only what the table (core/permissions.py) lets her do to this sweep: its owner or an admin.
  const owner = d.owner_id ?? null;
  /** @type {HTMLButtonElement} */ ($("#sweep-pause")).hidden = d.status !== "running" || !may("sweep.pause", owner);
  /** @type {HTMLButtonElement} */ ($("#sweep-resume")).hidden = d.status !== "paused" || !may("sweep.pause", owner);
  /** @type {HTMLButtonElement} */ ($("#sweep-cancel")).hidden = (d.status !== "running" && d.status !== "paused") || !may("sweep.cancel", owner);
  /** @type {HTMLButtonElement} */ ($("#sweep-extend")).hidden = !may("sweep.extend", owner);
  const extend = /** @type {HTMLButtonElement} */ ($("#sweep-extend"));
  // A script's length is its own: without a length param (params.steps) it cannot be trained longer; say why.
  extend.disabled = !d.best_job_id || !!d.extend_refusal;
  extend.title = d.extend_refusal
    ? `Not offered: ${d.extend_refusal}`
    : "Resume the best trial from its newest checkpoint for twice as long";
  const note = /** @type {HTMLElement} */ ($("#sweep-extend-note"));
  note.hidden = !d.extend_refusal || extend.hidden;
  note.textContent = d.extend_refusal ? `"Train the best longer" is not offered: ${d.extend_refusal}.` : "";
}

async function loadSweep() {
  /** @type {SweepDetail} */
  const d = await api(`/sweeps/${sweepId}`);
  detail = d;
  renderHead(d);
  renderTable(d);
  drawParallel(d);
  drawScatters(d);
  await drawCurves(d);
  return d;
}

/** @param {string} action */
async function act(action) {
  try {
    if (action === "extend") {
      const job = await api(`/sweeps/${sweepId}/extend-best`, { method: "POST", body: {} });
      message(`Job ${job.id} queued: the best trial, resumed for longer.`);
      window.location.assign(`/jobs/${job.id}`);
      return;
    }
    if (action === "cancel" && !window.confirm("Cancel this sweep and stop its running trials?")) return;
    await api(`/sweeps/${sweepId}/${action}`, { method: "POST" });
    message("");
    await loadSweep();
  } catch (err) {
    message(err instanceof ApiError ? err.message : String(err), true);
  }
}

async function poll() {
  try {
    const d = sweepId ? await loadSweep() : (await loadList(), null);
    if (d && (d.status === "running" || d.status === "paused" || d.trials.some((t) => !["succeeded", "failed", "cancelled", "pruned"].includes(t.status)))) {
      window.setTimeout(poll, POLL_MS);
    }
  } catch (err) {
    message(err instanceof ApiError ? err.message : String(err), true);
  }
}

for (const action of ["pause", "resume", "cancel", "extend"]) {
  $(`#sweep-${action}`)?.addEventListener("click", () => act(action));
}
let resizing = 0;
window.addEventListener("resize", () => {
  window.clearTimeout(resizing);
  resizing = window.setTimeout(() => { if (detail) { drawParallel(detail); drawScatters(detail); } }, 150);
});
poll();
