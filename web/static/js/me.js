// @ts-check
// Who is signed in (base.html puts the session's user on <body>), and what she may do: the one table of
// core/permissions.py, rendered for her role into `data-may` (per action: to her own targets, to others'),
// so a page offers only the buttons that work instead of buttons that answer 403.

const data = document.body.dataset;

/** The signed-in user, or null on a page without a session (the sign-in page). */
export const ME = data.userId ? { id: Number(data.userId), name: data.user || "", role: data.role || "viewer" } : null;

/** @type {Record<string, {own: boolean, others: boolean}>} */
const TABLE = (() => {
  try {
    return JSON.parse(data.may || "{}");
  } catch {
    return {};
  }
})();

/**
 * Whether the signed-in user may do `action` (core/permissions.py) to a target owned by `ownerId`
 * (undefined: an action without an owner, such as draining a host).
 * @param {string} action
 * @param {number | null} [ownerId]
 */
export function may(action, ownerId) {
  if (!ME) return true;  // no session data on the page: leave it to the server (403 names the role needed)
  const rule = TABLE[action];
  if (!rule) return false;
  return rule.others || (ownerId != null && ownerId === ME.id && rule.own);
}

/**
 * Whether the signed-in user may cancel, archive, annotate or resume a job owned by `ownerId`.
 * @param {number | null | undefined} ownerId
 */
export function mayChangeJob(ownerId) {
  return may("job.cancel", ownerId ?? null);
}

/** Whether the signed-in user may submit jobs (viewers read only). */
export function maySubmit() {
  return may("job.submit");
}
