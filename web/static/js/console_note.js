// @ts-check
// What the console reader made of a script job's output (issue 36): the series it recognised and a line they
// came from, or that it recognised none, with a pattern suggested from the most frequent numeric line that a
// click adds to the job (POST /api/jobs/{id}/console-patterns: a finished job's stored console is read again
// with it, so its curve appears without rerunning). A cap that stopped the reader is said too.
import { api } from "./api.js";
import { h } from "./dom.js";

/**
 * @param {HTMLElement} el
 * @param {any} summary the metrics response's `console` (null: not a script job, or nothing read yet)
 * @param {number} jobId
 * @param {() => void} onApplied
 */
export function renderConsoleNote(el, summary, jobId, onApplied) {
  el.replaceChildren();
  if (!summary || !summary.lines) {
    el.hidden = true;
    return;
  }
  const lines = Number(summary.lines).toLocaleString("en-US");
  const series = summary.series || [];
  if (series.length) {
    const names = series.length > 6 ? `${series.slice(0, 6).join(", ")} and ${series.length - 6} more` : series.join(", ");
    const like = summary.example ? [" from lines like ", h("code", {}, summary.example)] : [];
    el.append(h("p", {}, `From the console: ${names}`, ...like, ` (${lines} lines read).`));
  } else {
    el.append(h("p", {}, `No metrics recognised in ${lines} lines of the console.`));
    const s = summary.suggestion;
    if (s) {
      const status = h("span", { class: "muted", role: "status" });
      const button = h("button", {
        class: "btn btn-small", type: "button",
        onclick: async () => {
          button.disabled = true;
          try {
            const r = await api(`/jobs/${jobId}/console-patterns`, { method: "POST", body: { regex: s.regex, name: s.name } });
            status.textContent = r.applied === "stored console" ? `Added: ${r.points} points read.` : "Added: the running job reads it next.";
            onApplied();
          } catch (e) {
            status.textContent = `Not added: ${e.message}`;
            button.disabled = false;
          }
        },
      }, "Read it as a metric");
      el.append(h("p", {}, "Its most frequent numeric line is ", h("code", {}, s.line), "; the pattern ",
        h("code", { class: "console-pattern" }, s.regex),
        s.regex.includes("(?P<step>") ? ` reads its first whole number as the step and its last number as “${s.name}”. ` : ` reads its last number as “${s.name}”. `,
        button, " ", status));
    }
  }
  if (summary.dropped_names) el.append(h("p", { class: "muted" }, `${summary.dropped_names} points of series past the first 64 were not kept.`));
  for (const stream of summary.capped_streams || []) {
    el.append(h("p", { class: "alert warn" }, `The console reader stopped after the first ${Math.round(summary.cap_bytes / 2 ** 20)} MiB of ${stream}: later lines were not read.`));
  }
  el.hidden = false;
}
