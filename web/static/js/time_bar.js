// @ts-check
// Where a job's wall time went (GET /api/jobs/{id} `time_breakdown`; core/time_breakdown.py): one bar,
// a segment per part in proportion, and a legend with each part's duration and share.
import { $, h } from "./dom.js";
import { fmtDuration } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["TimeBreakdown"]} TimeBreakdown */

/** @type {[keyof TimeBreakdown, string][]} */
export const TIME_PARTS = [
  ["queued", "queued"],
  ["starting", "starting"],
  ["training", "training"],
  ["checkpointing", "checkpointing"],
  ["lost_to_restarts", "lost to restarts"],
  ["stopped", "stopped"],
];

/** @param {TimeBreakdown | null | undefined} b */
export function renderTimeBar(b) {
  const root = $("#job-time");
  if (!root) return;
  root.hidden = !b || !(b.wall_s > 0);
  if (!b || !(b.wall_s > 0)) return;
  const shown = TIME_PARTS.filter(([key]) => b[key] > 0);
  const share = (/** @type {number} */ s) => `${Math.round((100 * s) / b.wall_s)}%`;
  const segments = shown.map(([key, label]) => {
    const seg = h("span", { class: `time-seg time-${key}`, title: `${label}: ${fmtDuration(b[key])} (${share(b[key])})` });
    seg.style.width = `${(100 * b[key]) / b.wall_s}%`;  // CSSOM, not a style attribute: the page's CSP allows it
    return seg;
  });
  $("#job-time-bar", root)?.replaceChildren(...segments);
  $("#job-time-legend", root)?.replaceChildren(...shown.map(([key, label]) =>
    h("li", { dataset: { part: key } }, h("span", { class: `time-key time-${key}` }), `${label} ${fmtDuration(b[key])} · ${share(b[key])}`)));
}
