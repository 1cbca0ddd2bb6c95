// @ts-check
// A job's outputs panel: every file the job wrote under its work dir (or its spec's `outputs` globs),
// with size and sha256, each downloadable, and each folder as one tar (GET /api/jobs/{id}/outputs,
// .../outputs/file?path=, .../outputs/archive?folder=). Refreshed while the page is visible.
import { api } from "./api.js";
import { $, h, setText } from "./dom.js";
import { fmtBytes } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["OutputList"]} OutputList */
/** @typedef {import("../../types/api").components["schemas"]["OutputFile"]} OutputFile */

const REFRESH_MS = 15000;
const card = $("#outputs-card");
const jobId = Number(card.dataset.jobId);

/** The folders holding outputs, shallowest first ("" is the work dir itself). @param {OutputFile[]} files */
export function foldersOf(files) {
  const folders = new Set();
  for (const f of files) {
    const parts = f.path.split("/").slice(0, -1);
    for (let i = 1; i <= parts.length; i += 1) folders.add(parts.slice(0, i).join("/"));
  }
  return [...folders].sort((a, b) => a.split("/").length - b.split("/").length || a.localeCompare(b));
}

/** @param {string} folder */
function archiveLink(folder) {
  const q = new URLSearchParams({ folder, format: "tar" });
  return h("a", { class: "btn btn-small", href: `/api/jobs/${jobId}/outputs/archive?${q}`, download: "" },
    folder ? `${folder}/ as .tar` : "All as .tar");
}

/** @param {OutputFile} f */
function row(f) {
  const q = new URLSearchParams({ path: f.path });
  return h("tr", { dataset: { output: f.path } },
    h("td", { class: "output-path" }, f.path),
    h("td", { class: "num" }, fmtBytes(f.bytes)),
    h("td", { class: "mono sha", title: f.sha256 || "" }, f.sha256 ? `${f.sha256.slice(0, 12)}…` : "—"),
    h("td", {}, f.downloadable === false
      ? h("span", { class: "muted", title: "its name holds a control character or bytes that are not UTF-8: rename it in the job" }, "not served")
      : h("a", { class: "btn btn-small", href: `/api/jobs/${jobId}/outputs/file?${q}`, download: "",
        "aria-label": `Download ${f.path}` }, "Download")));
}

/** @param {OutputList} listing */
function render(listing) {
  const files = listing.files;
  $("#outputs-empty").hidden = files.length > 0;
  $("#outputs-table").hidden = files.length === 0;
  $("#outputs-body").replaceChildren(...files.map(row));
  const total = files.reduce((n, f) => n + f.bytes, 0);
  const which = listing.patterns.length ? `matching ${listing.patterns.join(", ")}` : "under the work dir";
  setText($("#outputs-summary"), files.length
    ? `${files.length} file${files.length === 1 ? "" : "s"} ${which}, ${fmtBytes(total)}${listing.truncated ? " (list cut short)" : ""}`
    : "");
  const links = files.length ? ["", ...foldersOf(files)].map(archiveLink) : [];
  const old = card.querySelector(".outputs-archives");
  const bar = h("p", { class: "outputs-archives" }, ...links);
  if (old) old.replaceWith(bar); else card.append(bar);
}

async function load() {
  if (document.visibilityState === "hidden") return;
  try {
    render(/** @type {OutputList} */ (await api(`/jobs/${jobId}/outputs`)));
  } catch {
    setText($("#outputs-summary"), "Outputs could not be read; retrying.");
  }
}

load();
setInterval(load, REFRESH_MS);
