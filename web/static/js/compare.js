// @ts-check
// Compare: pick runs from a searchable list, overlay any metric they logged, with the x axis by
// optimizer step, epoch, samples seen (step × global batch) or time since start, so runs of different
// lengths and strategies line up; a table of what differs between their specs. The state lives in the
// URL (?ids=3,5&metric=val/loss&x=samples), so a comparison can be shared.
import { api } from "./api.js";
import { $, h, setText, debounce } from "./dom.js";
import { LineChart, X_FORMATS, fmtValue, seriesStyle } from "./charts.js";
import { fmtInt, parseTime, statusBadge } from "./format.js";
import { outcomeOf } from "./job_charts.js";

const MAX_RUNS = 10;
const MAX_POINTS = 700; // per run: ~350 min/max buckets across the chart; a 100k-step run then reads 256-step rollups, 16× fewer rows than at 2000
const LIST_SIZE = 50;
const SMOOTHING_KEY = "rankzero.smoothing";

const params = new URLSearchParams(location.search);
const state = {
  ids: readIds(params.get("ids")),
  metric: params.get("metric") || "train/loss",
  x: X_FORMATS[params.get("x")] ? params.get("x") : "step",
};
const runs = new Map(); // id -> {job, series: Map(metric -> {xs, ys, total}), names: string[] | null}
let chart = null;
let generation = 0;

function readIds(text) {
  return Array.from(new Set((text || "").split(/[\s,]+/).map((s) => parseInt(s, 10))
    .filter((n) => Number.isInteger(n) && n > 0))).slice(0, MAX_RUNS);
}

function writeUrl() {
  const q = new URLSearchParams();
  if (state.ids.length) q.set("ids", state.ids.join(","));
  q.set("metric", state.metric);
  if (state.x !== "step") q.set("x", state.x);
  history.replaceState(null, "", `?${q}`);
}

function message(text, kind = "") {
  const el = $("#compare-message");
  el.hidden = !text;
  el.className = `alert ${kind}`;
  setText(el, text || "");
}

// ---- the run picker ---------------------------------------------------------------------------

let listed = [];
async function loadList() {
  const name = $("#run-search").value.trim().replace(/[^A-Za-z0-9._-]/g, "");
  try {
    const page = await api("/jobs", { query: { name, limit: LIST_SIZE } });
    listed = page.items;
    setText($("#run-list-state"), page.total > page.items.length
      ? `The newest ${page.items.length} of ${fmtInt(page.total)} runs${name ? ` matching “${name}”` : ""}.`
      : page.total ? "" : (name ? `No run's name contains “${name}”.` : "No runs yet."));
    renderList();
  } catch (err) {
    setText($("#run-list-state"), `Could not list runs: ${err.message}`);
  }
}

function renderList() {
  $("#run-list").replaceChildren(...listed.map((j) => {
    const picked = state.ids.includes(j.id);
    const box = h("input", {
      type: "checkbox", id: `pick-${j.id}`, checked: picked,
      disabled: !picked && state.ids.length >= MAX_RUNS, dataset: { jobId: j.id },
    });
    box.addEventListener("change", () => toggle(j.id, box.checked));
    return h("li", { class: picked ? "picked" : "" },
      h("label", { for: box.id }, box,
        h("span", { class: "run-name" }, j.name, h("span", { class: "muted" }, ` #${j.id}`)),
        statusBadge(j.status),
        h("span", { class: "muted run-meta" }, j.strategy)));
  }));
  $("#run-list").dataset.loaded = "true";
}

function toggle(id, on) {
  if (on && !state.ids.includes(id) && state.ids.length < MAX_RUNS) state.ids.push(id);
  if (!on) state.ids = state.ids.filter((i) => i !== id);
  renderList();
  show();
}

// ---- data -------------------------------------------------------------------------------------

async function loadRun(id) {
  let run = runs.get(id);
  if (!run) {
    run = { job: null, series: new Map(), names: null };
    runs.set(id, run);
  }
  const want = state.metric;
  const tasks = [];
  if (!run.job) tasks.push(api(`/jobs/${id}`).then((j) => { run.job = j; }));
  if (!run.series.has(want)) {
    tasks.push(api(`/jobs/${id}/metrics`, { query: { name: want, max_points: MAX_POINTS } }).then((body) => {
      const s = (body.series || []).find((x) => x.name === want);
      run.series.set(want, s ? { xs: s.points.map((p) => p.step), ys: s.points.map((p) => p.value), total: s.total_points } : null);
    }));
  }
  await Promise.all(tasks);
  return run;
}

/** Every series name the picked runs logged, for the metric list (read after the chart is drawn). */
async function loadNames() {
  await Promise.all(state.ids.map(async (id) => {
    const run = runs.get(id);
    if (!run || run.names) return;
    try {
      const body = await api(`/jobs/${id}/metrics`, { query: { max_points: 10 } });
      run.names = (body.series || []).map((s) => s.name);
    } catch { run.names = []; }
  }));
  const names = new Set([state.metric]);
  for (const id of state.ids) for (const n of runs.get(id)?.names || []) names.add(n);
  const sorted = Array.from(names).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const select = $("#compare-metric");
  if (Array.from(select.options).map((o) => o.value).join() !== sorted.join()) {
    select.replaceChildren(...sorted.map((n) => h("option", { value: n }, n)));
  }
  select.value = state.metric;
}

function rank(name) {
  if (name.startsWith("val/")) return 0;
  if (name.startsWith("train/")) return 1;
  if (name.startsWith("sys/")) return 3;
  return 2;
}

// ---- the x axis -------------------------------------------------------------------------------

/** x per step for a run on the chosen axis (every axis is step × a run's own factor); null when this run
 * cannot say (no epoch or start time known). */
function xFactor(job, xs) {
  if (state.x === "step") return 1;
  if (state.x === "samples") return job.global_batch_size || null;
  if (state.x === "epoch") return job.epoch > 0 && job.step > 0 ? job.epoch / job.step : null;
  const start = parseTime(job.started_at);
  const end = parseTime(job.finished_at) ?? Date.now();
  const last = job.step || xs[xs.length - 1];
  if (start === null || !last) return null;
  return (end - start) / 1000 / last;
}

let drawnRuns = []; // [{id, factor}] in the chart's series order
let fullTables = [];
let zoomGeneration = 0;

/** A drag-zoom re-reads each run's points in the visible range (its steps = x ÷ its factor), in detail. */
async function zoomFetch(min, max) {
  const mine = ++zoomGeneration;
  const tables = await Promise.all(drawnRuns.map(async ({ id, factor }) => {
    if (!factor) return { xs: [], ys: [] };
    const start = Math.max(0, Math.floor(min / factor));
    const end = Math.max(start, Math.ceil(max / factor));
    const body = await api(`/jobs/${id}/metrics`, { query: { name: state.metric, max_points: MAX_POINTS, start_step: start, end_step: end } });
    const s = (body.series || []).find((x) => x.name === state.metric);
    return s ? { xs: s.points.map((p) => p.step * factor), ys: s.points.map((p) => p.value) } : { xs: [], ys: [] };
  })).catch(() => null);
  if (!tables || mine !== zoomGeneration || !chart?.zoomed) return;
  chart.setTables(tables, { keepZoom: true });
}

const X_NOTES = {
  step: "",
  samples: "Samples seen = step × the run's global batch (batch × accumulation × ranks × hosts).",
  epoch: "Epoch ≈ step ÷ the run's steps per epoch (its step count ÷ its epoch count).",
  time: "Time since start ≈ step × the run's average time per step (start to finish, or to now): a pause or a slower stretch is spread evenly.",
};

// ---- drawing ----------------------------------------------------------------------------------

async function show() {
  const mine = ++generation;
  writeUrl();
  renderChips();
  if (!state.ids.length) {
    if (chart) { chart.destroy(); chart = null; }
    $("#compare-chart").hidden = true;
    $("#compare-params").hidden = true;
    setText($("#compare-x-note"), "");
    setText($("#compare-title"), "Compare runs");
    message("Pick runs from the list to compare them (or tick them in the jobs list and press “Compare selected”).");
    return;
  }
  const results = await Promise.allSettled(state.ids.map((id) => loadRun(id)));
  if (mine !== generation) return;
  const missing = state.ids.filter((id, i) => results[i].status === "rejected" || !runs.get(id)?.job);
  const ok = state.ids.filter((id) => !missing.includes(id));
  renderChips();
  const lacking = ok.filter((id) => !runs.get(id).series.get(state.metric)?.xs.length);
  const noX = [];
  const tables = [];
  const series = [];
  const runFactors = [];
  ok.forEach((id) => {
    const run = runs.get(id);
    const s = run.series.get(state.metric);
    const style = seriesStyle(state.ids.indexOf(id));
    series.push({ label: `${run.job.name} #${id}`, ...style, sparse: (s?.total || 0) < 200 });
    if (!s || !s.xs.length) { tables.push({ xs: [], ys: [] }); runFactors.push({ id, factor: null }); return; }
    const factor = xFactor(run.job, s.xs);
    runFactors.push({ id, factor });
    if (!factor) { noX.push(id); tables.push({ xs: [], ys: [] }); return; }
    tables.push({ xs: s.xs.map((x) => x * factor), ys: s.ys });
  });
  const notes = [];
  if (missing.length) notes.push(`Could not load ${missing.map((i) => `#${i}`).join(", ")}.`);
  if (lacking.length) notes.push(`${lacking.map((i) => `#${i}`).join(", ")} logged no ${state.metric}.`);
  if (noX.length) notes.push(`${noX.map((i) => `#${i}`).join(", ")} cannot be placed by ${X_FORMATS[state.x].label} yet.`);
  const drawn = tables.filter((t) => t.xs.length).length;
  const xLabel = X_FORMATS[state.x].label;
  setText($("#compare-title"), drawn
    ? `${state.metric} by ${xLabel}: ${drawn} ${drawn === 1 ? "run" : "runs"}`
    : `Compare ${ok.length} ${ok.length === 1 ? "run" : "runs"}`);
  if (!drawn) {
    if (chart) { chart.destroy(); chart = null; }
    $("#compare-chart").hidden = true;
    message(ok.length ? `None of the picked runs logged ${state.metric}. ${notes.join(" ")}` : notes.join(" "), "alert-info");
  } else {
    message(notes.join(" "), notes.length ? "alert-info" : "");
    drawnRuns = runFactors;
    fullTables = tables;
    zoomGeneration += 1;
    drawChart(series, tables);
  }
  setText($("#compare-x-note"), drawn ? X_NOTES[state.x] : "");
  renderParams(ok);
  loadNames().catch(() => {});
}

function drawChart(series, tables) {
  const figure = $("#compare-chart");
  figure.hidden = false;
  const key = `${state.metric}|${state.x}|${series.map((s) => s.label + s.stroke).join()}`;
  setText($("#compare-chart-title"), `${state.metric} by ${X_FORMATS[state.x].label}`);
  if (chart && chart.key === key) { chart.zoomed = null; delete figure.dataset.zoomed; chart.setTables(tables); return; }
  if (chart) chart.destroy();
  delete figure.dataset.firstDrawMs;
  chart = new LineChart(figure, {
    series,
    x: state.x,
    yLabel: state.metric.split("/").pop(),
    height: window.innerWidth < 700 ? 240 : 340,
    smoothing: Number($("#smoothing").value),
    log: $("#log-scale").checked ? true : "auto",
    onZoom: (min, max) => { zoomFetch(min, max); },
    onReset: () => { zoomGeneration += 1; chart.setTables(fullTables); },
    onLog: (on) => { $("#log-scale").checked = on; },
  });
  chart.key = key;
  chart.setTables(tables);
}

function renderChips() {
  $("#compare-jobs").replaceChildren(...state.ids.map((id) => {
    const run = runs.get(id);
    const job = run?.job;
    const { stroke, dash } = seriesStyle(state.ids.indexOf(id));
    const swatch = h("span", { class: `legend-swatch${dash ? " dashed" : ""}`, "aria-hidden": "true" });
    swatch.style.borderColor = stroke;
    const remove = h("button", { type: "button", class: "chip-remove", "aria-label": `Remove #${id} from the comparison` }, "×");
    remove.addEventListener("click", () => toggle(id, false));
    return h("li", { class: "chip", dataset: { jobId: id } }, swatch,
      h("a", { href: `/jobs/${id}` }, job ? `${job.name} #${id}` : `#${id}`),
      job ? h("span", { class: "muted" }, `${job.strategy} · ${job.status}`) : null, remove);
  }));
}

function flatten(value, prefix = "", out = new Map()) {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out.set(prefix, value === null || value === undefined ? "none" : typeof value === "object" ? JSON.stringify(value) : String(value));
  }
  return out;
}

/** Results first (status, steps, final and best of the metric), then only the spec values that differ. */
function renderParams(ids) {
  const box = $("#compare-params");
  const jobs = ids.map((id) => runs.get(id).job);
  box.hidden = jobs.length === 0;
  if (!jobs.length) return;
  const flat = jobs.map((j) => { const spec = { ...j.spec }; delete spec.name; return flatten(spec); });
  const keys = new Set();
  for (const f of flat) for (const k of f.keys()) keys.add(k);
  const differ = Array.from(keys).filter((k) => new Set(flat.map((f) => f.get(k) ?? "–")).size > 1).sort();
  const outcomes = ids.map((id) => outcomeOf(state.metric, runs.get(id).series.get(state.metric)));
  const head = h("tr", {}, h("th", { scope: "col" }, ""), ...jobs.map((j) => {
    const { stroke } = seriesStyle(state.ids.indexOf(j.id));
    const sw = h("span", { class: "legend-swatch", "aria-hidden": "true" });
    sw.style.borderColor = stroke;
    return h("th", { scope: "col" }, sw, " ", h("a", { href: `/jobs/${j.id}` }, `${j.name} #${j.id}`));
  }));
  $("#params-head").replaceChildren(head);
  const row = (label, cells, cls = "") => h("tr", { class: cls }, h("th", { scope: "row" }, label), ...cells.map((c) => h("td", { class: "config-value" }, c)));
  const rows = [
    row("status", jobs.map((j) => j.status), "result-row"),
    row("steps", jobs.map((j) => (j.total_steps ? `${fmtInt(j.step)} / ${fmtInt(j.total_steps)}` : fmtInt(j.step))), "result-row"),
    row(`final ${state.metric}`, outcomes.map((o) => (o ? `${fmtValue(o.final)} (step ${fmtInt(o.finalStep)})` : "–")), "result-row"),
    row(`best ${state.metric}`, outcomes.map((o) => (o ? `${fmtValue(o.best)} (step ${fmtInt(o.bestStep)})` : "–")), "result-row"),
    ...differ.map((k) => row(h("code", {}, k), flat.map((f) => f.get(k) ?? "–"))),
  ];
  $("#params-body").replaceChildren(...rows);
  setText($("#params-same"), jobs.length < 2 ? "Pick another run to see what differs."
    : differ.length ? `Every other setting (${keys.size - differ.length}) is the same in all ${jobs.length} runs.`
      : `All ${keys.size} settings are the same in these runs.`);
}

// ---- wiring -----------------------------------------------------------------------------------

const stored = localStorage.getItem(SMOOTHING_KEY);
if (stored !== null && Number.isFinite(Number(stored))) $("#smoothing").value = stored;
setText($("#smoothing-value"), Number($("#smoothing").value).toFixed(2));
$("#compare-metric").value = state.metric;
if ($("#compare-metric").value !== state.metric) $("#compare-metric").replaceChildren(h("option", { value: state.metric }, state.metric));
$("#compare-x").value = state.x;
$("#compare-form").addEventListener("submit", (e) => e.preventDefault());
$("#compare-metric").addEventListener("change", (e) => { state.metric = e.target.value; show(); });
$("#compare-x").addEventListener("change", (e) => { state.x = e.target.value; show(); });
$("#smoothing").addEventListener("input", (e) => {
  const w = Number(e.target.value);
  setText($("#smoothing-value"), w.toFixed(2));
  localStorage.setItem(SMOOTHING_KEY, String(w));
  if (chart) chart.setSmoothing(w);
});
$("#log-scale").addEventListener("change", (e) => { if (chart) chart.setLog(e.target.checked); });
$("#run-search").addEventListener("input", debounce(loadList, 250));
loadList();
show();
