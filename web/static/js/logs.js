// Per-rank log viewer: reads a rank's stdout/stderr by byte offset and, while following, polls
// for what was appended since (GET /api/jobs/{id}/logs?rank&stream&offset).
import { api, ApiError } from "./api.js";
import { $, h, setText } from "./dom.js";

const POLL_MS = 1500;
const MAX_CHARS = 400_000; // keep the <pre> light; older text is dropped from the top
const FIRST_TAIL = 65_536; // the first read shows the end of a long log, not its start

export class LogView {
  constructor(jobId) {
    this.jobId = jobId;
    this.pre = $("#log-text");
    this.rankSelect = $("#log-rank");
    this.streamSelect = $("#log-stream");
    this.followBox = $("#log-follow");
    this.offset = null;
    this.timer = null;
    this.finished = false;
    this.busy = false;
    this.again = false;
    this.generation = 0;
    this.rankSelect.addEventListener("change", () => this.restart());
    this.streamSelect.addEventListener("change", () => this.restart());
    this.followBox.addEventListener("change", () => { if (this.followBox.checked) this.poll(); });
  }

  restart() {
    this.generation += 1; // a read still in flight for the old rank/stream is dropped
    this.offset = null;
    this.pre.textContent = "";
    this.poll();
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

  appendText(text) {
    const atBottom = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 8;
    let current = this.pre.dataset.empty === "true" ? "" : this.pre.textContent;
    this.pre.dataset.empty = "false";
    current += text;
    if (current.length > MAX_CHARS) current = `…\n${current.slice(current.length - MAX_CHARS)}`;
    this.pre.textContent = current;
    if (this.followBox.checked || atBottom) this.pre.scrollTop = this.pre.scrollHeight;
  }

  emptyText() {
    this.pre.dataset.empty = "true";
    const where = `rank ${this.rankSelect.value} ${this.streamSelect.value}`;
    return this.finished ? `(${where} is empty: this rank wrote nothing there)` : `(nothing on ${where} yet)`;
  }

  updateRanks(ranks) {
    const have = Array.from(this.rankSelect.options).map((o) => Number(o.value));
    if (!ranks.length || ranks.join() === have.join()) return;
    const current = this.rankSelect.value;
    this.rankSelect.replaceChildren(...ranks.map((r) => h("option", { value: r }, String(r))));
    this.rankSelect.value = ranks.map(String).includes(current) ? current : String(ranks[0]);
  }
}
