// @ts-check
// Line charts on uPlot (loaded as the global `uPlot` from /static/vendor).
//
// LineChart draws tables of (x, y) points that need not share x values (train/loss every step,
// val/loss every 50): they are merged on the union of x and gaps are spanned. What it adds to uPlot:
// - smoothing: a debiased EMA (TensorBoard's) drawn over the raw curve, which stays faded behind it;
//   the raw curve is the server's min/max-per-bucket downsample, so its envelope keeps every extreme;
// - a cursor linked across the charts sharing a `syncKey`, and a legend with the value under the
//   cursor (each series snaps to its nearest point, so sparse validation series always show one) and
//   the latest value;
// - tick labels that fit their range (1.2k, 3M, 0.0012, 1e-5; durations on a time axis);
// - a log y scale, chosen automatically when every value is positive and they span two decades.
// MetricChart-free: the pages feed tables (job_charts.js for a job, compare.js for runs).
import { h, setText } from "./dom.js";
import { fmtDuration, fmtNumber } from "./format.js";

// Okabe & Ito's colour-blind-safe palette (yellow last: faint on white); past 8 series, dashes tell them apart.
export const COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#B8A200"];
export const DASHES = [null, [6, 3], [2, 3], [8, 3, 2, 3]];

export function seriesStyle(i) {
  return { stroke: COLORS[i % COLORS.length], dash: DASHES[Math.floor(i / COLORS.length) % DASHES.length] };
}

/** Merge [{xs, ys}] on the sorted union of their xs: [xs, ys0, ys1, …] with nulls where a table has no point. */
export function alignTables(tables, { positiveOnly = false } = {}) {
  const clean = (v) => (positiveOnly && !(v > 0) ? null : v);
  if (tables.length === 1) {
    const { xs, ys } = tables[0];
    return [xs.slice(), positiveOnly ? ys.map(clean) : ys.slice()];
  }
  // Every table is sorted by x: a k-way merge is cheaper than a Set + sort for 10 × 2000 points.
  const sameXs = tables.every((t) => t.xs === tables[0].xs || sameArray(t.xs, tables[0].xs));
  if (sameXs) return [tables[0].xs.slice(), ...tables.map((t) => (positiveOnly ? t.ys.map(clean) : t.ys.slice()))];
  const union = [];
  for (const t of tables) for (const x of t.xs) union.push(x);
  union.sort((a, b) => a - b);
  const xs = [];
  for (let i = 0; i < union.length; i++) if (i === 0 || union[i] !== union[i - 1]) xs.push(union[i]);
  const out = [xs];
  for (const t of tables) {
    const ys = new Array(xs.length).fill(null);
    let j = 0;
    for (let i = 0; i < t.xs.length; i++) {
      while (xs[j] < t.xs[i]) j++;
      ys[j] = clean(t.ys[i]);
    }
    out.push(ys);
  }
  return out;
}

function sameArray(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** TensorBoard's smoothing: an exponential moving average, debiased so the start is not pulled to 0. */
export function ema(ys, weight) {
  if (!(weight > 0) || ys.length < 3) return ys.slice();
  const out = new Array(ys.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < ys.length; i++) {
    const v = ys[i];
    if (v === null || !Number.isFinite(v)) { out[i] = null; continue; }
    last = last * weight + (1 - weight) * v;
    n += 1;
    out[i] = last / (1 - weight ** n);
  }
  return out;
}

/** Decades spanned by a set of tables' values when all are positive, else 0 (a log scale cannot show them). */
export function decadesSpanned(tables) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const t of tables) {
    for (const v of t.ys) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v <= 0) return 0;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return hi > lo ? Math.log10(hi / lo) : 0;
}
export const AUTO_LOG_DECADES = 2;

/** Tick labels with as many decimals as the tick spacing needs. */
export function fmtTick(v, incr) {
  if (v === null || v === undefined) return "";
  const abs = Math.abs(v);
  if (abs >= 1e9) return `${Number((v / 1e9).toPrecision(3))}G`;
  if (abs >= 1e6) return `${Number((v / 1e6).toPrecision(3))}M`;
  if (abs >= 1e4) return `${Number((v / 1e3).toPrecision(3))}k`;
  if (v === 0) return "0";
  if (abs < 1e-3) return v.toExponential(abs * 10 >= incr ? 1 : 0).replace("e-", "e−");
  const decimals = incr > 0 ? Math.min(6, Math.max(0, -Math.floor(Math.log10(incr) + 1e-9))) : 3;
  return v.toFixed(decimals);
}

export function fmtValue(v) {
  return v === null || v === undefined || Number.isNaN(v) ? "–" : fmtNumber(v, 5);
}

function fmtStep(v) {
  return v === null || v === undefined ? "–" : Math.abs(v) >= 1e4 ? fmtTick(v, 1) : Number(v.toPrecision(6)).toLocaleString("en-US");
}

export const X_FORMATS = {
  step: { label: "step", tick: (v, incr) => fmtTick(v, Math.max(incr, 1)), point: (v) => `step ${fmtStep(v)}` },
  epoch: { label: "epoch", tick: fmtTick, point: (v) => `epoch ${Number(v.toFixed(2))}` },
  samples: { label: "samples seen", tick: (v, incr) => fmtTick(v, Math.max(incr, 1)), point: (v) => `${fmtStep(v)} samples` },
  time: { label: "time since start", tick: (v) => fmtDuration(v), point: (v) => `+${fmtDuration(v)}` },
};

/** Index of the element of sorted `arr` (read through `key`) nearest to x. */
function binarySearch(arr, x, key = (v) => v) {
  let lo = 0;
  let hi = arr.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(arr[mid]) < x) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(key(arr[lo - 1]) - x) <= Math.abs(key(arr[lo]) - x)) return lo - 1;
  return lo;
}

export class LineChart {
  /**
   * @param {HTMLElement} figure  a <figure> holding a .plot div
   * @param {object} opts  series: [{label, stroke, dash}], x ("step" | "epoch" | "samples" | "time"), yLabel,
   *   height, syncKey, smoothing (0 … 0.99), log (true | false | "auto"), onZoom(min, max), onReset()
   */
  constructor(figure, opts) {
    this.figure = figure;
    this.plot = figure.querySelector(".plot") || figure.appendChild(h("div", { class: "plot" }));
    this.opts = opts;
    this.xfmt = X_FORMATS[opts.x || "step"];
    this.smoothing = opts.smoothing || 0;
    this.logChoice = opts.log ?? "auto";
    this.log = false;
    /** @type {string | undefined} what a page keeps to know which data the chart shows (compare: the run set) */
    this.key = undefined;
    this.tables = opts.series.map(() => ({ xs: [], ys: [] }));
    this.u = null;
    this.zoomed = null; // {min, max} while zoomed in
    this.present = []; // per drawn series: the data indexes holding a value (for snapping)
    this.legend = h("div", { class: "chart-legend" });
    this.plot.after(this.legend);
    this.resize = new ResizeObserver(() => requestAnimationFrame(() => this.fit()));
    this.resize.observe(this.figure);
  }

  width() {
    return Math.max(240, Math.floor(this.plot.clientWidth || this.figure.clientWidth || 600));
  }

  height() {
    return this.opts.height || (window.innerWidth < 700 ? 180 : 220);
  }

  fit() {
    if (this.u && this.u.width !== this.width()) this.u.setSize({ width: this.width(), height: this.height() });
  }

  /** Which drawn series are smoothed copies: [{src, smooth}] per data column after x. */
  layout() {
    const cols = [];
    this.opts.series.forEach((s, i) => {
      const smooth = this.smoothing > 0 && this.tables[i].xs.length >= 10;
      cols.push({ src: i, smooth: false, faded: smooth });
      if (smooth) cols.push({ src: i, smooth: true, faded: false });
    });
    return cols;
  }

  options(cols) {
    const chart = this;
    const fmt = this.xfmt;
    return {
      width: this.width(),
      height: this.height(),
      scales: { x: { time: false }, y: { distr: this.log ? 3 : 1 } },
      legend: { show: false },
      cursor: {
        drag: { x: true, y: false, setScale: true },
        sync: this.opts.syncKey ? { key: this.opts.syncKey } : undefined,
        // A series with no point at the cursor's x (validation every 50 steps) snaps to its nearest one.
        dataIdx: (u, sIdx, closest) => {
          const col = u.data[sIdx];
          if (col[closest] !== null && col[closest] !== undefined) return closest;
          const have = chart.present[sIdx];
          if (!have || !have.length) return closest;
          const xs = u.data[0];
          return have[binarySearch(have, xs[closest], (i) => xs[i])];
        },
        bind: {
          // Double-click resets to everything, fetched again (the data in hand may be a zoomed window).
          dblclick: () => () => { chart.resetZoom(); return null; },
        },
      },
      axes: [
        { label: fmt.label, values: (u, ticks, ax, space, incr) => ticks.map((v) => fmt.tick(v, incr)) },
        {
          label: this.opts.yLabel || "",
          size: 60,
          values: (u, ticks, ax, space, incr) => ticks.map((v) => (this.log ? fmtTick(v, Math.abs(v) / 10) : fmtTick(v, incr))),
        },
      ],
      series: [
        { label: fmt.label },
        ...cols.map((c) => {
          const s = this.opts.series[c.src];
          return {
            label: c.smooth ? `${s.label} (smoothed)` : s.label,
            stroke: c.faded ? fade(s.stroke) : s.stroke,
            dash: s.dash || undefined,
            width: c.faded ? 1 : 1.75,
            spanGaps: true,
            points: { show: s.sparse && !c.faded ? (u, si) => pointsFew(u, si) : false },
          };
        }),
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
        setCursor: [(u) => chart.updateLegend(u)],
        draw: [() => chart.markDrawn()],
      },
    };
  }

  /** Exposes what was drawn for tests and for the draw-time checks: raw point count and time. */
  markDrawn() {
    let points = 0;
    for (const t of this.tables) for (const v of t.ys) if (v !== null && v !== undefined) points++;
    this.figure.dataset.points = String(points);
    if (points > 0 && !this.figure.dataset.firstDrawMs) {
      this.figure.dataset.firstDrawMs = performance.now().toFixed(1);
      performance.mark(`chart-first-draw:${this.figure.id}`);
    }
    this.figure.classList.toggle("is-empty", points === 0);
  }

  data(cols) {
    const tables = cols.map((c) => {
      const t = this.tables[c.src];
      return c.smooth ? { xs: t.xs, ys: ema(t.ys, this.smoothing) } : t;
    });
    const data = alignTables(tables.length ? tables : [{ xs: [], ys: [] }], { positiveOnly: this.log });
    this.present = [null, ...data.slice(1).map((ys) => {
      const have = [];
      for (let i = 0; i < ys.length; i++) if (ys[i] !== null && ys[i] !== undefined) have.push(i);
      return Int32Array.from(have);
    })];
    return data;
  }

  setTables(tables, { keepZoom = false } = {}) {
    this.tables = tables;
    this.draw(keepZoom);
  }

  chooseLog() {
    const can = decadesSpanned(this.tables) > 0;
    const want = this.logChoice === "auto" ? decadesSpanned(this.tables) >= AUTO_LOG_DECADES : Boolean(this.logChoice);
    return want && can;
  }

  draw(keepZoom = false) {
    const cols = this.layout();
    const log = this.chooseLog();
    const shape = cols.map((c) => `${c.src}${c.smooth ? "s" : ""}`).join();
    if (this.u && (log !== this.log || shape !== this.shape)) { this.u.destroy(); this.u = null; }
    this.log = log;
    this.shape = shape;
    this.figure.dataset.log = String(log);
    this.cols = cols;
    const data = this.data(cols);
    if (!this.u) {
      this.u = new uPlot(this.options(cols), data, this.plot);
      this.figure.dataset.ready = "true";
      if (keepZoom && this.zoomed) this.u.setScale("x", this.zoomed);
    } else if (keepZoom && this.zoomed) {
      this.u.setData(data, false);
      this.u.setScale("x", this.zoomed);
    } else {
      this.u.setData(data, true);
    }
    this.updateLegend(this.u);
    if (this.opts.onLog) this.opts.onLog(this.log);
  }

  setSmoothing(weight) {
    this.smoothing = weight;
    if (this.u) this.draw(Boolean(this.zoomed));
  }

  /** true / false / "auto" (log when the values span two decades). */
  setLog(choice) {
    this.logChoice = choice;
    if (this.u) this.draw(Boolean(this.zoomed));
  }

  /** The legend: each series' value at the cursor (its nearest point) and its latest value. */
  updateLegend(u) {
    if (!u) return;
    const idx = u.cursor.idx;
    const xs = u.data[0];
    const atCursor = idx !== null && idx !== undefined && u.cursor.left >= 0;
    const rows = this.opts.series.map((s, i) => {
      const t = this.tables[i];
      const n = t.xs.length;
      const latest = n ? t.ys[n - 1] : null;
      let cursorText = "";
      if (atCursor && n) {
        const j = binarySearch(t.xs, xs[idx]);
        const smoothedCol = this.cols.findIndex((c) => c.src === i && c.smooth);
        let v = t.ys[j];
        if (smoothedCol >= 0) {
          const col = u.data[smoothedCol + 1];
          const k = binarySearch(xs, t.xs[j]);
          if (col[k] !== null && col[k] !== undefined) v = col[k];
        }
        cursorText = `${fmtValue(v)} at ${this.xfmt.point(t.xs[j])}`;
      }
      return { s, latest, latestX: n ? t.xs[n - 1] : null, cursorText, n };
    });
    if (this.legend.children.length !== rows.length) {
      this.legend.replaceChildren(...rows.map(({ s }) => h("div", { class: "legend-row" },
        h("span", { class: `legend-swatch${s.dash ? " dashed" : ""}`, style: null, "aria-hidden": "true" }),
        h("span", { class: "legend-name" }, s.label),
        h("span", { class: "legend-cursor" }),
        h("span", { class: "legend-latest" }))));
      rows.forEach(({ s }, i) => { this.legend.children[i].firstElementChild.style.borderColor = s.stroke; });
    }
    rows.forEach((r, i) => {
      const row = this.legend.children[i];
      setText(row.children[2], r.cursorText);
      setText(row.children[3], r.n ? `latest ${fmtValue(r.latest)} (${this.xfmt.point(r.latestX)})` : "no points");
    });
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
    else if (this.u) this.u.setData(this.u.data, true);
  }

  destroy() {
    this.resize.disconnect();
    if (this.u) this.u.destroy();
    this.u = null;
    this.legend.remove();
  }
}

function fade(color) {
  return /^#[0-9a-f]{6}$/i.test(color) ? `${color}40` : color;
}

/** Markers on a sparse series only where they do not crowd (uPlot's points.show may be a function). */
function pointsFew(u, si) {
  const have = u.data[si].reduce((n, v) => n + (v !== null && v !== undefined ? 1 : 0), 0);
  return have > 0 && have <= u.bbox.width / (8 * devicePixelRatio);
}
