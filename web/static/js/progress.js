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
