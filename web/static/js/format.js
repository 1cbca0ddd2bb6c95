// @ts-check
// Number, time and size formatting shared by the pages.
import { h } from "./dom.js";

export { TERMINAL } from "./meta.js"; // the server's set (GET /api/meta), not a copy

export function fmtNumber(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

export function fmtInt(value) {
  if (value === null || value === undefined) return "–";
  return Math.round(value).toLocaleString("en-US");
}

export function fmtRate(value) {
  if (value === null || value === undefined) return "–";
  return value >= 100 ? fmtInt(value) : fmtNumber(value, 3);
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i += 1; }
  return `${i === 0 ? value : value.toFixed(1)} ${units[i]}`;
}

export function parseTime(iso) {
  if (!iso) return null;
  // The API's timestamps are UTC; a naive one (SQLite drops the zone) is UTC too.
  const hasZone = /[zZ]|[+-]\d\d:?\d\d$/.test(iso);
  const t = Date.parse(hasZone ? iso : `${iso}Z`);
  return Number.isNaN(t) ? null : t;
}

export function fmtClock(iso) {
  const t = parseTime(iso);
  if (t === null) return "–";
  const d = new Date(t);
  const sameDay = d.toDateString() === new Date().toDateString();
  const time = d.toLocaleTimeString("en-GB", { hour12: false });
  return sameDay ? time : `${d.toLocaleDateString("en-CA")} ${time}`;
}

export function fmtAgo(iso) {
  const t = parseTime(iso);
  if (t === null) return "–";
  const s = (Date.now() - t) / 1000;
  return s < 5 ? "just now" : `${fmtDuration(s)} ago`;
}

/** Wall time of a job: start → finish, or → now while it runs. */
export function jobDuration(job) {
  const start = parseTime(job.started_at);
  if (start === null) return null;
  const end = parseTime(job.finished_at) ?? Date.now();
  return (end - start) / 1000;
}

export function progressFraction(job) {
  if (job.status === "succeeded") return 1;
  if (!job.total_steps) return 0;
  return Math.min(1, Math.max(0, (job.step || 0) / job.total_steps));
}

export function statusBadge(status) {
  return h("span", { class: `badge badge-${status}` }, status);
}
