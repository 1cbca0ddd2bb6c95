// @ts-check
// Job page, code panel: what `rankzero submit --code` left out of the upload, largest first, with the ignore
// file and line that excluded each (issue 27; GET /api/code/{sha256}/left-out: the record alone, never the
// bundle's file list, which the panel fetches only when asked). Shown as soon as the panel shows a bundle: a
// job that cannot find its data should see why without opening anything.
import { api } from "./api.js";
import { $, h } from "./dom.js";
import { fmtBytes, fmtInt } from "./format.js";

/** @typedef {import("../../types/api").components["schemas"]["LeftOutFile"]} LeftOutFile */

let shown = "";

/** @param {string} sha */
async function load(sha) {
  shown = sha;
  const box = $("#code-left-out");
  try {
    /** @type {LeftOutFile[]} */
    const items = await api(`/code/${sha}/left-out`);
    if (shown !== sha) return;
    box.hidden = items.length === 0;
    const files = items.reduce((n, e) => n + e.files, 0);
    const bytes = items.reduce((n, e) => n + e.bytes, 0);
    // What to type is code, not text with backticks in it.
    $("#code-left-out-status").replaceChildren(
      `${fmtInt(files)} ${files === 1 ? "file" : "files"}, ${fmtBytes(bytes)}. A line `, h("code", {}, "!PATTERN"),
      " in ", h("code", {}, ".rankzeroignore"), ", or ", h("code", {}, "rankzero submit --include GLOB"),
      ", uploads a file anyway.");
    $("#code-left-out-body").replaceChildren(...items.map((e) => h("tr", {},
      h("td", {}, h("code", {}, e.path)),
      h("td", { class: "num" }, fmtBytes(e.bytes)),
      h("td", {}, `${e.ignore_file} line ${e.line} `, h("code", {}, e.pattern)))));
  } catch {
    if (shown === sha) { shown = ""; box.hidden = true; }  // a bundle no longer stored: nothing to say
  }
}

// The panel's bundle is set by job_page.js (#code-sha's data-sha256); follow it.
const sha = $("#code-sha");
if (sha) {
  const follow = () => { const s = sha.dataset.sha256 || ""; if (s && s !== shown) load(s); };
  new MutationObserver(follow).observe(sha, { attributes: true, attributeFilter: ["data-sha256"] });
  follow();
}
