"""Who may do what (issue 37): the one table every state-changing route, the pages and docs/api.md read. Pure.

An action is done to a target that has an owner (a job, a sweep, a token, a bundle's record) or to one
that has none (the server: submitting, hosts, users). Each rule names the weakest role that may do it
to her own target and the weakest that may do it to anyone's: a member cancels her own job, an admin
anyone's. Roles, weakest first: viewer < member < admin (core/users.py). A worker credential (issue 34:
one per host, `rankzero workers add`) is none of them: it may do the worker's actions only, and read
nothing else.

`ROUTES` maps every state-changing route of the API to its action (tests/team/test_team_permissions.py
walks /openapi.json against it, as each role, owner and not); `markdown()` renders the table that
docs/api.md carries (`python -m core.permissions` prints it; a test checks the docs match).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

Role = Literal["viewer", "member", "admin", "worker"]
USER_ROLES: tuple[Role, ...] = ("viewer", "member", "admin")  # weakest first


@dataclass(frozen=True)
class Rule:
    what: str  # "cancelling a job": the words of a refusal and of the docs' table
    others: Role  # the weakest role that may do it to anyone's target (or at all, when targets have no owner)
    own: Role | None = None  # the weakest that may do it to her own target; None: targets have no owner


ACTIONS: dict[str, Rule] = {
    "job.submit": Rule("submitting a job", "member"),
    "job.resume": Rule("resuming from a job's checkpoint", "admin", "member"),
    "job.cancel": Rule("cancelling a job", "admin", "member"),
    "job.priority": Rule("changing a job's priority", "admin", "member"),
    "job.archive": Rule("archiving or unarchiving a job", "admin", "member"),
    "job.edit": Rule("setting a job's tags, note or console patterns", "admin", "member"),
    "job.delete": Rule("deleting a job", "admin", "member"),
    "sweep.create": Rule("starting a sweep", "member"),
    "sweep.cancel": Rule("cancelling a sweep", "admin", "member"),
    "sweep.pause": Rule("pausing or resuming a sweep", "admin", "member"),
    "sweep.extend": Rule("training a sweep's best trial longer", "admin", "member"),
    "code.upload": Rule("uploading a code bundle", "member"),
    "code.left_out": Rule("writing a bundle's left-out record (own: she uploaded it)", "admin", "member"),
    "token.add": Rule("adding an API token (own: for herself)", "admin", "member"),
    "token.revoke": Rule("revoking an API token (own: hers)", "admin", "member"),
    "user.add": Rule("adding a user", "admin"),
    "user.change": Rule("changing a user's role, quotas or priority ceiling", "admin"),
    "host.drain": Rule("draining or undraining a host", "admin"),
    "worker.manage": Rule("adding or revoking a worker host's credential", "admin"),
    "artifact.ship": Rule("shipping a job's files to the artifact store (a worker's)", "admin"),
    "webhook.add": Rule("adding a webhook of her own (her jobs' and sweeps' events)", "member"),
    "webhook.remove": Rule("removing a webhook (own: hers)", "admin", "member"),
    "webhook.test": Rule("sending a webhook a test event (own: hers)", "admin", "member"),
    "webhook.errors": Rule("reading a webhook delivery's error text (own: her webhook's)", "admin", "member"),
}

# What a worker credential may do, and nothing else: its reads included (api/auth.py refuses it every
# other route, GET or not).
WORKER_ACTIONS = frozenset({"artifact.ship", "artifact.fetch", "code.fetch", "worker.whoami"})

# Every state-changing route (method, path as the OpenAPI names it) → its action. A route that changes no
# state of the service's (signing in and out, parsing spec text for the editor) is listed in EXEMPT.
ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/api/jobs"): "job.submit",
    ("POST", "/api/jobs/{job_id}/cancel"): "job.cancel",
    ("PATCH", "/api/jobs/{job_id}"): "job.priority",
    ("POST", "/api/jobs/{job_id}/archive"): "job.archive",
    ("POST", "/api/jobs/{job_id}/unarchive"): "job.archive",
    ("PATCH", "/api/jobs/{job_id}/annotations"): "job.edit",
    ("POST", "/api/jobs/{job_id}/console-patterns"): "job.edit",
    ("DELETE", "/api/jobs/{job_id}"): "job.delete",
    ("POST", "/api/sweeps"): "sweep.create",
    ("POST", "/api/sweeps/{sweep_id}/cancel"): "sweep.cancel",
    ("POST", "/api/sweeps/{sweep_id}/pause"): "sweep.pause",
    ("POST", "/api/sweeps/{sweep_id}/resume"): "sweep.pause",
    ("POST", "/api/sweeps/{sweep_id}/extend-best"): "sweep.extend",
    ("POST", "/api/code"): "code.upload",
    ("PUT", "/api/code/{sha256}/left-out"): "code.left_out",
    ("POST", "/api/users/{name}/tokens"): "token.add",
    ("POST", "/api/tokens/{token_id}/revoke"): "token.revoke",
    ("POST", "/api/users"): "user.add",
    ("PATCH", "/api/users/{name}"): "user.change",
    ("POST", "/api/hosts/{name}/drain"): "host.drain",
    ("POST", "/api/hosts/{name}/undrain"): "host.drain",
    ("POST", "/api/workers"): "worker.manage",
    ("POST", "/api/workers/{host}/revoke"): "worker.manage",
    ("POST", "/api/artifacts/jobs/{job_id}/files/{path}"): "artifact.ship",
    ("POST", "/api/artifacts/jobs/{job_id}/append/{path}"): "artifact.ship",
    ("POST", "/api/webhooks"): "webhook.add",
    ("DELETE", "/api/webhooks/{webhook_id}"): "webhook.remove",
    ("POST", "/api/webhooks/{webhook_id}/test"): "webhook.test",
}
EXEMPT: frozenset[tuple[str, str]] = frozenset({("POST", "/login"), ("POST", "/logout"), ("POST", "/ui/parse-spec")})
# Worker routes that only read (a worker credential may call these and the artifact.ship ones only).
WORKER_READS: dict[tuple[str, str], str] = {
    ("GET", "/api/artifacts/jobs/{job_id}/files/{path}"): "artifact.fetch",
    ("GET", "/api/artifacts/storage"): "artifact.fetch",
    ("GET", "/api/code/{sha256}"): "code.fetch",
    ("GET", "/api/workers/me"): "worker.whoami",
}


# Actions checked inside another route as well (the same rule, whichever path reaches it).
ALSO_CHECKED: dict[str, tuple[str, ...]] = {
    "job.resume": ("POST /api/jobs (its resume_from)", "POST /api/sweeps/{sweep_id}/extend-best (the best trial)"),
    "webhook.errors": (
        "GET /api/jobs/{job_id}/notifications (last_error)",
        "GET /api/webhooks/{webhook_id}/deliveries (last_error)",
    ),
}


def _rank(role: Role) -> int:
    return USER_ROLES.index(role) if role in USER_ROLES else -1


def allowed(role: Role, action: str, own: bool) -> bool:
    """Whether a caller of `role` may do `action` to a target she owns (`own`) or not. Unknown action: no."""
    rule = ACTIONS.get(action)
    if role == "worker":
        return action in WORKER_ACTIONS
    if rule is None:
        return False
    needed = rule.own if own and rule.own is not None else rule.others
    return _rank(role) >= _rank(needed)


def needed(action: str, own: bool) -> Role:
    rule = ACTIONS[action]
    return rule.own if own and rule.own is not None else rule.others


def refusal(role: Role, name: str, action: str, own: bool, target: str | None = None) -> str | None:
    """Why `name` (of `role`) may not do `action` to `target`, or None when she may. Says what to do."""
    if allowed(role, action, own):
        return None
    rule = ACTIONS.get(action)
    what = rule.what if rule else action
    on = f" ({target})" if target else ""
    if role == "worker":
        return f"{what}{on} is not a worker's action: a worker credential ({name}) does only what a worker does"
    if rule is not None and rule.own is not None and not own:
        return (
            f"{what}{on} needs role {rule.others} (or being its owner); {name} is {role} and does not own it: "
            "ask its owner or an admin"
        )
    return f"{what}{on} needs role {needed(action, own)}; {name} is {role}: ask an admin"


def for_role(role: Role) -> dict[str, dict[str, bool]]:
    """Per action, whether `role` may do it to her own target and to others': what a page offers (web/)."""
    return {a: {"own": allowed(role, a, True), "others": allowed(role, a, False)} for a in ACTIONS}


def routes_of(action: str) -> list[str]:
    return [f"{method} {path}" for (method, path), a in ROUTES.items() if a == action] + list(
        ALSO_CHECKED.get(action, ())
    )


def markdown() -> str:
    """The table of docs/api.md: per action, each role, own target and others'."""

    def cell(role: Role, action: str) -> str:
        rule = ACTIONS[action]
        if rule.own is None:
            return "yes" if allowed(role, action, False) else "—"
        own, others = allowed(role, action, True), allowed(role, action, False)
        return "any" if others else ("own" if own else "—")

    lines = [
        "| action | routes | viewer | member | admin | worker credential |",
        "|---|---|---|---|---|---|",
    ]
    for action, rule in ACTIONS.items():
        routes = "<br>".join(f"`{r}`" for r in routes_of(action)) or "—"
        worker = "yes" if action in WORKER_ACTIONS else "—"
        lines.append(
            f"| {rule.what} | {routes} | {cell('viewer', action)} | {cell('member', action)} | "
            f"{cell('admin', action)} | {worker} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
