// @ts-check
// Hosts: every machine the scheduler places jobs on (GET /api/hosts), polled every 5 s: its GPUs
// (each used or free), CPU rank slots used of total, the jobs on it (with their node rank), and when
// its workers last beat. A dead host (stale heartbeat) is greyed; a draining one takes nothing new.
import { api, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtAgo } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["HostPublic"]} HostPublic */

const POLL_MS = 5000;
let timer = null;

/** @param {HostPublic} host */
function stateOf(host) {
  if (!host.alive) return ["dead", "no heartbeat: gets nothing new"];
  if (host.draining) return ["draining", "finishing its jobs, takes no new ones"];
  return ["alive", ""];
}

/** @param {HostPublic} host */
function gpuCells(host) {
  if (!host.gpus.length) return h("span", { class: "muted" }, "none (CPU)");
  const free = new Set(host.free_gpus);
  return h("span", { class: "gpus" },
    h("span", { class: "gpu-count" }, `${host.gpus.length - free.size} of ${host.gpus.length} used`),
    h("span", { class: "gpu-list" }, ...host.gpus.map((g) => h("span", {
      class: `gpu ${free.has(g) ? "gpu-free" : "gpu-used"}`,
      title: `GPU ${g}: ${free.has(g) ? "free" : "in use"}`,
    }, g))));
}

/** @param {HostPublic} host */
function row(host) {
  const [state, why] = stateOf(host);
  const used = host.cpu_slots - host.free_slots;
  const jobs = host.jobs.length
    ? h("ul", { class: "host-jobs" }, ...host.jobs.map((j) => h("li", {},
      h("a", { href: `/jobs/${j.id}` }, `${j.name} #${j.id}`),
      h("span", { class: "muted" }, ` node ${j.node_rank}`))))
    : h("span", { class: "muted" }, "idle");
  return h("tr", { class: `host-${state}`, dataset: { host: host.name } },
    h("td", { class: "host-name", dataset: { label: "Host" } }, h("strong", {}, host.name),
      h("span", { class: "muted host-addr" }, ` ${host.address} · pool ${host.pool}`)),
    h("td", { dataset: { label: "State" } }, h("span", { class: `badge badge-host-${state}`, title: why }, state)),
    h("td", { dataset: { label: "GPUs" } }, gpuCells(host)),
    h("td", { class: "num", dataset: { label: "Slots" } }, `${used} / ${host.cpu_slots} used`),
    h("td", { dataset: { label: "Jobs" } }, jobs),
    h("td", { dataset: { label: "Last seen" } }, h("time", { datetime: host.last_seen, title: host.last_seen }, fmtAgo(host.last_seen))));
}

function render(hosts) {
  const sorted = hosts.slice().sort((a, b) => Number(b.alive) - Number(a.alive) || a.name.localeCompare(b.name));
  $("#hosts-body").replaceChildren(...sorted.map(row));
  $("#hosts-wrap").hidden = hosts.length === 0;
  const empty = $("#hosts-empty");
  empty.hidden = hosts.length > 0;
  setText(empty, hosts.length ? "" : "No hosts have registered yet: a worker registers its machine when it starts (rankzero worker).");
  const alive = hosts.filter((x) => x.alive);
  const gpus = alive.reduce((n, x) => n + x.gpus.length, 0);
  const freeGpus = alive.reduce((n, x) => n + x.free_gpus.length, 0);
  const slots = alive.reduce((n, x) => n + x.cpu_slots, 0);
  const freeSlots = alive.reduce((n, x) => n + x.free_slots, 0);
  setText($("#hosts-summary"), hosts.length
    ? `${alive.length} of ${hosts.length} ${hosts.length === 1 ? "host" : "hosts"} alive · GPUs ${gpus - freeGpus} used, ${freeGpus} free · CPU slots ${slots - freeSlots} used, ${freeSlots} free`
    : "");
  $("#hosts-table").dataset.loaded = "true";
}

async function refresh() {
  clearTimeout(timer);
  try {
    render(await api("/hosts"));
    setText($("#hosts-state"), "");
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      render([]);
      setText($("#hosts-empty"), "This server does not list its hosts (no GET /api/hosts).");
      return;
    }
    setText($("#hosts-state"), err instanceof ApiError ? `Could not load hosts: ${err.message}` : "Server unreachable; retrying…");
  }
  timer = setTimeout(refresh, document.hidden ? POLL_MS * 4 : POLL_MS);
}

document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
refresh();
