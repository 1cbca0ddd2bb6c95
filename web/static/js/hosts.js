// @ts-check
// Hosts: every machine the scheduler places jobs on (GET /api/hosts), polled every 5 s: its GPUs
// (each used or free), CPU rank slots used of total, the jobs on it (with their node rank), and when
// its workers last beat. A dead host (stale heartbeat) is greyed; a draining one takes nothing new.
// An operator drains a host (POST /api/hosts/{name}/drain, with a note, from a dialog: its running jobs
// checkpoint and resume elsewhere) and undrains it; GPUs the worker took out of placement (gpu_faults)
// are marked, with their reason written out (a title alone is invisible on a phone).
import { api, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtAgo } from "./format.js";
import { may } from "./me.js";

/** @typedef {import("../../types/api").components["schemas"]["HostPublic"]} HostPublic */

const POLL_MS = 5000;
let timer = null;

/** @param {HostPublic} host */
function stateOf(host) {
  if (!host.alive) return ["dead", "no heartbeat: gets nothing new"];
  if (host.drain_requested) return ["drained", "drained by an operator: takes no new work until undrained"];
  if (host.draining) return ["draining", "finishing its jobs, takes no new ones"];
  return ["alive", ""];
}

/** @param {HostPublic} host */
function gpuCells(host) {
  if (!host.gpus.length) return h("span", { class: "muted" }, "none (CPU)");
  const free = new Set(host.free_gpus);
  const faults = host.gpu_faults || {};
  const faulty = host.gpus.filter((g) => g in faults);
  const used = host.gpus.length - free.size - faulty.length;
  const kind = (g) => (g in faults ? "fault" : free.has(g) ? "free" : "used");
  const words = { fault: "faulty, out of placement", free: "free", used: "in use" };
  return h("span", { class: "gpus" },
    h("span", { class: "gpu-count" }, `${used} of ${host.gpus.length} used${faulty.length ? `, ${faulty.length} faulty` : ""}`),
    h("span", { class: "gpu-list" }, ...host.gpus.map((g) => h("span", {
      class: `gpu gpu-${kind(g)}`,
      title: `GPU ${g}: ${g in faults ? `faulty: ${faults[g]}` : words[kind(g)]}`,
    }, g))),
    faulty.length ? h("ul", { class: "gpu-faults" }, ...faulty.map((g) => h("li", { dataset: { gpu: g } },
      h("strong", {}, `GPU ${g}`), ` ${faults[g]}`))) : null);
}

/** @param {HostPublic} host */
function stateCell(host, state, why) {
  return h("td", { dataset: { label: "State" } },
    h("span", { class: `badge badge-host-${state}`, title: why }, state),
    host.drain_requested
      ? h("p", { class: "drain-note muted" }, host.drain_note ? `Drained: ${host.drain_note}` : "Drained by an operator")
      : null);
}

/** @param {HostPublic} host */
function actionCell(host) {
  if (!may("host.drain")) return h("td", { class: "host-actions" });  // an admin's (core/permissions.py)
  const button = host.drain_requested
    ? h("button", { type: "button", class: "btn btn-small", dataset: { action: "undrain", host: host.name }, "aria-label": `Undrain ${host.name}` }, "Undrain")
    : h("button", { type: "button", class: "btn btn-small btn-danger", dataset: { action: "drain", host: host.name }, "aria-label": `Drain ${host.name}` }, "Drain…");
  return h("td", { class: "host-actions" }, button);
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
      h("span", { class: "muted host-addr" }, ` ${host.address} · pool ${host.pool}`),
      // Where its jobs' files go (docs/storage.md): the API's runs dir, or uploaded to the artifact store.
      h("p", { class: "muted host-storage", dataset: { storage: host.storage || "unknown" } }, host.storage_note || "")),
    stateCell(host, state, why),
    h("td", { dataset: { label: "GPUs" } }, gpuCells(host)),
    h("td", { class: "num", dataset: { label: "Slots" } }, `${used} / ${host.cpu_slots} used`),
    h("td", { dataset: { label: "Jobs" } }, jobs),
    h("td", { dataset: { label: "Last seen" } }, h("time", { datetime: host.last_seen, title: host.last_seen }, fmtAgo(host.last_seen))),
    actionCell(host));
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
  const faultyGpus = alive.reduce((n, x) => n + Object.keys(x.gpu_faults || {}).length, 0);
  const drained = hosts.filter((x) => x.drain_requested).length;
  const slots = alive.reduce((n, x) => n + x.cpu_slots, 0);
  const freeSlots = alive.reduce((n, x) => n + x.free_slots, 0);
  setText($("#hosts-summary"), hosts.length
    ? `${alive.length} of ${hosts.length} ${hosts.length === 1 ? "host" : "hosts"} alive${drained ? ` (${drained} drained)` : ""} · GPUs ${gpus - freeGpus - faultyGpus} used, ${freeGpus} free${faultyGpus ? `, ${faultyGpus} faulty` : ""} · CPU slots ${slots - freeSlots} used, ${freeSlots} free`
    : "");
  $("#hosts-table").dataset.loaded = "true";
}

// A Slurm pool (docs/slurm.md): rankzero places nothing there; its partitions and node states, as the pool's
// agent last saw them with `sinfo` (GET /api/slurm/nodes), in a section of their own after the hosts.
/** @typedef {import("../../types/api").components["schemas"]["SlurmNodePublic"]} SlurmNodePublic */

/** @param {SlurmNodePublic[]} nodes */
function renderSlurm(nodes) {
  let section = document.getElementById("slurm-nodes");
  if (!nodes.length) {
    if (section) section.remove();
    return;
  }
  if (!section) {
    section = h("section", { id: "slurm-nodes", class: "card" });
    $("#hosts-wrap").after(section);
  }
  const byPartition = new Map();
  for (const n of nodes) {
    const key = `${n.pool} · partition ${n.partition}`;
    byPartition.set(key, [...(byPartition.get(key) || []), n]);
  }
  section.replaceChildren(
    h("h2", {}, "Slurm"),
    h("p", { class: "muted" }, "Jobs of a Slurm pool are handed to Slurm, which places them; node states as sinfo showed them."),
    ...[...byPartition].map(([key, list]) => h("div", { class: "slurm-partition" },
      h("h3", {}, key),
      h("ul", { class: "slurm-node-list" }, ...list.map((n) => h("li", { dataset: { node: n.node, state: n.state } },
        h("strong", {}, n.node), " ",
        h("span", { class: `badge badge-slurm-${n.state.replace(/[^a-z]/g, "")}` }, n.state),
        h("span", { class: "muted" }, ` ${n.cpus} CPUs${n.gres && n.gres !== "(null)" ? ` · ${n.gres}` : ""}${n.reason ? ` · ${n.reason}` : ""}`)))))));
}

async function refreshSlurm() {
  try {
    renderSlurm(await api("/slurm/nodes"));
  } catch {
    renderSlurm([]); // an older server, or none: no section
  }
}

async function refresh() {
  clearTimeout(timer);
  try {
    render(await api("/hosts"));
    await refreshSlurm();
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

/** @param {string} name @param {boolean} drain @param {string} [note] */
async function setDrain(name, drain, note) {
  const path = `/hosts/${encodeURIComponent(name)}/${drain ? "drain" : "undrain"}`;
  try {
    await api(path, drain ? { method: "POST", body: { note: note || null } } : { method: "POST" });
    setText($("#hosts-state"), drain ? `${name} drained: its jobs checkpoint and resume elsewhere.` : `${name} undrained: it takes new work again.`);
  } catch (err) {
    setText($("#hosts-state"), `Could not ${drain ? "drain" : "undrain"} ${name}: ${err.message}`);
  }
  await refresh();
}

const dialog = /** @type {HTMLDialogElement} */ ($("#drain-dialog"));
const noteBox = /** @type {HTMLTextAreaElement} */ ($("#drain-note"));

$("#hosts-body").addEventListener("click", (e) => {
  const target = /** @type {HTMLElement} */ (e.target);
  const button = /** @type {HTMLButtonElement | null} */ (target.closest("button[data-action]"));
  if (!button) return;
  const name = button.dataset.host || "";
  if (button.dataset.action === "undrain") {
    button.disabled = true;
    setDrain(name, false);
    return;
  }
  dialog.dataset.host = name;
  setText($("#drain-host"), name);
  noteBox.value = "";
  dialog.showModal();
  noteBox.focus();
});

dialog.addEventListener("close", () => {
  if (dialog.returnValue === "drain" && dialog.dataset.host) setDrain(dialog.dataset.host, true, noteBox.value.trim());
  dialog.returnValue = "";
});

document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
refresh();
