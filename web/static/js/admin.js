// @ts-check
// Team (admins): the users (role, quotas: "default" where the member default applies), each user's
// tokens (revoke ends the dashboard sessions opened with it), adding a user (her first token is shown
// once), the worker hosts' own credentials (issue 34: add one, shown once; revoke one), and the audit log
// (GET /api/audit, newest first, "Older" pages back by id).
import { api, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtAgo } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["UserPublic"]} UserPublic */
/** @typedef {import("../../types/api").components["schemas"]["TokenPublic"]} TokenPublic */
/** @typedef {import("../../types/api").components["schemas"]["AuditPublic"]} AuditPublic */
/** @typedef {import("../../types/api").components["schemas"]["WorkerPublic"]} WorkerPublic */

const AUDIT_PAGE = 100;
/** @type {number | null} */
let oldestAudit = null;

/** @param {unknown} err */
function say(err) {
  setText($("#admin-state"), err instanceof ApiError ? err.message : String(err));
}

/** @param {number | null | undefined} value @param {string} role */
function limit(value, role) {
  if (role === "admin") return "none";
  return value === null || value === undefined ? "default" : String(value);
}

/** @param {TokenPublic} token */
function tokenItem(token) {
  const revoke = token.revoked_at
    ? h("span", { class: "muted" }, " revoked")
    : h("button", { type: "button", class: "btn btn-small btn-danger", dataset: { revoke: String(token.id) },
      "aria-label": `Revoke token ${token.name} of ${token.user}` }, "Revoke");
  const used = token.last_used_at ? `used ${fmtAgo(token.last_used_at)}` : "never used";
  return h("li", {}, h("strong", {}, token.name), h("span", { class: "muted" }, ` #${token.id}, ${used} `), revoke);
}

/** @param {UserPublic} user @param {TokenPublic[]} tokens */
function userRow(user, tokens) {
  return h("tr", { dataset: { user: user.name } },
    h("td", { dataset: { label: "User" } }, h("strong", {}, user.name)),
    h("td", { dataset: { label: "Role" } }, user.role),
    h("td", { class: "num", dataset: { label: "GPUs" } }, limit(user.max_gpus, user.role)),
    h("td", { class: "num", dataset: { label: "CPU slots" } }, limit(user.max_cpu_slots, user.role)),
    h("td", { class: "num", dataset: { label: "Queued" } }, limit(user.max_queued, user.role)),
    h("td", { class: "num", dataset: { label: "Priority ceiling" } }, limit(user.max_priority, user.role)),
    h("td", { dataset: { label: "Tokens" } }, tokens.length
      ? h("ul", { class: "token-list" }, ...tokens.map(tokenItem))
      : h("span", { class: "muted" }, "server token only")));
}

async function loadUsers() {
  /** @type {UserPublic[]} */
  const users = await api("/users");
  const tokens = await Promise.all(users.map((u) => api(`/users/${encodeURIComponent(u.name)}/tokens`)));
  $("#users-body").replaceChildren(...users.map((u, i) => userRow(u, tokens[i])));
}

/** @param {WorkerPublic} w */
function workerRow(w) {
  const action = w.revoked_at
    ? h("span", { class: "muted" }, `revoked ${fmtAgo(w.revoked_at)}`)
    : h("button", { type: "button", class: "btn btn-small btn-danger", dataset: { revokeHost: w.host },
      "aria-label": `Revoke the credential of host ${w.host}` }, "Revoke");
  return h("tr", { dataset: { workerHost: w.host } },
    h("td", { dataset: { label: "Host" } }, h("strong", {}, w.host)),
    h("td", { dataset: { label: "Created" } }, w.created_at ? fmtAgo(w.created_at) : ""),
    h("td", { dataset: { label: "Last used" } }, w.last_used_at ? fmtAgo(w.last_used_at) : "never"),
    h("td", {}, action));
}

async function loadWorkers() {
  /** @type {WorkerPublic[]} */
  const workers = await api("/workers");
  $("#workers-body").replaceChildren(...workers.map(workerRow));
}

async function addWorker(event) {
  event.preventDefault();
  const form = /** @type {HTMLFormElement} */ (event.currentTarget);
  try {
    const made = await api("/workers", { method: "POST", body: { host: new FormData(form).get("host") } });
    setText($("#new-worker-token-host"), made.host);
    setText($("#new-worker-token-value"), made.token);
    $("#new-worker-token").hidden = false;
    form.reset();
    await Promise.all([loadWorkers(), loadAudit(false)]);
  } catch (err) {
    say(err);
  }
}

async function onWorkerClick(event) {
  const host = /** @type {HTMLElement} */ (event.target).dataset.revokeHost;
  if (!host || !confirm(`Revoke host ${host}'s credential? Its worker is refused from now on.`)) return;
  try {
    await api(`/workers/${encodeURIComponent(host)}/revoke`, { method: "POST" });
    await Promise.all([loadWorkers(), loadAudit(false)]);
  } catch (err) {
    say(err);
  }
}

/** @param {AuditPublic} e */
function auditRow(e) {
  return h("tr", {},
    h("td", { dataset: { label: "When" } }, h("time", { datetime: e.at, title: e.at }, fmtAgo(e.at))),
    h("td", { dataset: { label: "Who" } }, e.actor),
    h("td", { dataset: { label: "What" } }, e.action),
    h("td", { dataset: { label: "On" } }, e.target),
    h("td", { dataset: { label: "Detail" } }, e.detail || ""));
}

/** @param {boolean} more */
async function loadAudit(more) {
  /** @type {AuditPublic[]} */
  const rows = await api("/audit", { query: { limit: AUDIT_PAGE, before_id: more ? oldestAudit : null } });
  const body = $("#audit-body");
  if (more) body.append(...rows.map(auditRow));
  else body.replaceChildren(...rows.map(auditRow));
  if (rows.length) oldestAudit = rows[rows.length - 1].id;
  $("#audit-more").hidden = rows.length < AUDIT_PAGE;
}

async function addUser(event) {
  event.preventDefault();
  const form = /** @type {HTMLFormElement} */ (event.currentTarget);
  const data = new FormData(form);
  try {
    const made = await api("/users", { method: "POST", body: { name: data.get("name"), role: data.get("role") } });
    setText($("#new-token-user"), made.user.name);
    setText($("#new-token-value"), made.token.token);
    $("#new-token").hidden = false;
    form.reset();
    await Promise.all([loadUsers(), loadAudit(false)]);
  } catch (err) {
    say(err);
  }
}

async function onClick(event) {
  const target = /** @type {HTMLElement} */ (event.target);
  const id = target.dataset.revoke;
  if (!id || !confirm("Revoke this token? Its dashboard sessions end too.")) return;
  try {
    await api(`/tokens/${id}/revoke`, { method: "POST" });
    await Promise.all([loadUsers(), loadAudit(false)]);
  } catch (err) {
    say(err);
  }
}

$("#add-user").addEventListener("submit", addUser);
$("#users-body").addEventListener("click", onClick);
$("#add-worker").addEventListener("submit", addWorker);
$("#workers-body").addEventListener("click", onWorkerClick);
$("#audit-more").addEventListener("click", () => loadAudit(true).catch(say));
Promise.all([loadUsers(), loadWorkers(), loadAudit(false)]).catch(say);
