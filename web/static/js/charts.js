// Line charts on uPlot (loaded as the global `uPlot` from /static/vendor).
//
// LineChart draws tables of (x, y) points that need not share x values (train/loss every step,
// val/loss every epoch): they are merged on the union of x and gaps are spanned. MetricChart adds
// the API: it asks for at most `maxPoints` points per series (the server keeps each bucket's min
// and max) and, when you drag-zoom, re-asks for just the visible step range, so a million-point
// run costs the browser no more than a short one.
import { api } from "./api.js";
import { fmtNumber } from "./format.js";

export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f", "#7c2d12", "#1e3a8a"];

/** Merge [{xs, ys}] on the sorted union of their xs: [xs, ys0, ys1, …] with nulls where a table has no point. */
export function alignTables(tables, { positiveOnly = false } = {}) {
  if (tables.length === 1) {
    const { xs, ys } = tables[0];
    return [xs.slice(), positiveOnly ? ys.map((v) => (v > 0 ? v : null)) : ys.slice()];
  }
  const union = new Set();
  for (const t of tables) for (const x of t.xs) union.add(x);
  const xs = Array.from(union).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const out = [xs];
  for (const t of tables) {
    const ys = new Array(xs.length).fill(null);
    for (let i = 0; i < t.xs.length; i++) {
      const v = t.ys[i];
      ys[index.get(t.xs[i])] = positiveOnly && !(v > 0) ? null : v;
    }
    out.push(ys);
  }
  return out;
}

export class LineChart {
  /**
   * @param {HTMLElement} figure  a <figure> holding a .plot div
   * @param {object} opts  series: [{label, stroke}], xLabel, yLabel, height, onZoom(min, max), onReset()
   */
  constructor(figure, opts) {
    this.figure = figure;
    this.plot = figure.querySelector(".plot");
    this.opts = opts;
    this.log = false;
    this.tables = opts.series.map(() => ({ xs: [], ys: [] }));
    this.u = null;
    this.zoomed = null; // {min, max} while zoomed in
    this.resize = new ResizeObserver(() => requestAnimationFrame(() => this.fit()));
    this.resize.observe(this.figure);
  }

  width() {
    return Math.max(280, Math.floor(this.plot.clientWidth || this.figure.clientWidth || 600));
  }

  fit() {
    if (this.u && this.u.width !== this.width()) this.u.setSize({ width: this.width(), height: this.opts.height || 220 });
  }

  options() {
    const chart = this;
    return {
      width: this.width(),
      height: this.opts.height || 220,
      scales: { x: { time: false }, y: { distr: this.log ? 3 : 1 } },
      legend: { live: true },
      cursor: {
        drag: { x: true, y: false, setScale: true },
        bind: {
          // Double-click resets to everything, fetched again (the data in hand may be a zoomed window).
          dblclick: () => () => { chart.resetZoom(); return null; },
        },
      },
      axes: [
        { label: this.opts.xLabel || "step", values: (u, ticks) => ticks.map((v) => fmtAxis(v)) },
        { label: this.opts.yLabel || "", size: 64, values: (u, ticks) => ticks.map((v) => fmtAxis(v)) },
      ],
      series: [
        { label: this.opts.xLabel || "step", value: (u, v) => (v === null || v === undefined ? "–" : fmtAxis(v)) },
        ...this.opts.series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          width: 1.5,
          spanGaps: true,
          value: (u, v) => (v === null || v === undefined ? "–" : fmtNumber(v, 5)),
        })),
      ],
      hooks: {
        setSelect: [(u) => {
          if (u.select.width <= 0) return;
          const min = u.posToVal(u.select.left, "x");
          const max = u.posToVal(u.select.left + u.select.width, "x");
          chart.zoomed = { min, max };
          chart.figure.dataset.zoomed = "true";
          if (chart.opts.onZoom) chart.opts.onZoom(min, max, chart);
        }],
        draw: [(u) => chart.markDrawn(u)],
      },
    };
  }

  /** Exposes what was drawn for tests and for the 1 s draw-time check: point count and time. */
  markDrawn(u) {
    let points = 0;
    for (let s = 1; s < u.data.length; s++) for (const v of u.data[s]) if (v !== null && v !== undefined) points++;
    this.figure.dataset.points = String(points);
    if (points > 0 && !this.figure.dataset.firstDrawMs) this.figure.dataset.firstDrawMs = performance.now().toFixed(1);
    this.figure.classList.toggle("is-empty", points === 0);
  }

  data() {
    return alignTables(this.tables, { positiveOnly: this.log });
  }

  setTables(tables, { keepZoom = false } = {}) {
    this.tables = tables;
    this.draw(keepZoom);
  }

  draw(keepZoom = false) {
    const data = this.data();
    if (!this.u) {
      this.u = new uPlot(this.options(), data, this.plot);
      this.figure.dataset.ready = "true";
      if (keepZoom && this.zoomed) this.u.setScale("x", this.zoomed);
      return;
    }
    if (keepZoom && this.zoomed) {
      this.u.setData(data, false);
      this.u.setScale("x", this.zoomed);
    } else {
      this.u.setData(data, true);
    }
  }

  setLog(on) {
    if (this.log === on) return;
    this.log = on;
    if (this.u) { this.u.destroy(); this.u = null; }
    this.draw(true);
  }

  zoomTo(min, max) {
    this.zoomed = { min, max };
    this.figure.dataset.zoomed = "true";
    if (this.u) this.u.setScale("x", { min, max });
  }

  resetZoom() {
    this.zoomed = null;
    delete this.figure.dataset.zoomed;
    if (this.opts.onReset) this.opts.onReset(this);
    else if (this.u) this.u.setData(this.data(), true);
  }
}

function fmtAxis(v) {
  if (v === null || v === undefined) return "";
  const abs = Math.abs(v);
  if (abs >= 1e6) return `${Number((v / 1e6).toPrecision(3))}M`;
  if (abs >= 1e4) return `${Number((v / 1e3).toPrecision(3))}k`;
  return fmtNumber(v, 4);
}

/** One chart of a job's named series, fed by the metrics endpoint and the SSE stream. */
export class MetricChart {
  constructor(figure, { jobId, names, labels, yLabel, maxPoints = 2000, onZoom, colors }) {
    this.jobId = jobId;
    this.names = names;
    this.maxPoints = maxPoints;
    this.full = new Map(names.map((n) => [n, { xs: [], ys: [] }])); // whole run, downsampled, + live points
    this.view = null; // the zoomed window in detail, same shape as full
    this.seq = 0; // ignores responses that a newer request overtook
    this.pendingDraw = null;
    this.refetchTimer = null;
    this.onZoomCb = onZoom;
    this.chart = new LineChart(figure, {
      series: names.map((n, i) => ({ label: labels?.[i] || n, stroke: (colors || COLORS)[i % COLORS.length] })),
      xLabel: "step",
      yLabel,
      onZoom: (min, max) => {
        this.loadRange(min, max);
        if (this.onZoomCb) this.onZoomCb(min, max, this);
      },
      onReset: () => this.resetZoom(true),
    });
  }

  async fetch(range) {
    const query = { name: this.names, max_points: this.maxPoints };
    if (range) {
      query.start_step = Math.max(0, Math.floor(range.min));
      query.end_step = Math.ceil(range.max);
    }
    const body = await api(`/jobs/${this.jobId}/metrics`, { query });
    const byName = new Map(this.names.map((n) => [n, { xs: [], ys: [] }]));
    for (const s of body.series || []) {
      if (!byName.has(s.name)) continue;
      byName.set(s.name, { xs: s.points.map((p) => p.step), ys: s.points.map((p) => p.value) });
    }
    return byName;
  }

  tablesOf(map) {
    return this.names.map((n) => map.get(n));
  }

  async loadFull() {
    const seq = ++this.seq;
    const full = await this.fetch(null);
    if (seq !== this.seq) return;
    this.full = full;
    if (!this.view) this.chart.setTables(this.tablesOf(full));
  }

  async loadRange(min, max) {
    const seq = ++this.seq;
    this.view = this.view || this.full;
    const view = await this.fetch({ min, max });
    if (seq !== this.seq || !this.chart.zoomed) return;
    this.view = view;
    this.chart.setTables(this.tablesOf(view), { keepZoom: true });
  }

  zoomTo(min, max) {
    this.chart.zoomTo(min, max);
    this.loadRange(min, max);
  }

  resetZoom(propagate = false) {
    this.view = null;
    this.chart.zoomed = null;
    delete this.chart.figure.dataset.zoomed;
    this.chart.setTables(this.tablesOf(this.full));
    this.loadFull();
    if (propagate && this.onReset) this.onReset(this);
  }

  /** New points from the stream; only steps past what we hold (the first fetch may overlap the stream). */
  append(points) {
    let changed = false;
    for (const p of points) {
      const s = this.full.get(p.name);
      if (!s) continue;
      if (s.xs.length && p.step <= s.xs[s.xs.length - 1]) continue;
      s.xs.push(p.step);
      s.ys.push(p.value);
      changed = true;
    }
    if (!changed) return;
    // Far past the budget: ask for a fresh downsampled copy instead of growing without bound.
    const longest = Math.max(...this.names.map((n) => this.full.get(n).xs.length));
    if (longest > 2 * this.maxPoints && !this.refetchTimer) {
      this.refetchTimer = setTimeout(() => { this.refetchTimer = null; this.loadFull(); }, 2000);
    }
    if (this.view || this.pendingDraw) return;
    this.pendingDraw = setTimeout(() => {
      this.pendingDraw = null;
      if (!this.view) this.chart.setTables(this.tablesOf(this.full));
    }, 250);
  }

  setLog(on) {
    this.chart.setLog(on);
  }
}
