// @ts-check
// A job's webhook delivery log (GET /api/jobs/{id}/notifications, newest first): one row per
// notification and webhook, with its state, attempts and last answer. Shown only when the job has
// any (most jobs notify nobody); a server without the route leaves the section hidden.
import { api } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtClock } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["NotificationPublic"]} NotificationPublic */

/** @param {NotificationPublic} d */
function answer(d) {
  if (d.state === "delivered") return `HTTP ${d.last_status ?? "2xx"}`;
  const last = d.last_error || (d.last_status ? `HTTP ${d.last_status}` : "");
  if (d.state === "pending") return [last, d.next_at ? `next try ${fmtClock(d.next_at)}` : ""].filter(Boolean).join(" · ");
  return last || "gave up";
}

/** One delivery's row (the job page's log and the Webhooks page's, web/static/js/webhooks.js).
 * @param {NotificationPublic} d */
export function deliveryRow(d) {
  return h("tr", { dataset: { notification: d.id, state: d.state } },
    h("td", {}, h("time", { datetime: d.at, title: d.at }, fmtClock(d.at))),
    h("td", {}, h("code", {}, d.event)),
    h("td", { class: "notify-url" }, d.url),
    h("td", {}, h("span", { class: `badge badge-notify-${d.state}` }, d.state)),
    h("td", { class: "num" }, String(d.attempts)),
    h("td", { class: "notify-answer" }, answer(d)));
}

/** Reads the job's deliveries into #job-notifications; the section stays hidden when there are none.
 * @param {number | string} jobId */
export async function loadNotifications(jobId) {
  const section = $("#job-notifications");
  if (!section) return;
  /** @type {NotificationPublic[]} */
  let rows;
  try {
    rows = await api(`/jobs/${jobId}/notifications`);
  } catch {
    return; // an older server, or a blip: the log is a side note, never an error on the page
  }
  section.hidden = rows.length === 0;
  if (!rows.length) return;
  const failed = rows.filter((d) => d.state === "failed").length;
  const pending = rows.filter((d) => d.state === "pending").length;
  const counts = [failed && `${failed} failed`, pending && `${pending} pending`].filter(Boolean).join(", ");
  setText($("#notifications-summary"), `Notifications: ${rows.length} ${rows.length === 1 ? "delivery" : "deliveries"}${counts ? ` (${counts})` : ""}`);
  $("#notifications-body").replaceChildren(...rows.map(deliveryRow));
}
