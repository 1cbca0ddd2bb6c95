// @ts-check
// Fetch wrapper for the REST API: the session cookie rides along; unsafe methods echo the CSRF
// cookie in X-CSRF-Token (double submit, see api/auth.py); a lost session goes back to /login.

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body && typeof body === "object" ? body.detail : body;
    super(typeof detail === "string" ? detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export function csrfToken() {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === "rankzero_csrf") return decodeURIComponent(rest.join("="));
  }
  return "";
}

export function toLogin() {
  const here = location.pathname + location.search;
  location.assign(`/login?next=${encodeURIComponent(here)}`);
}

/**
 * @typedef {object} RequestOptions
 * @property {string} [method]
 * @property {unknown} [body] sent as JSON, or as text when `raw`
 * @property {boolean} [raw]
 * @property {AbortSignal} [signal]
 */

/**
 * @param {string} url
 * @param {RequestOptions} [options]
 * @returns {Promise<any>} the parsed JSON body (text when it is not JSON; null when empty)
 */
export async function request(url, { method = "GET", body, raw = false, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrfToken();
  /** @type {BodyInit | undefined} */
  let payload;
  if (body !== undefined) {
    if (raw) {
      headers["Content-Type"] = "text/plain; charset=utf-8";
      payload = /** @type {string} */ (body);
    } else {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
  }
  const res = await fetch(url, { method, headers, body: payload, credentials: "same-origin", signal });
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (res.status === 401) {
    toLogin();
    throw new ApiError(res.status, data);
  }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/**
 * GET/POST under /api with a query built from an object (arrays repeat the key; null/"" are left out).
 * @param {string} path
 * @param {RequestOptions & {query?: Record<string, unknown>}} [options]
 */
export function api(path, { query, ...options } = {}) {
  return request(`/api${path}${queryString(query)}`, options);
}

export function queryString(query) {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v !== null && v !== undefined && v !== "") params.append(key, String(v));
    }
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}
