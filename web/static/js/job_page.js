// @ts-check
// Job page: the outcome first (a failure's cause, why a queued job waits, a finished job's final and
// best validation values), then progress, configuration, code bundle, charts, timeline, checkpoints,
// logs. One SSE connection (GET /api/jobs/{id}/stream) feeds status, progress, metric points and
// checkpoints; the first render and every status change read the job over REST.
import { api, ApiError } from "./api.js";
import { $, h, setText, debounce } from "./dom.js";
import { MetricPanel, outcomeOf } from "./job_charts.js";
import { renderConsoleNote } from "./console_note.js";
import { renderStartEstimate, renderTimeBar } from "./time_bar.js";
import { ranksRefresher, renderRanks } from "./rank_view.js";
import { fmtValue } from "./charts.js";
import { LogView } from "./logs.js";
import { loadNotifications } from "./notifications.js";
import {
  fmtAgo, fmtBytes, fmtClock, fmtDuration, fmtInt, fmtNumber, fmtRate, jobDuration, parseTime, progressFraction, statusBadge, TERMINAL,
} from "./format.js";
import { reportedCount, setProgress, stepsPhrase } from "./progress.js";
import { CANCELLABLE } from "./meta.js";
import { mayChangeJob, maySubmit } from "./me.js";

// The REST shapes, generated from the API's OpenAPI (web/types/api.d.ts; tsc checks their use).
/** @typedef {import("../../types/api").components["schemas"]["JobDetail"]} JobDetail */
/** @typedef {import("../../types/api").components["schemas"]["JobPlacement"]} JobPlacement */

const jobId = Number($("#job-page").dataset.jobId);
let job = null;
let stream = null;
let fallbackTimer = null;

const SMOOTHING_KEY = "rankzero.smoothing";
const storedSmoothing = Number(localStorage.getItem(SMOOTHING_KEY));
const smoothing = Number.isFinite(storedSmoothing) && localStorage.getItem(SMOOTHING_KEY) !== null ? storedSmoothing : 0.6;
$("#smoothing").value = String(smoothing);
setText($("#smoothing-value"), smoothing.toFixed(2));
const initialSeries = (() => { try { return JSON.parse($("#job-series").textContent); } catch { return null; } })();
const panel = new MetricPanel($("#charts-body"), {
  jobId, smoothing, initial: initialSeries, onChange: () => { renderChartsEmpty(); renderOutcome(); renderConsole(); },
});
const logs = new LogView(jobId);

function renderChartsEmpty() {
  const none = panel.charts.size === 0;
  let text = "";
  if (none && job && panel.loaded) {
    if (job.status === "queued" || job.status === "starting") text = "Charts appear when the job reports its first metrics.";
    else if (job.status === "failed") text = "This job recorded no metrics before it failed.";
    else if (TERMINAL.has(job.status)) text = "This job recorded no metrics.";
    else text = "No metrics yet: charts appear with the first logged value.";
  }
  const el = $("#charts-empty");
  el.hidden = !text;
  setText(el, text);
}

function renderConsole() {
  renderConsoleNote($("#console-note"), panel.console, jobId, () => { panel.loadFull().catch(() => {}); });
}

function message(text, kind = "") {
  const el = $("#job-message");
  el.hidden = !text;
  el.className = `alert ${kind}`;
  setText(el, text || "");
}

function renderJob(j) {
  job = { ...job, ...j };
  document.title = `${job.name} · rankzero`;
  setText($("#job-name"), job.name);
  const badge = $("#job-status");
  setText(badge, job.status);
  badge.className = `badge badge-${job.status}`;
  // A script job's batch is its own business: the spec's default batch_size says nothing about it.
  const batch = job.global_batch_size && !job.spec?.entrypoint ? `global batch ${fmtInt(job.global_batch_size)}` : null;
  const script = Boolean(job.spec?.entrypoint);
  const facts = [job.owner ? `submitted by ${job.owner}` : null, job.pool && `pool ${job.pool}`, job.strategy, batch,
    !script && job.spec?.model?.name && `model ${job.spec.model.name}`, !script && job.spec?.data?.name && `data ${job.spec.data.name}`,
    !job.placement && job.worker_host && `on ${job.worker_host}`,
    job.backend_job_id && `Slurm job ${job.backend_job_id}`, job.backend_partition && `partition ${job.backend_partition}`,
    job.backend_nodes && `nodes ${job.backend_nodes}`, job.attempt > 1 ? `attempt ${job.attempt}` : null,
    job.priority ? `priority ${job.priority}` : null,
    job.host_losses ? `lost its host ${job.host_losses === 1 ? "once" : `${job.host_losses} times`}` : null,
    job.tags?.length ? `tags ${job.tags.join(", ")}` : null].filter(Boolean);
  setText($("#job-facts"), facts.join(" · "));
  // Only what the signed-in user may do (members change their own jobs, admins any; viewers none).
  const mine = mayChangeJob(job.owner_id);
  $("#cancel-job").hidden = !mine || !CANCELLABLE.has(job.status);
  $("#clone-job").hidden = !maySubmit();
  // Housekeeping (issue 23): an ended job can be archived (hidden from the default list), and back.
  const archive = $("#archive-job");
  archive.hidden = !mine || !TERMINAL.has(job.status);
  setText(archive, job.archived ? "Unarchive" : "Archive");
  $("#job-note").hidden = !job.note;
  setText($("#job-note"), job.note || "");
  renderPlacement(job);
  renderUnwatched(job);
  renderWaiting(job);
  renderCode(job);
  renderFailure();
  renderProgress(job);
  renderConfig(job);
  renderOutcome();
  renderChartsEmpty();
}

/**
 * Where it runs: its hosts, and for an elastic fit, how many of its ranks it got.
 * @param {JobDetail} j
 */
function renderPlacement(j) {
  const el = $("#job-placement");
  /** @type {JobPlacement | null | undefined} */
  const p = j.placement;
  const live = !TERMINAL.has(j.status);
  if (!p || !Array.isArray(p.nodes) || !p.nodes.length) {
    // A Slurm pool's job: Slurm's state in words ("Slurm job 41: running on n[1-2] in partition low").
    el.hidden = !j.backend_state_words;
    if (j.backend_state_words) el.replaceChildren(h("span", {}, j.backend_state_words));
    return;
  }
  const hosts = p.nodes.map((n) => n.host);
  const parts = [`${live ? "Running" : "Ran"} on ${hosts.join(", ")}`];
  const wanted = /** @type {number | undefined} */ (j.spec?.nproc); // the spec crosses as a plain object
  if (p.nproc && wanted && p.nproc < wanted) {
    parts.push(`· on ${p.nproc} of ${wanted} ranks${p.accumulation_steps ? ` (accumulation ×${p.accumulation_steps})` : ""}: the same global batch, fewer processes`);
  }
  const gpus = p.nodes.flatMap((n) => (n.gpus || []).map((g) => `${n.host}:${g}`));
  el.hidden = false;
  el.replaceChildren(h("span", {}, parts.join(" ")), ...(gpus.length ? [h("span", { class: "muted" }, ` · GPUs ${gpus.join(", ")}`)] : []));
}

/**
 * Nothing has watched the job for a while: its worker's host or its Slurm pool's agent went silent, so what the page
 * shows (its state, its step) may be frozen (issue 35; the server decides: core/supervision.py).
 * @param {JobDetail} j
 */
function renderUnwatched(j) {
  const el = $("#job-unwatched");
  el.hidden = !j.supervisor_silence;
  setText(el, j.supervisor_silence ? `${j.supervisor_silence.charAt(0).toUpperCase()}${j.supervisor_silence.slice(1)}.` : "");
}

/** A queued job says why it waits (pending_reason when the scheduler gives one). */
function renderWaiting(j) {
  const box = $("#job-waiting");
  const waiting = j.status === "queued";
  box.hidden = !waiting;
  if (!waiting) return;
  const reason = j.pending_reason || "Waiting for a worker with free slots to pick it up.";
  setText($("#job-waiting-title"), `Queued ${fmtAgo(j.created_at)}`);
  const extra = [j.priority ? `Priority ${j.priority}.` : null, j.spec?.preemptible ? "Preemptible." : null].filter(Boolean).join(" ");
  setText($("#job-waiting-text"), extra ? `${reason} ${extra}` : reason);
  renderStartEstimate(j.start_estimate);
}

/** The spec, flattened to dotted keys; what differs from the defaults first. */
const specInfo = (() => { try { return JSON.parse($("#spec-defaults").textContent); } catch { return { defaults: {}, builtin_only: [] }; } })();

function flatten(value, prefix = "", out = new Map()) {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix) {
    out.set(prefix, value);
  }
  return out;
}

function showValue(v) {
  if (v === null || v === undefined) return "none";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

let configShown = null;
function renderConfig(j) {
  const key = JSON.stringify(j.spec || {});
  if (key === configShown) return;
  configShown = key;
  const spec = flatten(j.spec || {});
  const defaults = flatten(specInfo.defaults || {});
  const script = Boolean(j.spec?.entrypoint);
  const skip = new Set(script ? specInfo.builtin_only : []);
  skip.add("name");
  const changed = [];
  const same = [];
  for (const [path, v] of spec) {
    if (skip.has(path.split(".")[0])) continue;
    const d = defaults.has(path) ? defaults.get(path) : undefined;
    if (showValue(v) === showValue(d) || (d === undefined && (v === null || (typeof v === "object" && !Object.keys(v || {}).length)))) same.push([path, v]);
    else changed.push([path, v, d]);
  }
  $("#config-changed-body").replaceChildren(...changed.map(([path, v, d]) => h("tr", { dataset: { path } },
    h("th", { scope: "row" }, h("code", {}, path)),
    h("td", { class: "config-value" }, showValue(v)),
    h("td", { class: "muted" }, d === undefined ? "–" : showValue(d)))));
  $("#config-changed").hidden = changed.length === 0;
  $("#config-defaults-body").replaceChildren(...same.map(([path, v]) => h("tr", { dataset: { path } },
    h("th", { scope: "row" }, h("code", {}, path)), h("td", { class: "config-value" }, showValue(v)))));
  setText($("#config-defaults-summary"), `${same.length} settings left at their defaults`);
  setText($("#config-summary"), changed.length
    ? `${changed.length} ${changed.length === 1 ? "setting differs" : "settings differ"} from the defaults${script ? " (a script job: the built-in trainer's settings are left out)" : ""}.`
    : "Every setting is at its default.");
}

/** Final and best of each val/* series (and the final train loss) with their steps; a finished job leads with them. */
function renderOutcome() {
  if (!job) return;
  const names = panel.names().filter((n) => n.startsWith("val/")).sort();
  const rows = names.map((n) => outcomeOf(n, panel.full.get(n))).filter(Boolean);
  const terminal = TERMINAL.has(job.status);
  const box = $("#job-outcome");
  box.hidden = !terminal && rows.length === 0;
  if (box.hidden) return;
  const steps = stepsPhrase(job, fmtInt);
  const lead = {
    succeeded: `Finished ${steps} in ${fmtDuration(jobDuration(job))}.`,
    failed: `Failed after ${steps} (${fmtDuration(jobDuration(job))}).`,
    cancelled: `Cancelled after ${steps} (${fmtDuration(jobDuration(job))}).`,
  }[job.status] || `So far, at step ${reportedCount(job, "step", fmtInt)}:`;
  setText($("#job-outcome-lead"), lead);
  setText($("#outcome-h"), terminal ? "Result" : "Best so far");
  const items = rows.map((r) => h("div", { class: "outcome-item", dataset: { metric: r.name } },
    h("dt", {}, r.name),
    h("dd", {}, h("span", { class: "outcome-final" }, fmtValue(r.final)), h("span", { class: "muted" }, ` ${terminal ? "final" : "latest"}, step ${fmtInt(r.finalStep)}`)),
    h("dd", { class: "outcome-best" }, `best ${fmtValue(r.best)} at step ${fmtInt(r.bestStep)}${r.higher ? " (max)" : " (min)"}`)));
  const train = panel.full.get("train/loss");
  if (train?.xs.length || job.latest_loss !== null) {
    const last = train?.xs.length ? train.ys[train.ys.length - 1] : job.latest_loss;
    // The job's latest loss may come from a script's console (`loss`) or TensorBoard: named train/loss
    // only when that series is the one it is.
    const label = train?.xs.length ? "train/loss" : "loss";
    items.push(h("div", { class: "outcome-item", dataset: { metric: label } },
      h("dt", {}, label), h("dd", {}, h("span", { class: "outcome-final" }, fmtValue(job.latest_loss ?? last)), h("span", { class: "muted" }, terminal ? " final" : " latest"))));
  }
  $("#job-outcome-values").replaceChildren(...items);
}

// The job's code bundle (spec `code`): sha256 (short; the full one on hover and by "Copy"), size, file
// count, the command a script job runs, and the file list, fetched only when "Files" is opened.
const MAX_LISTED_FILES = 2000;
let codeSha = null;

function renderCode(j) {
  const ref = typeof j.spec?.code === "string" ? j.spec.code : "";
  const box = $("#job-code");
  box.hidden = !ref;
  if (!ref) return;
  const sha = ref.replace(/^sha256:/, "");
  if (sha !== codeSha) {
    codeSha = sha;
    const el = $("#code-sha");
    setText(el, `sha256:${sha.slice(0, 12)}…`);
    el.title = `sha256:${sha}`;
    el.dataset.sha256 = sha;
    $("#code-files").open = false;
    $("#code-files").dataset.loaded = "";
  }
  const stored = j.code_bytes !== null && j.code_bytes !== undefined;
  setText($("#code-size"), stored ? `${fmtBytes(j.code_bytes)} compressed` : "no longer stored");
  setText($("#code-count"), stored ? fmtInt(j.code_files) : "–");
  $("#code-files").hidden = !stored;
  const entry = j.spec?.entrypoint;
  $("#code-command-row").hidden = !entry;
  if (entry) {
    // As the worker runs it: the ranks it got (an elastic fit may start fewer), one torchrun per host.
    const nproc = j.placement?.nproc ?? j.spec.nproc ?? 1;
    const nnodes = j.spec.nnodes ?? 1;
    setText($("#code-command"), `torchrun ${nnodes > 1 ? `--nnodes ${nnodes} ` : ""}--nproc-per-node ${nproc} ${entry}`);
  }
}

async function loadCodeFiles() {
  const details = $("#code-files");
  if (!details.open || details.dataset.loaded === codeSha || !codeSha) return;
  const sha = codeSha;
  details.dataset.loaded = sha;
  const status = $("#code-files-status");
  setText(status, "Loading the file list…");
  try {
    const listing = await api(`/code/${sha}/files`);
    const paths = listing.paths.slice(0, MAX_LISTED_FILES);
    $("#code-files-body").replaceChildren(...paths.map((f) => h("tr", {},
      h("td", {}, h("code", {}, f.path)),
      h("td", { class: "num" }, fmtBytes(f.size)))));
    $("#code-files-table").hidden = false;
    const more = listing.paths.length - paths.length;
    setText(status, more > 0 ? `The first ${fmtInt(paths.length)} of ${fmtInt(listing.paths.length)} files.`
      : `${fmtInt(listing.files)} ${listing.files === 1 ? "file" : "files"}, ${fmtBytes(listing.unpacked_bytes)} unpacked.`);
  } catch (err) {
    details.dataset.loaded = "";
    setText(status, `Could not load the file list: ${err.message}`);
  }
}

async function copySha() {
  const el = $("#code-sha");
  const full = `sha256:${el.dataset.sha256 || ""}`;
  try {
    await navigator.clipboard.writeText(full);
    setText($("#code-copied"), "Copied");
  } catch {
    // No clipboard (an insecure origin, or refused): show the full value selected, ready for Ctrl+C.
    setText(el, full);
    getSelection().selectAllChildren(el);
    setText($("#code-copied"), "Selected: press Ctrl+C");
  }
  setTimeout(() => setText($("#code-copied"), ""), 3000);
}

function renderFailure() {
  const box = $("#job-error");
  const failed = job.status === "failed";
  box.hidden = !failed;
  if (!failed) return;
  const where = job.failed_rank !== null && job.failed_rank !== undefined ? ` on rank ${job.failed_rank}` : "";
  const code = job.exit_code !== null && job.exit_code !== undefined ? ` (exit code ${job.exit_code})` : "";
  setText($("#job-error-title"), `Failed${where}${code}`);
  setText($("#job-error-cause"), causeOf(job.error));
  setText($("#job-error-text"), job.error || "No error message was recorded.");
  $("#job-traceback").hidden = !job.error || !job.error.includes("\n");
  if (!failureShown) {
    failureShown = true;
    // The failing rank's log, opened at its end, right under the cause.
    $("#job-error").after($("#logs-card"));
    logs.finished = true;
    $("#log-follow").checked = false;
    logs.showRank(job.failed_rank ?? 0, "stderr");
  }
}
let failureShown = false;

/** The one line that says why: the last "SomeError: message" line of a traceback, else its first line. */
export function causeOf(error) {
  if (!error) return "No error message was recorded.";
  const lines = error.split("\n").map((l) => l.trim()).filter(Boolean);
  const exc = lines.filter((l) => /^([A-Za-z_][\w.]*)?(Error|Exception|Interrupt|Exit|Warning|Failure)\b.*/.test(l) || /^[A-Za-z_][\w.]*(Error|Exception): /.test(l));
  return exc.length ? exc[exc.length - 1] : lines[0];
}

function renderProgress(p) {
  const merged = { ...job, ...p };
  const fraction = progressFraction(merged);
  setProgress($("#job-progress"), fraction, merged.status);
  const steps = merged.total_steps ? `step ${fmtInt(merged.step)} of ${fmtInt(merged.total_steps)} (${Math.round(fraction * 100)}%)` : `step ${reportedCount(merged, "step", (v) => fmtInt(v || 0))}`;
  setText($("#job-progress-text"), steps);
  const running = merged.status === "running";
  const terminal = TERMINAL.has(merged.status);
  // A finished job leads with its result (above); no full bar and "ETA –" here.
  $("#job-progress-row").hidden = terminal;
  $("#job-progress-card").hidden = merged.status === "queued"; // nothing to show yet: the waiting note says why
  const stats = terminal ? [
    ["Steps", merged.total_steps && merged.status !== "succeeded" ? `${fmtInt(merged.step)} / ${fmtInt(merged.total_steps)}` : reportedCount(merged, "step", fmtInt)],
    ["Epoch", reportedCount(merged, "epoch", fmtInt)],
    ["Samples seen", reportedCount(merged, "samples", fmtInt)],
    ["Last samples/s", fmtRate(merged.samples_per_s)],
    ["Final loss", fmtNumber(merged.latest_loss)],
    ["Started", fmtClock(merged.started_at)],
    ["Duration", fmtDuration(jobDuration(merged))],
  ] : [
    [running ? "Samples/s" : "Last samples/s", fmtRate(merged.samples_per_s)],
    ["ETA", running ? fmtDuration(merged.eta_s) : "–"],
    ["Epoch", reportedCount(merged, "epoch", fmtInt)],
    ["Samples seen", reportedCount(merged, "samples", fmtInt)],
    ["Latest loss", fmtNumber(merged.latest_loss)],
    ["Started", fmtClock(merged.started_at)],
    ["Duration", fmtDuration(jobDuration(merged))],
  ];
  const dl = $("#job-stats");
  if (dl.children.length !== stats.length || dl.firstElementChild?.firstElementChild.textContent !== stats[0][0]) {
    dl.replaceChildren(...stats.map(([k]) => h("div", {}, h("dt", {}, k), h("dd"))));
  }
  stats.forEach(([k, v], i) => {
    setText(dl.children[i].firstElementChild, k);
    setText(dl.children[i].lastElementChild, v);
  });
}

function renderTimeline(transitions) {
  const items = (transitions || []).map((t, i) => {
    const prev = i > 0 ? parseTime(transitions[i - 1].at) : null;
    const at = parseTime(t.at);
    const gap = prev !== null && at !== null ? `+${fmtDuration((at - prev) / 1000)}` : "";
    return h("li", {},
      statusBadge(t.status),
      h("time", { datetime: t.at, title: t.at }, fmtClock(t.at)),
      gap && h("span", { class: "muted" }, gap),
      t.attempt > 1 ? h("span", { class: "muted" }, `attempt ${t.attempt}`) : null,
      t.detail ? h("p", { class: "detail" }, t.detail) : null);
  });
  $("#job-timeline").replaceChildren(...items);
}

async function loadJob() {
  try {
    const detail = await api(`/jobs/${jobId}`);
    renderJob(detail);
    renderTimeline(detail.transitions);
    renderTimeBar(detail.time_breakdown);
    renderRanks(detail.ranks);  // which rank is stuck (its stacks), which is slow
    return detail;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      message(`There is no job #${jobId}.`, "alert-error");
      stopLive();
    }
    throw err;
  }
}
const reloadJob = debounce(() => loadJob().catch(() => {}), 200);

async function loadCheckpoints() {
  const rows = await api(`/jobs/${jobId}/checkpoints`);
  $("#checkpoints-empty").hidden = rows.length > 0;
  $("#checkpoints-table").hidden = rows.length === 0;
  $("#checkpoints-body").replaceChildren(...rows.map((c) => h("tr", { dataset: { checkpointId: c.id } },
    h("td", { class: "num" }, fmtInt(c.step)),
    h("td", { class: "num" }, c.epoch ?? "–"),
    h("td", { class: "num" }, fmtBytes(c.bytes)),
    h("td", {}, h("code", { class: "sha", title: c.sha256 }, `${c.sha256.slice(0, 16)}…`)),
    h("td", {}, h("time", { datetime: c.created_at, title: c.created_at }, fmtClock(c.created_at))),
    h("td", { class: "row-actions" },
      h("a", { class: "btn btn-small", href: `/api/checkpoints/${c.id}/download`, download: "", "aria-label": `Download checkpoint at step ${c.step}` }, "Download"),
      // Resuming is changing the job (the server refuses another member's: api/routes/jobs.py).
      mayChangeJob(job?.owner_id) ? h("a", { class: "btn btn-small", href: `/new?resume=${c.id}`, "aria-label": `Resume from checkpoint at step ${c.step}` }, "Resume from here") : null),
  )));
}

function loadCharts() {
  return panel.loadFull().then(renderConsole);
}

function onEnd() {
  stopLive();
  Promise.all([loadJob(), loadCharts(), loadCheckpoints()]).catch(() => {});
  setTimeout(() => loadNotifications(jobId), 2000); // the end's notifications are sent just after it
  logs.jobFinished();
}

function stopLive() {
  if (stream) { stream.close(); stream = null; }
  clearInterval(fallbackTimer);
}

/** The stream is the charts' feed; when the job's step runs well past the newest training point in hand
 * (a stream that skipped points, a proxy that buffers), the charts are read again over REST. */
let lastCatchUp = 0;
function catchUpCharts(j) {
  if (panel.zoomed || !j.step || Date.now() - lastCatchUp < 30_000) return;
  let newest = 0;
  for (const [name, s] of panel.full) {
    if (name.startsWith("sys/") || !s.xs.length) continue;
    newest = Math.max(newest, s.xs[s.xs.length - 1]);
  }
  const every = Number(j.spec?.log_every) || 10;
  if (j.step > newest + 10 * every) {
    lastCatchUp = Date.now();
    panel.loadFull().catch(() => {});
  }
}

function startLive() {
  stream = new EventSource(`/api/jobs/${jobId}/stream`);
  stream.addEventListener("status", (e) => {
    renderJob(JSON.parse(e.data));
    reloadJob();
    if (TERMINAL.has(job.status)) onEnd();
  });
  const refreshRanks = ranksRefresher(() => api(`/jobs/${jobId}`));  // every rank's step, the stragglers
  stream.addEventListener("progress", (e) => {
    renderProgress(Object.assign(job, JSON.parse(e.data)));
    refreshRanks();
  });
  stream.addEventListener("metrics", (e) => {
    panel.append(JSON.parse(e.data));
  });
  stream.addEventListener("checkpoint", () => loadCheckpoints().catch(() => {}));
  stream.addEventListener("end", onEnd);
  stream.addEventListener("error", () => {
    // EventSource reconnects by itself; if the session is gone, reading the job sends us to /login.
    if (stream && stream.readyState === EventSource.CLOSED) {
      stream = null;
      loadJob().then((j) => { if (!TERMINAL.has(j.status)) setTimeout(startLive, 3000); }).catch(() => {});
    }
  });
  // Belt and braces: a slow heartbeat over REST in case a proxy swallows the stream.
  fallbackTimer = setInterval(() => {
    loadJob().then((j) => { if (TERMINAL.has(j.status)) onEnd(); else catchUpCharts(j); }).catch(() => {});
  }, 10_000);
}

$("#cancel-job").addEventListener("click", async () => {
  const button = $("#cancel-job");
  button.disabled = true;
  try {
    renderJob(await api(`/jobs/${jobId}/cancel`, { method: "POST" }));
    message("Cancel requested: the ranks get SIGTERM, a checkpoint, then exit.", "alert-info");
    reloadJob();
  } catch (err) {
    message(`Could not cancel: ${err.message}`, "alert-error");
  } finally {
    button.disabled = false;
  }
});

$("#archive-job").addEventListener("click", async () => {
  const button = $("#archive-job");
  button.disabled = true;
  try {
    renderJob(await api(`/jobs/${jobId}/${job?.archived ? "unarchive" : "archive"}`, { method: "POST" }));
  } catch (err) {
    message(`Could not change it: ${err.message}`, "alert-error");  // a 403 says which role it needs
  } finally {
    button.disabled = false;
  }
});

$("#code-files").addEventListener("toggle", () => { loadCodeFiles(); });
$("#code-copy").addEventListener("click", () => { copySha(); });
$("#log-scale").addEventListener("change", (e) => panel.setLogAll(e.target.checked));
$("#reset-zoom").addEventListener("click", () => panel.resetZoom());
$("#smoothing").addEventListener("input", (e) => {
  const w = Number(e.target.value);
  setText($("#smoothing-value"), w.toFixed(2));
  localStorage.setItem(SMOOTHING_KEY, String(w));
  panel.setSmoothing(w);
});
// Durations and "ago" texts move with the clock even when no event arrives.
setInterval(() => { if (job && !TERMINAL.has(job.status)) { renderProgress({}); renderWaiting(job); } }, 1000);

async function main() {
  // The charts' requests go out with the job's, not after it: that is most of the first draw.
  const charts = loadCharts();
  const detail = await loadJob();
  await Promise.all([charts, loadCheckpoints()]);
  renderOutcome();
  loadNotifications(jobId);
  if (TERMINAL.has(detail.status)) {
    $("#log-follow").checked = false;
    logs.finished = true;
    if (detail.status !== "failed") logs.poll();
  } else {
    startLive();
    logs.poll();
  }
}
main().catch((err) => { if (!(err instanceof ApiError && err.status === 404)) message(`Could not load the job: ${err.message}`, "alert-error"); });
