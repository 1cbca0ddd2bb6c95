// @ts-check
// Every metric series of one job, charted and grouped by prefix: training and validation (train/X and
// val/X share a chart "X"; lr), throughput, a user script's own prefixes, then system (sys/…: one
// chart per measure, a series per rank or GPU). One request reads every series (GET
// /api/jobs/{id}/metrics, at most `maxPoints` per series: the server keeps each bucket's min and max);
// a drag-zoom re-reads just the visible steps, for every chart at once; the SSE stream appends points.
// Only series that exist get a chart: a job with none shows one sentence, not empty cards.
// A series the server read from a script's printed output (source "console") says so in its legend,
// and in its chart's title when every series there came from the console.
// System series (sys/…) are sampled every heartbeat whatever the job reports; their `step` is the sample's
// unix time in milliseconds (worker/resources.py), drawn on wall-clock time since the first sample, so
// a script that reports no step still gets one point per heartbeat. They zoom on their own.
import { api } from "./api.js";
import { h, setText } from "./dom.js";
import { LineChart, seriesStyle } from "./charts.js";
import { LIMITS } from "./meta.js";

const KNOWN_IDS = { loss: "chart-loss", accuracy: "chart-acc", lr: "chart-lr" };
const GROUP_TITLES = { train: "Training and validation", throughput: "Throughput", other: "Your metrics", sys: "System" };
const FIRST_IN_TRAIN = ["loss", "accuracy", "lr"];
const MAX_NAMES = LIMITS.metric_names; // the metrics route's limit on `name` (GET /api/meta)
const FROM_CONSOLE = "from the console";

/** The chart a series goes on: train/X and val/X share "X"; sys/<where>/<measure> share "sys/<measure>". */
export function chartKey(name) {
  const parts = name.split("/");
  if (parts.length > 1 && (parts[0] === "train" || parts[0] === "val")) return parts.slice(1).join("/");
  if (parts[0] === "sys" && parts.length > 2) return `sys/${parts[parts.length - 1]}`;
  return name;
}

export function groupOf(name) {
  const first = name.includes("/") ? name.split("/")[0] : "";
  if (first === "train" || first === "val" || name === "lr") return "train";
  if (first === "sys" || first === "throughput") return first;
  return first || "other";
}

/** Series drawn on wall-clock time (their points' `step` is unix milliseconds). */
export function onWallClock(name) {
  return groupOf(name) === "sys";
}

function groupRank(group) {
  return { train: 0, throughput: 1, other: 3, sys: 4 }[group] ?? 2;
}

function slug(key) {
  return KNOWN_IDS[key] || `chart-${key.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-|-$/g, "")}`;
}

/** Series order inside a chart: train before val, then by name. */
function byRole(a, b) {
  const rank = (n) => (n.startsWith("train/") ? 0 : n.startsWith("val/") ? 1 : 2);
  return rank(a) - rank(b) || a.localeCompare(b);
}

export class MetricPanel {
  constructor(root, { jobId, maxPoints = LIMITS.metric_points.default, smoothing = 0.6, onChange, initial = null }) {
    this.root = root;
    this.initial = initial; // {names, first}: the job's series when the page was made, and the loss chart's
    this.jobId = jobId;
    this.maxPoints = maxPoints;
    this.smoothing = smoothing;
    this.onChange = onChange || (() => {});
    this.full = new Map(); // name -> {xs, ys, total, downsampled}
    this.view = null; // the zoomed window in detail, same shape as full
    this.charts = new Map(); // key -> {chart, names, figure, group}
    this.groups = new Map(); // group -> grid element
    this.seq = 0;
    this.pendingDraw = null;
    this.refetchTimer = null;
    this.forcedLog = null; // null: each chart's own choice (auto until its box is used); true: all log
    this.zoomed = null;
    this.fromConsole = new Set(); // names of series read from the console (a series' source does not change)
    this.timeOrigin = null; // unix ms of the first system sample: the wall-clock charts' 0
    /** @type {any} */
    this.console = null; // what the console reader made of a script job's output (console_note.js)
  }

  /** x of a point: its step, or (a system series) seconds since the first system sample. */
  xOf(name, step) {
    if (!onWallClock(name)) return step;
    if (this.timeOrigin === null) this.timeOrigin = step;
    return (step - this.timeOrigin) / 1000;
  }

  async fetch(range, names = null) {
    const query = names ? { name: names, max_points: this.maxPoints } : { max_points: this.maxPoints };
    if (range) {
      query.start_step = Math.max(0, Math.floor(range.min));
      query.end_step = Math.ceil(range.max);
    }
    const body = await api(`/jobs/${this.jobId}/metrics`, { query });
    if (body.console !== undefined) this.console = body.console; // the console reader's summary (script jobs)
    const out = new Map();
    for (const s of body.series || []) {
      if (onWallClock(s.name) && s.points.length && (this.timeOrigin === null || s.points[0].step < this.timeOrigin)) {
        this.timeOrigin = s.points[0].step;
      }
    }
    for (const s of body.series || []) {
      if (s.source === "console") this.fromConsole.add(s.name);
      out.set(s.name, {
        xs: s.points.map((p) => this.xOf(s.name, p.step)),
        ys: s.points.map((p) => p.value),
        total: s.total_points,
        downsampled: s.downsampled,
      });
    }
    return out;
  }

  /** Every series, downsampled. The first time, when the page named the job's series: the loss chart's
   * first (its read was preloaded with the page), drawn at once, then the rest in one more read. */
  async loadFull() {
    const seq = ++this.seq;
    const known = this.initial;
    this.initial = null;
    if (known && known.first.length && known.names.length - known.first.length <= MAX_NAMES) {
      const first = await this.fetch(null, known.first);
      if (seq !== this.seq) return;
      this.full = first;
      if (!this.view) this.render();
      const rest = known.names.filter((n) => !known.first.includes(n));
      if (rest.length) {
        const more = await this.fetch(null, rest);
        if (seq !== this.seq) return;
        for (const [name, s] of more) this.full.set(name, s);
      }
      this.loaded = true;
      if (!this.view) this.render(); else this.ensureCharts();
      return;
    }
    const full = await this.fetch(null);
    if (seq !== this.seq) return;
    this.full = full;
    this.loaded = true;
    if (!this.view) this.render();
    else this.ensureCharts();
  }

  async loadRange(min, max) {
    const seq = ++this.seq;
    const view = await this.fetch({ min, max });
    if (seq !== this.seq || !this.zoomed) return;
    this.view = view;
    this.render(true);
  }

  names() {
    return Array.from(this.full.keys());
  }

  /** Creates the charts (and group sections) that series in hand need, in a stable order. */
  ensureCharts() {
    const wanted = new Map();
    for (const name of this.full.keys()) {
      const key = chartKey(name);
      if (!wanted.has(key)) wanted.set(key, { group: groupOf(name), names: [] });
      wanted.get(key).names.push(name);
    }
    let added = false;
    for (const [key, { group, names }] of wanted) {
      names.sort(byRole);
      const have = this.charts.get(key);
      if (have && have.sig === this.signature(names)) continue;
      if (have) { this.updateChart(have, key, names); continue; }
      this.charts.set(key, this.makeChart(key, group, names));
      added = true;
    }
    if (added) this.orderCharts();
    this.onChange(this);
  }

  /** What a chart is drawn from: its series and which of them came from the console. */
  signature(names) {
    return names.map((n) => (this.fromConsole.has(n) ? `${n}\u0000c` : n)).join("\u0001");
  }

  title(key, names) {
    const title = chartTitle(key, names);
    return names.every((n) => this.fromConsole.has(n)) ? `${title} (${FROM_CONSOLE})` : title;
  }

  seriesOf(names) {
    const longest = Math.max(...names.map((n) => this.full.get(n)?.total || 0));
    return names.map((n, i) => ({
      label: this.fromConsole.has(n) ? `${n} (${FROM_CONSOLE})` : n,
      ...seriesStyle(i),
      sparse: (this.full.get(n)?.total || 0) < Math.min(200, longest / 5 + 1),
    }));
  }

  /** A chart that gains a series (val/loss after train/loss) keeps its figure; its plot is rebuilt. */
  updateChart(entry, key, names) {
    entry.names = names;
    entry.sig = this.signature(names);
    entry.chart.opts.series = this.seriesOf(names);
    entry.chart.tables = names.map((n) => this.full.get(n) || { xs: [], ys: [] });
    setText(entry.figure.querySelector(".chart-title"), this.title(key, names));
    entry.figure.toggleAttribute("data-console", names.some((n) => this.fromConsole.has(n)));
  }

  makeChart(key, group, names) {
    const title = this.title(key, names);
    const logBox = h("input", { type: "checkbox", class: "chart-log-box", "aria-label": `Log scale for ${title}` });
    const figure = h("figure", { class: "chart", id: slug(key), dataset: { key } },
      h("figcaption", {}, h("span", { class: "chart-title" }, title),
        h("label", { class: "check chart-log" }, logBox, " log")),
      h("div", { class: "plot" }));
    this.gridFor(group).append(figure);
    const wallClock = group === "sys";
    const chart = new LineChart(figure, {
      series: this.seriesOf(names),
      x: wallClock ? "time" : "step",
      yLabel: key.split("/").pop(),
      syncKey: wallClock ? `job-${this.jobId}-time` : `job-${this.jobId}`,
      smoothing: this.smoothing,
      log: this.forcedLog ?? "auto",
      // A wall-clock chart zooms alone: the other charts' x is the step.
      onZoom: wallClock ? null : (min, max, source) => this.zoom(min, max, source),
      onReset: wallClock ? null : () => this.resetZoom(),
      onLog: (on) => { logBox.checked = on; },
    });
    logBox.addEventListener("change", () => chart.setLog(logBox.checked));
    figure.toggleAttribute("data-console", names.some((n) => this.fromConsole.has(n)));
    return { chart, names, figure, group, sig: this.signature(names) };
  }

  gridFor(group) {
    let grid = this.groups.get(group);
    if (grid) return grid;
    const title = GROUP_TITLES[group] || `${group}/`;
    grid = h("div", { class: "chart-grid" });
    const section = h("section", { class: "chart-group", dataset: { group } }, h("h3", {}, title), grid);
    this.groups.set(group, grid);
    const after = Array.from(this.root.querySelectorAll(".chart-group"))
      .find((s) => groupRank(s.dataset.group) > groupRank(group) || (groupRank(s.dataset.group) === groupRank(group) && s.dataset.group > group));
    this.root.insertBefore(section, after || null);
    return grid;
  }

  orderCharts() {
    for (const grid of this.groups.values()) {
      const figures = Array.from(grid.children);
      const rank = (f) => { const i = FIRST_IN_TRAIN.indexOf(f.dataset.key); return i < 0 ? FIRST_IN_TRAIN.length : i; };
      const sorted = figures.slice().sort((a, b) => rank(a) - rank(b) || a.dataset.key.localeCompare(b.dataset.key));
      if (sorted.some((f, i) => f !== figures[i])) grid.append(...sorted);
    }
  }

  render(keepZoom = false) {
    this.ensureCharts();
    const source = this.view || this.full;
    for (const { chart, names } of this.charts.values()) {
      chart.setTables(names.map((n) => source.get(n) || this.full.get(n) || { xs: [], ys: [] }), { keepZoom });
    }
  }

  zoom(min, max, source) {
    this.zoomed = { min, max };
    for (const { chart, group } of this.charts.values()) if (chart !== source && group !== "sys") chart.zoomTo(min, max);
    this.loadRange(min, max);
  }

  resetZoom() {
    this.zoomed = null;
    this.view = null;
    this.seq += 1;
    for (const { chart } of this.charts.values()) {
      chart.zoomed = null;
      delete chart.figure.dataset.zoomed;
    }
    this.render();
    this.loadFull();
  }

  setSmoothing(weight) {
    this.smoothing = weight;
    for (const { chart } of this.charts.values()) chart.setSmoothing(weight);
  }

  /** The page's "Log scale" box: true puts every chart on log; false gives each back its automatic choice. */
  setLogAll(on) {
    this.forcedLog = on ? true : null;
    for (const { chart } of this.charts.values()) chart.setLog(on ? true : "auto");
  }

  /** New points from the stream; only steps past what we hold (the first fetch may overlap the stream). */
  append(points) {
    let changed = false;
    let added = false;
    for (const p of points) {
      let s = this.full.get(p.name);
      if (!s) { s = { xs: [], ys: [], total: 0, downsampled: false }; this.full.set(p.name, s); added = true; }
      const x = this.xOf(p.name, p.step);
      if (s.xs.length && x <= s.xs[s.xs.length - 1]) continue;
      s.xs.push(x);
      s.ys.push(p.value);
      s.total += 1;
      changed = true;
    }
    if (!changed) return;
    const longest = Math.max(...Array.from(this.full.values(), (s) => s.xs.length));
    if (longest > 2 * this.maxPoints && !this.refetchTimer) {
      this.refetchTimer = setTimeout(() => { this.refetchTimer = null; this.loadFull(); }, 2000);
    }
    if (added) this.ensureCharts();
    if (this.view || this.pendingDraw) return;
    this.pendingDraw = setTimeout(() => {
      this.pendingDraw = null;
      if (!this.view) this.render();
    }, 250);
  }
}

function chartTitle(key, names) {
  if (names.length > 1 && names.every((n) => /^(train|val)\//.test(n))) return `${key} (${names.map((n) => n.split("/")[0]).join(", ")})`;
  return names.length === 1 ? names[0] : key;
}

/** A series' final and best value (min, or max for accuracy-like names) with their steps. */
export function outcomeOf(name, s) {
  if (!s || !s.xs.length) return null;
  const higher = /acc|f1|precision|recall|auc|score|bleu|iou|map|top\d/i.test(name);
  let best = 0;
  for (let i = 1; i < s.ys.length; i++) {
    const v = s.ys[i];
    if (v === null || !Number.isFinite(v)) continue;
    if (higher ? v > s.ys[best] : v < s.ys[best]) best = i;
  }
  const last = s.xs.length - 1;
  return { name, final: s.ys[last], finalStep: s.xs[last], best: s.ys[best], bestStep: s.xs[best], higher };
}

export function setChartsEmpty(el, text) {
  el.hidden = !text;
  setText(el, text || "");
}
