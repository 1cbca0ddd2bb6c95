// @ts-check
// The job's console. By default every rank's stdout and stderr merged in time order, each line prefixed
// with its rank (GET /api/jobs/{id}/console, then on from its cursor while following); choosing a rank
// and a stream reads that log alone by byte offset (GET /api/jobs/{id}/logs?rank&stream&offset). Search highlights every
// match in the text in hand (the CSS Custom Highlight API: the log stays one text node) and steps
// through them; "Download" fetches the rank's whole log (GET /api/jobs/{id}/logs/download).
import { api, ApiError } from "./api.js";
import { $, h, setText, debounce } from "./dom.js";

const POLL_MS = 1500;
const MAX_CHARS = 400_000; // keep the <pre> light; older text is dropped from the top
const FIRST_TAIL = 65_536; // the first read shows the end of a long log, not its start
const MAX_MATCHES = 5000;
const ALL = "all"; // the rank select's merged view
const BOTH = "both"; // the stream select's merged view

/** `[r0] text`, `[r1 err] text`, `[env] text` (uv preparing the job's packages): a merged console line with
 * its source (the CLI prints the same). */
export function consoleLine(line) {
  if (line.stream === "environment") return `[env] ${line.text}`;
  return `[r${line.rank}${line.stream === "stderr" ? " err" : ""}] ${line.text}`;
}

export class LogView {
  constructor(jobId) {
    this.jobId = jobId;
    this.pre = $("#log-text");
    this.rankSelect = $("#log-rank");
    this.streamSelect = $("#log-stream");
    this.followBox = $("#log-follow");
    this.search = $("#log-search");
    this.offset = null;
    this.cursor = null; // the merged view's (GET /console)
    this.timer = null;
    this.finished = false;
    this.busy = false;
    this.again = false;
    this.generation = 0;
    this.matches = [];
    this.current = -1;
    this.rankSelect.addEventListener("change", () => this.restart());
    this.streamSelect.addEventListener("change", () => this.restart());
    this.followBox.addEventListener("change", () => { if (this.followBox.checked) this.poll(); });
    const research = debounce(() => this.find(0), 150);
    this.search.addEventListener("input", research);
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); this.step(e.shiftKey ? -1 : 1); }
    });
    $("#log-next").addEventListener("click", () => this.step(1));
    $("#log-prev").addEventListener("click", () => this.step(-1));
    this.updateDownload();
  }

  /** True when the view is every rank merged (the default), false for one rank's stream. */
  merged() {
    return this.rankSelect.value === ALL || this.streamSelect.value === BOTH;
  }

  restart() {
    this.generation += 1; // a read still in flight for the old rank/stream is dropped
    // One rank asked for: its stderr unless a stream was chosen; a stream asked for: rank 0 unless chosen.
    if (this.rankSelect.value === ALL && this.streamSelect.value !== BOTH) this.rankSelect.value = "0";
    else if (this.rankSelect.value !== ALL && this.streamSelect.value === BOTH) this.streamSelect.value = "stderr";
    this.offset = null;
    this.cursor = null;
    this.pre.textContent = "";
    this.updateDownload();
    this.poll();
  }

  /** Opens one rank's stream at its end (a failed job's failing rank). */
  showRank(rank, stream = "stderr") {
    const value = String(rank);
    if (!Array.from(this.rankSelect.options).some((o) => o.value === value)) {
      this.rankSelect.append(h("option", { value }, value));
    }
    this.rankSelect.value = value;
    this.streamSelect.value = stream;
    this.restart();
  }

  updateDownload() {
    const link = $("#log-download");
    link.hidden = this.merged(); // one rank's stream downloads whole; the merged view has no single file
    if (this.merged()) return;
    const q = new URLSearchParams({ rank: this.rankSelect.value, stream: this.streamSelect.value });
    link.href = `/api/jobs/${this.jobId}/logs/download?${q}`;
    link.setAttribute("aria-label", `Download rank ${this.rankSelect.value}'s ${this.streamSelect.value}`);
  }

  /** The job ended: one last read picks up the final lines, then polling stops. */
  jobFinished() {
    this.finished = true;
    this.followBox.checked = false;
    this.poll();
  }

  async poll() {
    clearTimeout(this.timer);
    if (this.busy) { this.again = true; return; }
    this.busy = true;
    const generation = this.generation;
    try {
      if (this.merged()) { await this.pollMerged(generation); return; }
      const query = { rank: this.rankSelect.value, stream: this.streamSelect.value };
      if (this.offset === null) query.tail = FIRST_TAIL; else query.offset = this.offset;
      const body = await api(`/jobs/${this.jobId}/logs`, { query });
      if (generation !== this.generation) return;
      this.updateRanks(body.ranks || []);
      if (body.text) this.appendText(body.text);
      this.offset = body.next_offset ?? this.offset;
      if (!this.pre.textContent) setText(this.pre, this.emptyText());
      this.pre.dataset.loaded = "true";
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        if (!this.pre.textContent) setText(this.pre, this.emptyText());
      } else if (!this.pre.textContent) {
        setText(this.pre, `Could not read the logs: ${err.message}`);
      }
    } finally {
      this.busy = false;
      if (this.again) { this.again = false; this.poll(); } else if (this.followBox.checked && !this.finished) {
        this.timer = setTimeout(() => this.poll(), POLL_MS);
      }
    }
  }

  async pollMerged(generation) {
    const query = this.cursor === null ? { limit: 4 * FIRST_TAIL } : { cursor: this.cursor };
    const body = await api(`/jobs/${this.jobId}/console`, { query });
    if (generation !== this.generation) return;
    this.updateRanks(body.ranks || []);
    if (body.lines.length) this.appendText(body.lines.map((ln) => `${consoleLine(ln)}\n`).join(""));
    this.cursor = body.cursor;
    if (!this.pre.textContent) setText(this.pre, this.emptyText());
    this.pre.dataset.loaded = "true";
  }

  appendText(text) {
    const first = this.pre.dataset.empty !== "false";
    const atBottom = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 8;
    let current = this.pre.dataset.empty === "true" ? "" : this.pre.textContent;
    this.pre.dataset.empty = "false";
    current += text;
    if (current.length > MAX_CHARS) current = `…\n${current.slice(current.length - MAX_CHARS)}`;
    this.pre.textContent = current;
    // A log opens at its end (where a failure is); later reads keep the reader's place unless following.
    if (first || this.followBox.checked || atBottom) this.pre.scrollTop = this.pre.scrollHeight;
    if (this.search.value) this.find(null);
  }

  emptyText() {
    this.pre.dataset.empty = "true";
    if (this.merged()) return this.finished ? "(no rank wrote anything)" : "(nothing from any rank yet)";
    const where = `rank ${this.rankSelect.value} ${this.streamSelect.value}`;
    return this.finished ? `(${where} is empty: this rank wrote nothing there)` : `(nothing on ${where} yet)`;
  }

  updateRanks(ranks) {
    const have = Array.from(this.rankSelect.options).map((o) => o.value).filter((v) => v !== ALL);
    if (!ranks.length || ranks.join() === have.join()) return;
    const current = this.rankSelect.value;
    this.rankSelect.replaceChildren(h("option", { value: ALL }, "all, merged"), ...ranks.map((r) => h("option", { value: r }, String(r))));
    this.rankSelect.value = current === ALL || ranks.map(String).includes(current) ? current : String(ranks[0]);
    this.updateDownload();
  }

  /** Every match of the search text (case-insensitive) highlighted; `jump`: the match to show (null: keep). */
  find(jump) {
    const needle = this.search.value.toLowerCase();
    const node = this.pre.firstChild;
    this.matches = [];
    if (needle && node && this.pre.dataset.empty === "false") {
      const hay = node.textContent.toLowerCase();
      for (let i = hay.indexOf(needle); i >= 0 && this.matches.length < MAX_MATCHES; i = hay.indexOf(needle, i + needle.length)) {
        this.matches.push(i);
      }
    }
    if (jump !== null) this.current = this.matches.length ? 0 : -1;
    else if (this.current >= this.matches.length) this.current = this.matches.length - 1;
    this.paint(jump !== null);
  }

  step(delta) {
    if (!this.matches.length) { this.find(0); return; }
    this.current = (this.current + delta + this.matches.length) % this.matches.length;
    this.paint(true);
  }

  paint(scroll) {
    const needle = this.search.value;
    const node = this.pre.firstChild;
    const count = this.matches.length;
    setText($("#log-matches"), !needle ? "" : count ? `${this.current + 1} of ${count}${count >= MAX_MATCHES ? "+" : ""}` : "no match");
    this.pre.dataset.matches = String(count);
    if (!globalThis.CSS?.highlights || typeof Highlight === "undefined") return;
    CSS.highlights.delete("log-match");
    CSS.highlights.delete("log-current");
    if (!count || !node) return;
    const range = (at) => { const r = new Range(); r.setStart(node, at); r.setEnd(node, at + needle.length); return r; };
    CSS.highlights.set("log-match", new Highlight(...this.matches.map(range)));
    const cur = range(this.matches[this.current]);
    CSS.highlights.set("log-current", new Highlight(cur));
    if (scroll) {
      const box = cur.getBoundingClientRect();
      const pre = this.pre.getBoundingClientRect();
      this.pre.scrollTop += box.top - pre.top - this.pre.clientHeight / 3;
    }
  }
}
