// Job page: header, failure banner, progress, code bundle, timeline, charts, checkpoints, logs.
// One SSE connection (GET /api/jobs/{id}/stream) feeds status, progress, metric points and
// checkpoints; the first render and every status change read the job over REST.
import { api, ApiError } from "./api.js";
import { $, h, setText, debounce } from "./dom.js";
import { MetricChart } from "./charts.js";
import { LogView } from "./logs.js";
import {
  fmtBytes, fmtClock, fmtDuration, fmtInt, fmtNumber, fmtRate, jobDuration, parseTime, progressFraction, statusBadge, TERMINAL,
} from "./format.js";
import { setProgress } from "./progress.js";

const jobId = Number($("#job-page").dataset.jobId);
let job = null;
let stream = null;
let fallbackTimer = null;

const charts = {
  loss: new MetricChart($("#chart-loss"), { jobId, names: ["train/loss", "val/loss"], yLabel: "loss" }),
  acc: new MetricChart($("#chart-acc"), { jobId, names: ["val/accuracy"], yLabel: "accuracy", colors: ["#16a34a"] }),
  lr: new MetricChart($("#chart-lr"), { jobId, names: ["lr"], yLabel: "lr", colors: ["#9333ea"] }),
};
// Zooming one chart zooms all of them to the same steps; resetting one resets all.
for (const chart of Object.values(charts)) {
  chart.onZoomCb = (min, max, source) => {
    for (const other of Object.values(charts)) if (other !== source) other.zoomTo(min, max);
  };
  chart.onReset = (source) => {
    for (const other of Object.values(charts)) if (other !== source) other.resetZoom(false);
  };
}
const logs = new LogView(jobId);

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
  const facts = [job.strategy, batch,
    job.spec?.model?.name && `model ${job.spec.model.name}`, job.spec?.data?.name && `data ${job.spec.data.name}`,
    job.worker_host && `on ${job.worker_host}`, job.attempt > 1 ? `attempt ${job.attempt}` : null].filter(Boolean);
  setText($("#job-facts"), facts.join(" · "));
  $("#cancel-job").hidden = TERMINAL.has(job.status) || job.status === "cancelling";
  renderCode(job);
  renderFailure();
  renderProgress(job);
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
  if (entry) setText($("#code-command"), `torchrun --nproc-per-node ${j.spec.nproc ?? 1} ${entry}`);
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
  setText($("#job-error-text"), job.error || "No error message was recorded.");
}

function renderProgress(p) {
  const merged = { ...job, ...p };
  const fraction = progressFraction(merged);
  setProgress($("#job-progress"), fraction, merged.status);
  const steps = merged.total_steps ? `step ${fmtInt(merged.step)} of ${fmtInt(merged.total_steps)} (${Math.round(fraction * 100)}%)` : `step ${fmtInt(merged.step || 0)}`;
  setText($("#job-progress-text"), steps);
  const running = merged.status === "running";
  const stats = [
    [running ? "Samples/s" : "Last samples/s", fmtRate(merged.samples_per_s)],
    ["ETA", running ? fmtDuration(merged.eta_s) : "–"],
    ["Epoch", fmtInt(merged.epoch)],
    ["Samples seen", fmtInt(merged.samples)],
    ["Latest loss", fmtNumber(merged.latest_loss)],
    ["Started", fmtClock(merged.started_at)],
    ["Duration", fmtDuration(jobDuration(merged))],
  ];
  const dl = $("#job-stats");
  if (dl.children.length !== stats.length) {
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
      h("a", { class: "btn btn-small", href: `/new?resume=${c.id}`, "aria-label": `Resume from checkpoint at step ${c.step}` }, "Resume from here")),
  )));
}

function loadCharts() {
  return Promise.all(Object.values(charts).map((c) => c.loadFull()));
}

function onEnd() {
  stopLive();
  Promise.all([loadJob(), loadCharts(), loadCheckpoints()]).catch(() => {});
  logs.jobFinished();
}

function stopLive() {
  if (stream) { stream.close(); stream = null; }
  clearInterval(fallbackTimer);
}

function startLive() {
  stream = new EventSource(`/api/jobs/${jobId}/stream`);
  stream.addEventListener("status", (e) => {
    renderJob(JSON.parse(e.data));
    reloadJob();
    if (TERMINAL.has(job.status)) onEnd();
  });
  stream.addEventListener("progress", (e) => renderProgress(Object.assign(job, JSON.parse(e.data))));
  stream.addEventListener("metrics", (e) => {
    const points = JSON.parse(e.data);
    for (const chart of Object.values(charts)) chart.append(points);
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
    loadJob().then((j) => { if (TERMINAL.has(j.status)) onEnd(); }).catch(() => {});
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

$("#code-files").addEventListener("toggle", () => { loadCodeFiles(); });
$("#code-copy").addEventListener("click", () => { copySha(); });
$("#log-scale").addEventListener("change", (e) => {
  charts.loss.setLog(e.target.checked);
  charts.lr.setLog(e.target.checked);
});
$("#reset-zoom").addEventListener("click", () => {
  for (const chart of Object.values(charts)) chart.resetZoom(false);
});
// Durations and "ago" texts move with the clock even when no event arrives.
setInterval(() => { if (job && !TERMINAL.has(job.status)) renderProgress({}); }, 1000);

async function main() {
  // The charts' requests go out with the job's, not after it: that is most of the first draw.
  const charts = loadCharts();
  const detail = await loadJob();
  await Promise.all([charts, loadCheckpoints()]);
  if (TERMINAL.has(detail.status)) {
    $("#log-follow").checked = false;
    logs.finished = true;
    logs.poll();
  } else {
    startLive();
    logs.poll();
  }
}
main().catch((err) => { if (!(err instanceof ApiError && err.status === 404)) message(`Could not load the job: ${err.message}`, "alert-error"); });
