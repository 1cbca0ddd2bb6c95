// @ts-check
// Who is signed in (base.html puts the session's user on <body>), and what she may do to a job: the same
// rule as api/auth.py may_change_job (admins any job, members their own, viewers none), so a page offers
// only the buttons that work instead of buttons that answer 403.

const data = document.body.dataset;

/** The signed-in user, or null on a page without a session (the sign-in page). */
export const ME = data.userId ? { id: Number(data.userId), name: data.user || "", role: data.role || "viewer" } : null;

/**
 * Whether the signed-in user may cancel, archive, annotate or resume a job owned by `ownerId`.
 * @param {number | null | undefined} ownerId
 */
export function mayChangeJob(ownerId) {
  if (!ME) return true;  // no session data on the page: leave it to the server (403 names the role needed)
  if (ME.role === "admin") return true;
  return ME.role === "member" && ownerId != null && ownerId === ME.id;
}

/** Whether the signed-in user may submit jobs (viewers read only). */
export function maySubmit() {
  return !ME || ME.role !== "viewer";
}
