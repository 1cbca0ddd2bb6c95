// @ts-check
// Jobs list: filters and paging mirrored in the URL, polled every 2 s, rows updated in place
// (so focus and ticked boxes survive the refresh), ticked jobs go to the compare page. Optional columns
// (a parameter of the spec's `params`, or a metric's latest value) and the order (any sortable header)
// are asked of the server (GET /api/jobs `sort`, `metrics`: core/job_sort.py), so they hold across pages.
import { api, ApiError } from "./api.js";
import { $, h, setText, debounce } from "./dom.js";
import { fmtAgo, fmtDuration, fmtInt, fmtNumber, fmtRate, jobDuration, progressFraction } from "./format.js";
import { progressBar, setProgress } from "./progress.js";
import { STATES } from "./meta.js";

const PAGE_SIZE = 25;
const POLL_MS = 2000;

const state = { status: "", name: "", mine: false, offset: 0, total: 0, sort: "", /** @type {string[]} */ cols: [] };
const MAX_METRIC_COLUMNS = 5; // the server's limit (core/job_sort.py)
const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_.]{0,63}$/;
const selected = new Set();
const rows = new Map(); // job id -> {tr, cells}
let timer = null;
let inflight = null;

/** @typedef {import("../../types/api").components["schemas"]["JobPublic"]} JobPublic */
/** @typedef {import("../../types/api").components["schemas"]["JobPage"]} JobPage */

/** The status filter lists the server's states (GET /api/meta), in lifecycle order. */
function fillStatusFilter() {
  const select = $("#filter-status");
  select.append(...STATES.map((s) => h("option", { value: s }, s)));
}

function readUrl() {
  const q = new URLSearchParams(location.search);
  state.status = q.get("status") || "";
  state.name = q.get("name") || "";
  state.mine = q.get("mine") === "true";
  state.offset = Math.max(0, parseInt(q.get("offset") || "0", 10) || 0);
  state.sort = q.get("sort") || "";
  state.cols = q.getAll("col").filter(validColumn);
  $("#filter-status").value = state.status;
  $("#filter-name").value = state.name;
  $("#filter-mine").checked = state.mine;
}

function writeUrl() {
  const q = new URLSearchParams();
  if (state.status) q.set("status", state.status);
  if (state.name) q.set("name", state.name);
  if (state.mine) q.set("mine", "true");
  if (state.offset) q.set("offset", String(state.offset));
  if (state.sort) q.set("sort", state.sort);
  state.cols.forEach((c) => q.append("col", c));
  const s = q.toString();
  history.replaceState(null, "", s ? `?${s}` : location.pathname);
}

/** @param {JobPublic} job */
function makeRow(job) {
  const check = h("input", { type: "checkbox", class: "pick", "aria-label": `Select ${job.name} (#${job.id}) for compare` });
  check.addEventListener("change", () => {
    if (check.checked) selected.add(job.id); else selected.delete(job.id);
    updateCompareButton();
  });
  const cells = {
    check,
    link: h("a", { href: `/jobs/${job.id}` }),
    id: h("span", { class: "muted id" }),
    params: h("span", { class: "muted params" }), // the spec's params (sweeps, issue 24): lr=0.01 · batch_size=16
    badge: h("span", { class: "badge" }),
    // data-label: the column's name, shown before the value where a narrow screen stacks the row.
    strategy: h("td", { class: "strategy", dataset: { label: "Strategy" } }),
    bar: progressBar(`Progress of ${job.name}`),
    progressText: h("span", { class: "progress-text" }),
    rate: h("td", { class: "num rate", dataset: { label: "Samples/s" } }),
    eta: h("td", { class: "num eta", dataset: { label: "ETA" } }),
    loss: h("td", { class: "num loss", dataset: { label: "Loss" } }),
    started: h("td", { class: "started", dataset: { label: "Started" } }),
    duration: h("td", { class: "num duration", dataset: { label: "Duration" } }),
  };
  const tr = h("tr", { dataset: { jobId: job.id } },
    h("td", { class: "pick-cell" }, check),
    h("td", { class: "name" }, cells.link, " ", cells.id, " ", cells.params),
    h("td", { class: "status" }, cells.badge),
    cells.strategy,
    h("td", { class: "col-progress" }, h("div", { class: "progress-cell" }, cells.bar, cells.progressText)),
    cells.rate, cells.eta, cells.loss, cells.started, cells.duration,
    ...state.cols.map((c) => h("td", { class: "num extra", dataset: { label: columnLabel(c) } })),
  );
  return { tr, cells };
}

/** @param {JobPublic} job */
function updateRow(row, job) {
  const c = row.cells;
  setText(c.link, job.name);
  setText(c.id, job.owner ? `#${job.id} · ${job.owner}` : `#${job.id}`);  // who submitted it (issue 23)
  const params = Object.entries(job.spec?.params || {}).map(([k, v]) => `${k}=${typeof v === "number" ? fmtNumber(v, 3) : v}`).join(" · ");
  setText(c.params, params.length > 80 ? `${params.slice(0, 79)}…` : params);
  setText(c.badge, job.status);
  c.badge.className = `badge badge-${job.status}`;
  setText(c.strategy, job.strategy || "–");
  setProgress(c.bar, progressFraction(job), job.status);
  setText(c.progressText, job.total_steps ? `${fmtInt(job.step ?? 0)} / ${fmtInt(job.total_steps)}` : (job.step ? fmtInt(job.step) : ""));
  // The last measured speed stays informative after the run; an ETA only while it trains.
  setText(c.rate, fmtRate(job.samples_per_s));
  setText(c.eta, job.status === "running" ? fmtDuration(job.eta_s) : "–");
  setText(c.loss, fmtNumber(job.latest_loss));
  setText(c.started, job.started_at ? fmtAgo(job.started_at) : "–");
  c.started.title = job.started_at || "";
  setText(c.duration, fmtDuration(jobDuration(job)));
  c.check.checked = selected.has(job.id);
  const extra = row.tr.querySelectorAll("td.extra");
  state.cols.forEach((column, i) => setText(extra[i], columnValue(job, column)));
}

/** @param {string} column `param:NAME` or `metric:NAME` */
function validColumn(column) {
  const [kind, ...rest] = column.split(":");
  const name = rest.join(":");
  return (kind === "param" && PARAM_NAME.test(name)) || (kind === "metric" && name.length > 0 && name.length <= 200);
}

/** @param {string} column */
function columnLabel(column) {
  const name = column.slice(column.indexOf(":") + 1);
  return column.startsWith("metric:") ? `${name} (latest)` : name;
}

/** @param {JobPublic} job @param {string} column */
function columnValue(job, column) {
  const name = column.slice(column.indexOf(":") + 1);
  const value = column.startsWith("param:") ? job.spec?.params?.[name] : job.metrics?.[name];
  if (value === undefined || value === null) return "–";
  return typeof value === "number" ? fmtNumber(value, 4) : String(value);
}

/** The header: sortable columns show their direction (aria-sort); each added column has a remove button. */
function renderHead() {
  const head = $("#jobs-head");
  head.querySelectorAll("th.extra").forEach((th) => th.remove());
  state.cols.forEach((column) => {
    const remove = h("button", { type: "button", class: "remove-column", "aria-label": `Remove the ${columnLabel(column)} column`, title: "Remove this column" }, "×");
    remove.addEventListener("click", () => setColumns(state.cols.filter((c) => c !== column)));
    head.append(h("th", { scope: "col", class: "num extra", dataset: { sort: column } }, columnLabel(column), " ", remove));
  });
  head.querySelectorAll("th[data-sort]").forEach((th) => {
    const key = th.dataset.sort;
    const current = state.sort.replace(/^-/, "") === key ? (state.sort.startsWith("-") ? "descending" : "ascending") : null;
    if (current) th.setAttribute("aria-sort", current); else th.removeAttribute("aria-sort");
    let button = th.querySelector("button.sort");
    if (!button) {
      const label = th.firstChild ? th.firstChild.textContent : key;
      button = h("button", { type: "button", class: "sort", title: `Sort by ${label}` }, label);
      th.firstChild?.remove();
      th.prepend(button);
      button.addEventListener("click", () => sortBy(key));
    }
    setText(button, `${button.textContent.replace(/ [▲▼]$/, "")}${current ? (current === "ascending" ? " ▲" : " ▼") : ""}`);
  });
}

/** Click a header: ascending first (newest first for Started), then the other way. */
function sortBy(key) {
  const first = key === "created" ? `-${key}` : key;
  state.sort = state.sort === first ? (first.startsWith("-") ? key : `-${key}`) : first;
  state.offset = 0;
  writeUrl();
  renderHead();
  refresh();
}

/** @param {string[]} cols */
function setColumns(cols) {
  state.cols = cols;
  if (state.sort && !cols.includes(state.sort.replace(/^-/, "")) && /^-?(param|metric):/.test(state.sort)) state.sort = "";
  for (const row of rows.values()) row.tr.remove();
  rows.clear(); // the rows are rebuilt with the new cells
  writeUrl();
  renderHead();
  refresh();
}

function addColumn() {
  const name = $("#column-name").value.trim();
  const column = `${$("#column-kind").value}:${name}`;
  if (!validColumn(column)) {
    setText($("#list-state"), $("#column-kind").value === "param"
      ? "A parameter name starts with a letter or _, then letters, digits, _ or ." : "Give the metric's series name.");
    return;
  }
  if (column.startsWith("metric:") && state.cols.filter((c) => c.startsWith("metric:")).length >= MAX_METRIC_COLUMNS) {
    setText($("#list-state"), `At most ${MAX_METRIC_COLUMNS} metric columns.`);
    return;
  }
  $("#column-name").value = "";
  if (!state.cols.includes(column)) setColumns([...state.cols, column]);
}

/** Offer the parameter names the listed jobs have. @param {JobPublic[]} jobs */
function offerParams(jobs) {
  const names = new Set(jobs.flatMap((j) => Object.keys(j.spec?.params || {})));
  const list = $("#column-names");
  const have = Array.from(list.children).map((o) => o.getAttribute("value")).join();
  const want = [...names].sort();
  if (have !== want.join()) list.replaceChildren(...want.map((n) => h("option", { value: n })));
}

/** @param {JobPage} page */
function render(page) {
  const body = $("#jobs-body");
  const ids = page.items.map((j) => j.id);
  for (const [id, row] of rows) {
    if (!ids.includes(id)) { row.tr.remove(); rows.delete(id); }
  }
  page.items.forEach((job) => {
    let row = rows.get(job.id);
    if (!row) { row = makeRow(job); rows.set(job.id, row); }
    updateRow(row, job);
  });
  // Re-append only when the order changed: moving a node would drop keyboard focus inside it.
  const current = Array.from(body.children).map((tr) => Number(tr.dataset.jobId));
  if (current.join() !== ids.join()) ids.forEach((id) => body.append(rows.get(id).tr));

  offerParams(page.items);
  state.total = page.total;
  $("#jobs-empty").hidden = page.total > 0;
  const first = page.total ? state.offset + 1 : 0;
  const last = state.offset + page.items.length;
  setText($("#page-info"), page.total ? `${first}–${last} of ${page.total}` : "");
  $("#page-prev").disabled = state.offset === 0;
  $("#page-next").disabled = last >= page.total;
  $("#jobs-table").dataset.loaded = "true";
}

function updateCompareButton() {
  const button = $("#compare-selected");
  button.disabled = selected.size === 0;
  setText(button, selected.size ? `Compare selected (${selected.size})` : "Compare selected");
}

async function refresh() {
  clearTimeout(timer);
  if (inflight) inflight.abort();
  const controller = new AbortController();
  inflight = controller;
  try {
    const page = await api("/jobs", {
      query: {
        status: state.status, name: state.name, mine: state.mine ? "true" : null, limit: PAGE_SIZE, offset: state.offset,
        sort: state.sort || null, metrics: state.cols.filter((c) => c.startsWith("metric:")).map((c) => c.slice(7)),
      },
      signal: controller.signal,
    });
    // Paged past the end (jobs filtered away): step back to the last page.
    if (page.items.length === 0 && state.offset > 0 && page.total > 0) {
      state.offset = Math.max(0, Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE);
      writeUrl();
      return refresh();
    }
    render(page);
    setText($("#list-state"), "");
  } catch (err) {
    if (err.name === "AbortError") return;
    setText($("#list-state"), err instanceof ApiError ? `Could not load jobs: ${err.message}` : "Server unreachable; retrying…");
  } finally {
    if (inflight === controller) {
      inflight = null;
      timer = setTimeout(refresh, document.hidden ? POLL_MS * 5 : POLL_MS);
    }
  }
}

function onFilterChange() {
  state.status = $("#filter-status").value;
  state.name = $("#filter-name").value.trim();
  state.mine = $("#filter-mine").checked;
  state.offset = 0;
  writeUrl();
  refresh();
}

fillStatusFilter();
readUrl();
renderHead();
$("#add-column").addEventListener("click", addColumn);
$("#column-name").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); addColumn(); } });
$("#job-filters").addEventListener("submit", (e) => { e.preventDefault(); onFilterChange(); });
$("#filter-status").addEventListener("change", onFilterChange);
$("#filter-mine").addEventListener("change", onFilterChange);
$("#filter-name").addEventListener("input", debounce(onFilterChange, 300));
$("#page-prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); writeUrl(); refresh(); });
$("#page-next").addEventListener("click", () => { state.offset += PAGE_SIZE; writeUrl(); refresh(); });
$("#compare-selected").addEventListener("click", () => {
  location.assign(`/compare?ids=${Array.from(selected).sort((a, b) => a - b).join(",")}`);
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
refresh();
