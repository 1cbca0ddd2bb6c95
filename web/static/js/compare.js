// Compare: overlay one metric of several jobs, by optimizer step and by samples seen
// (step × the job's global batch), so runs with different strategies line up by data consumed.
import { api } from "./api.js";
import { $, h, setText } from "./dom.js";
import { COLORS, LineChart } from "./charts.js";

const MAX_POINTS = 2000;
let charts = [];

function readIds(text) {
  return Array.from(new Set((text || "").split(/[\s,]+/).map((s) => parseInt(s, 10)).filter((n) => Number.isInteger(n) && n > 0))).slice(0, COLORS.length);
}

function message(text) {
  const el = $("#compare-message");
  el.hidden = !text;
  setText(el, text || "");
}

async function loadJob(id, metric) {
  const [job, metrics] = await Promise.all([
    api(`/jobs/${id}`),
    api(`/jobs/${id}/metrics`, { query: { name: metric, max_points: MAX_POINTS } }),
  ]);
  const series = (metrics.series || []).find((s) => s.name === metric) || { points: [] };
  return { job, steps: series.points.map((p) => p.step), values: series.points.map((p) => p.value) };
}

async function show() {
  const ids = readIds($("#compare-ids").value);
  const metric = $("#compare-metric").value;
  const log = $("#log-scale").checked;
  const q = new URLSearchParams({ ids: ids.join(","), metric });
  history.replaceState(null, "", `?${q}`);
  for (const c of charts) if (c.u) c.u.destroy();
  charts = [];
  $("#compare-jobs").replaceChildren();
  if (!ids.length) { message("Pick at least one job."); return; }
  const results = await Promise.allSettled(ids.map((id) => loadJob(id, metric)));
  const runs = [];
  const missing = [];
  results.forEach((r, i) => (r.status === "fulfilled" ? runs.push(r.value) : missing.push(ids[i])));
  message(missing.length ? `Could not load job${missing.length > 1 ? "s" : ""} ${missing.map((i) => `#${i}`).join(", ")}.` : "");
  $("#compare-jobs").replaceChildren(...runs.map((r, i) => h("li", { class: "chip" },
    h("span", { class: `swatch swatch-${i}`, "aria-hidden": "true" }),
    h("a", { href: `/jobs/${r.job.id}` }, `${r.job.name} #${r.job.id}`),
    h("span", { class: "muted" }, ` ${r.job.strategy} · global batch ${r.job.global_batch_size ?? "?"} · ${r.job.status}`))));
  const series = runs.map((r, i) => ({ label: `${r.job.name} #${r.job.id}`, stroke: COLORS[i % COLORS.length] }));
  const byStep = new LineChart($("#chart-by-step"), { series, xLabel: "step", yLabel: metric, height: 300 });
  const bySamples = new LineChart($("#chart-by-samples"), { series, xLabel: "samples", yLabel: metric, height: 300 });
  byStep.log = log;
  bySamples.log = log;
  byStep.setTables(runs.map((r) => ({ xs: r.steps, ys: r.values })));
  bySamples.setTables(runs.map((r) => ({ xs: r.steps.map((s) => s * (r.job.global_batch_size || 1)), ys: r.values })));
  charts = [byStep, bySamples];
}

const params = new URLSearchParams(location.search);
$("#compare-ids").value = readIds(params.get("ids")).join(", ");
if (params.get("metric")) $("#compare-metric").value = params.get("metric");
$("#compare-form").addEventListener("submit", (e) => { e.preventDefault(); show(); });
$("#log-scale").addEventListener("change", () => { for (const c of charts) c.setLog($("#log-scale").checked); });
if ($("#compare-ids").value) show(); else message("Pick jobs in the jobs list, or type their ids.");
