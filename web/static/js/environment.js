// @ts-check
// A job's own packages panel (spec `environment`; GET /api/jobs/{id}/environment): the locked packages and
// versions every node and restart installs, how the last preparation went ("cached in 0.03 s", a failure
// with uv's message), and the tail of uv's output. Hidden for a job without an environment (never asked).
import { ApiError, api } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtBytes } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["JobEnvironmentPublic"]} JobEnvironment */

const REFRESH_MS = 5000;
const card = $("#environment-card");
const jobId = Number(card.dataset.jobId);

/** One line saying how the environment stands. @param {JobEnvironment} env */
export function summary(env) {
  if (env.state === "waiting") return "waiting: prepared when the job starts";
  const n = env.packages.length;
  const torch = env.own_torch ? "its own torch" : `the service's torch ${env.torch ?? "?"}`;
  const took = env.prepare_s == null ? "" : `, ${env.cached ? "cached" : "built"} in ${env.prepare_s.toFixed(1)} s`;
  const size = env.size_bytes ? `, ${fmtBytes(env.size_bytes)} on its host` : "";
  const words = { waiting: "waiting", resolving: "resolving", building: "preparing", ready: "ready", failed: "failed" };
  return `${words[env.state]}: ${n} package${n === 1 ? "" : "s"} over ${torch}${took}${size}`;
}

/** @param {JobEnvironment} env */
function render(env) {
  card.hidden = false;
  setText($("#environment-summary"), summary(env));
  const error = $("#environment-error");
  error.hidden = !env.error;
  setText(error, env.error ?? "");
  $("#environment-body").replaceChildren(...env.packages.map((p) =>
    h("tr", {}, h("td", { class: "mono" }, p.name), h("td", { class: "mono" }, p.version))));
  $("#environment-table").hidden = env.packages.length === 0;
  setText($("#environment-log"), env.log_tail);
}

/** @type {ReturnType<typeof setInterval> | undefined} */
let timer;

async function load() {
  if (document.visibilityState === "hidden") return;
  try {
    const env = /** @type {JobEnvironment} */ (await api(`/jobs/${jobId}/environment`));
    render(env);
    if (env.state === "ready" || env.state === "failed") clearInterval(timer);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return; // the job names none
    setText($("#environment-summary"), "The environment could not be read; retrying.");
  }
}

/** Only a job whose spec names an environment has one: others never ask (a 404 is a console error). */
async function start() {
  try {
    const job = /** @type {{spec?: {environment?: unknown}}} */ (await api(`/jobs/${jobId}`));
    if (!job.spec?.environment) return;
  } catch {
    return; // the job page itself says when the job cannot be read
  }
  load();
  timer = setInterval(load, REFRESH_MS);
}

start();
