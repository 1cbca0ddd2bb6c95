// @ts-check
// Webhooks (issue 37 part 5): the signed-in user's own webhooks (an admin's list holds everyone's), adding
// one (its secret is shown once, as the Team page shows a new token), sending one a test event (the
// receiver's answer shows in its row), removing one (after a confirm), and a hook's delivery log (status
// codes for everyone; the error text only where the API returns it: to the hook's owner and the admins).
// Buttons follow core/permissions.py's table (me.js): a viewer adds none, a member tests and removes hers.
import { api, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtAgo } from "./format.js";
import { ME, may } from "./me.js";
import { deliveryRow } from "./notifications.js";

/** @typedef {import("../../types/api").components["schemas"]["WebhookPublic"]} WebhookPublic */
/** @typedef {import("../../types/api").components["schemas"]["WebhookCreated"]} WebhookCreated */
/** @typedef {import("../../types/api").components["schemas"]["WebhookTest"]} WebhookTest */
/** @typedef {import("../../types/api").components["schemas"]["NotificationPublic"]} NotificationPublic */

/** The answer of each hook's last test on this page, by hook id (the API keeps none). */
/** @type {Map<number, string>} */
const tested = new Map();
/** @type {number | null} */
let shown = null;  // the hook whose deliveries are open

/** @param {unknown} err */
function say(err) {
  setText($("#webhooks-state"), err instanceof ApiError ? err.message : String(err));
}

/** WebhookPublic names its owner, not her id: an own hook is one whose owner is the signed-in user. */
/** @param {string} action @param {WebhookPublic} hook */
function mayOn(action, hook) {
  return may(action, ME && hook.owner === ME.name ? ME.id : null);
}

/** @param {WebhookTest} t */
function testAnswer(t) {
  return t.status === null || t.status === undefined ? `no answer: ${t.error || "unknown error"}`
    : `HTTP ${t.status}${t.error ? `: ${t.error}` : ""}`;
}

/** @param {WebhookPublic} hook */
function hookRow(hook) {
  const own = ME !== null && hook.owner === ME.name;
  const label = own ? `webhook ${hook.id}` : `webhook ${hook.id} of ${hook.owner}`;
  return h("tr", { dataset: { webhook: String(hook.id) } },
    h("td", { class: "notify-url", dataset: { label: "URL" } }, h("code", {}, hook.url)),
    h("td", { dataset: { label: "Events" } }, own ? "your jobs and sweeps" : `${hook.owner}'s jobs and sweeps`),
    h("td", { dataset: { label: "Added" } }, h("time", { datetime: hook.created_at, title: hook.created_at },
      fmtAgo(hook.created_at))),
    h("td", { class: "webhook-test notify-answer", dataset: { label: "Last test" } }, tested.get(hook.id) || ""),
    h("td", { class: "webhook-actions" },
      h("button", { type: "button", class: "btn btn-small", dataset: { deliveries: String(hook.id) },
        "aria-label": `Deliveries of ${label}` }, "Deliveries"),
      mayOn("webhook.test", hook) && h("button", { type: "button", class: "btn btn-small",
        dataset: { test: String(hook.id) }, "aria-label": `Send ${label} a test event` }, "Send test"),
      mayOn("webhook.remove", hook) && h("button", { type: "button", class: "btn btn-small btn-danger",
        dataset: { remove: String(hook.id) }, "aria-label": `Remove ${label}` }, "Remove")));
}

async function loadHooks() {
  /** @type {WebhookPublic[]} */
  const hooks = await api("/webhooks");
  $("#webhooks-body").replaceChildren(...hooks.map(hookRow));
  $("#webhooks-empty").hidden = hooks.length > 0;
  if (shown !== null && !hooks.some((hook) => hook.id === shown)) showDeliveries(null);
}

/** @param {number | null} id */
async function showDeliveries(id) {
  shown = id;
  $("#deliveries").hidden = id === null;
  if (id === null) return;
  setText($("#deliveries-title"), `Deliveries of webhook ${id}`);
  /** @type {NotificationPublic[]} */
  const rows = await api(`/webhooks/${id}/deliveries`);
  if (shown !== id) return;  // another hook was picked meanwhile
  $("#deliveries-body").replaceChildren(...rows.map(deliveryRow));
  $("#deliveries-empty").hidden = rows.length > 0;
}

async function addHook(event) {
  event.preventDefault();
  const form = /** @type {HTMLFormElement} */ (event.currentTarget);
  try {
    /** @type {WebhookCreated} */
    const made = await api("/webhooks", { method: "POST", body: { url: new FormData(form).get("url") } });
    setText($("#new-webhook-id"), `${made.id} (${made.url})`);
    setText($("#new-webhook-secret-value"), made.secret);
    $("#new-webhook-secret").hidden = false;
    setText($("#webhooks-state"), "");
    form.reset();
    await loadHooks();
  } catch (err) {
    say(err);
  }
}

async function onClick(event) {
  const button = /** @type {HTMLElement} */ (event.target).closest("button");
  if (!button) return;
  const { test, remove, deliveries } = button.dataset;
  try {
    if (deliveries) {
      await showDeliveries(Number(deliveries));
    } else if (test) {
      button.setAttribute("disabled", "");
      setText($("#webhooks-state"), `Sending webhook ${test} a test event…`);
      /** @type {WebhookTest} */
      const answer = await api(`/webhooks/${test}/test`, { method: "POST" });
      tested.set(Number(test), testAnswer(answer));
      setText($("#webhooks-state"), `Webhook ${test}'s receiver answered: ${testAnswer(answer)}`);
      await loadHooks();
    } else if (remove) {
      if (!confirm(`Remove webhook ${remove}? Its events stop at once and its delivery log goes with it.`)) return;
      await api(`/webhooks/${remove}`, { method: "DELETE" });
      tested.delete(Number(remove));
      setText($("#webhooks-state"), `Webhook ${remove} removed.`);
      await loadHooks();
    }
  } catch (err) {
    say(err);
  } finally {
    button.removeAttribute("disabled");
  }
}

$("#add-webhook").hidden = !may("webhook.add");
$("#add-webhook").addEventListener("submit", addHook);
$("#webhooks-body").addEventListener("click", onClick);
loadHooks().catch(say);
