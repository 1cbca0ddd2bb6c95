// @ts-check
// What the server publishes so that the pages need not copy it (GET /api/meta, api/routes/schema.py): the
// job state sets (their one home is core/job_state.py) and the limits the routes enforce. Read once per
// page, before any module that imports this one runs (a top-level await), so every import sees the values.
import { api } from "./api.js";

/** @typedef {import("../../types/api").components["schemas"]["Meta"]} Meta */
/** @typedef {import("../../types/api").components["schemas"]["JobStatus"]} JobStatus */

/** @type {Meta} */
export const META = await api("/meta");

/** Every state, in the order a job goes through them (the jobs list's filter shows them so). */
export const STATES = META.states.all;
/** Finished: nothing changes any more. @type {Set<string>} */
export const TERMINAL = new Set(META.states.terminal);
/** POST /api/jobs/{id}/cancel acts on these. @type {Set<string>} */
export const CANCELLABLE = new Set(META.states.cancellable);
/** The bounds the routes enforce (a request past them gets 422). */
export const LIMITS = META.limits;
