// @ts-check
// A job's ranks (GET /api/jobs/{id} `ranks`; api/models_ranks.py, issue 38): the ranks the last stall was
// blamed on with their Python stacks (py-spy, taken by the worker before it stopped them), the ranks
// slower than the median rank, and every rank's last step, its time per step and its straggler score.
import { $, h } from "./dom.js";
import { fmtClock, fmtNumber } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["RanksView"]} RanksView */

/** @param {string | null | undefined} at  an ISO time */
function clock(at) {
  return at ? fmtClock(at) : "";
}

/** @param {RanksView | null | undefined} view */
export function renderRanks(view) {
  const root = $("#job-ranks");
  if (!root || view === undefined) return;
  root.hidden = !view;
  if (!view) return;
  const stuck = view.stuck;
  const said = $("#job-ranks-stuck", root);
  if (said) {
    said.hidden = !stuck;
    said.textContent = stuck ? `Attempt ${stuck.attempt} stalled: ${stuck.sentence}.` : "";
  }
  const stacks = stuck ? Object.entries(stuck.stacks).filter(([rank]) => stuck.ranks.includes(Number(rank))) : [];
  const missing = stuck ? Object.entries(stuck.unavailable) : [];
  $("#job-ranks-stacks", root)?.replaceChildren(
    ...stacks.map(([rank, text]) => h("details", { open: true, dataset: { rank } },
      h("summary", {}, `rank ${rank}'s Python stacks when it was stopped (py-spy)`), h("pre", { class: "stack" }, text))),
    ...missing.map(([rank, why]) => h("p", { class: "muted", dataset: { rank } }, `rank ${rank}: no stacks (${why})`)),
  );
  $("#job-ranks-slow", root)?.replaceChildren(...view.stragglers.map((line) => h("li", {}, line)));
  const timed = view.timed_by === "work" ? "own work s/step" : "s/step";
  $("#job-ranks-time-h", root)?.replaceChildren(timed);
  $("#job-ranks-body", root)?.replaceChildren(...view.ranks.map((r) => {
    const t = view.timed_by === "work" ? r.work_s : r.step_s;
    return h("tr", { dataset: { rank: String(r.rank) } },
      h("td", {}, String(r.rank)), h("td", {}, r.step === null || r.step === undefined ? "" : String(r.step)),
      h("td", {}, clock(r.progress_at)), h("td", {}, t === null || t === undefined ? "" : fmtNumber(t, 3)),
      h("td", {}, r.score === null || r.score === undefined ? "" : `${fmtNumber(r.score, 2)}×`));
  }));
}

const RANKS_EVERY_MS = 10_000;

/**
 * What the job's progress events call: the ranks are read again at most every 10 s, so a straggler shows
 * while the job runs, not only at its next change of status.
 * @param {() => Promise<{ ranks?: RanksView | null }>} read  the job's detail
 */
export function ranksRefresher(read) {
  let last = Date.now();
  return () => {
    if (Date.now() - last < RANKS_EVERY_MS) return;
    last = Date.now();
    read().then((detail) => renderRanks(detail.ranks)).catch(() => {});
  };
}
