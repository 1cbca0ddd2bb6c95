// @ts-check
// The progress bar used by the list and the job page (a div with role=progressbar).
import { h } from "./dom.js";

export function progressBar(label) {
  return h("div", { class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": 0, "aria-label": label }, h("span"));
}

export function setProgress(bar, fraction, status) {
  const pct = Math.round(fraction * 1000) / 10;
  if (bar.getAttribute("aria-valuenow") !== String(pct)) {
    bar.setAttribute("aria-valuenow", String(pct));
    bar.firstElementChild.style.width = `${pct}%`;
  }
  bar.dataset.status = status || "";
}

/** A script job that never reported a count (no rankzero.progress/log, TensorBoard or console step)
 * shows it as "not reported", never 0; the REST API gives null there (api/models.py `_reported`). */
export function notReported(job, key) {
  const value = job[key];
  return Boolean(job.spec?.entrypoint) && (value === null || value === undefined || value === 0);
}

/** `fmt(value)`, or "not reported" (see notReported). */
export function reportedCount(job, key, fmt) {
  return notReported(job, key) ? "not reported" : fmt(job[key]);
}

/** "1,234 steps" / "1,234 of 5,000 steps" / "steps not reported", for the outcome's lead. */
export function stepsPhrase(job, fmt) {
  if (notReported(job, "step")) return "(steps not reported)";
  return job.total_steps && job.status !== "succeeded" ? `${fmt(job.step)} of ${fmt(job.total_steps)} steps` : `${fmt(job.step)} steps`;
}
