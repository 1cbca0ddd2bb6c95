// @ts-check
// Where a job's wall time went (GET /api/jobs/{id} `time_breakdown`; core/time_breakdown.py): one bar,
// a segment per part in proportion, and a legend with each part's duration and share; and a queued
// job's place in its pool's queue with its estimated start (`start_estimate`; core/start_estimate.py).
import { $, h } from "./dom.js";
import { fmtDuration } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["TimeBreakdown"]} TimeBreakdown */
/** @typedef {import("../../types/api").components["schemas"]["StartEstimate"]} StartEstimate */

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

/** @param {StartEstimate | null | undefined} est  (absent in a streamed update: the last one stays) */
export function renderStartEstimate(est) {
  const el = $("#job-waiting-estimate");
  if (!el || est === undefined) return;
  el.hidden = !est;
  if (!est) return;
  const when = est.start_in_s === null || est.start_in_s === undefined
    ? "start not known yet"
    : `estimated start in ${fmtDuration(est.start_in_s)}`;
  el.textContent = `#${est.position} in its pool's queue, ${when} (${est.why}).`;
}
