"""`rankzero webhooks add|list|rm|test` (issue 37): a user's own webhooks, which hear her jobs' and sweeps' events
(api/routes/webhooks.py), signed with each hook's own secret, printed once when it is added."""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

from typing import Annotated

import typer

from cli.app import TokenOpt, UrlOpt, app, call, client_for, console
from cli.views import local_time

webhooks_app = typer.Typer(
    help="Your own webhooks (your jobs' and sweeps' events): add, list, rm, test.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(webhooks_app, name="webhooks")


@webhooks_app.command("add")
def webhooks_add(
    hook_url: Annotated[str, typer.Argument(metavar="HOOK_URL", help="The receiver: an http(s) URL.")],
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add a webhook: your jobs' and sweeps' events are POSTed to HOOK_URL, signed with the secret printed once."""
    made = call(lambda: client_for(url, token).post("/webhooks", json={"url": hook_url}))
    console.print(f"webhook {made['id']} for {made['owner']}: {made['url']}", highlight=False, soft_wrap=True)
    console.print("its secret (X-Rankzero-Signature is sha256=HMAC-SHA256(secret, body)):")
    console.print(made["secret"], highlight=False, soft_wrap=True)
    console.print("Shown once: keep it with the receiver. `rankzero webhooks test ID` sends a signed test event.",
                  style="dim")  # fmt: skip


@webhooks_app.command("list")
def webhooks_list(url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Your webhooks (an admin: everyone's)."""
    rows = call(lambda: client_for(url, token).get("/webhooks"))
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    for col in ("id", "owner", "url", "added"):
        table.add_column(col)
    for h in rows:
        table.add_row(str(h["id"]), h["owner"], h["url"], local_time(h["created_at"], short=True))
    console.print(table)


@webhooks_app.command("rm")
def webhooks_rm(webhook_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Remove webhook WEBHOOK_ID (yours; an admin: anyone's), and its delivery log."""
    call(lambda: client_for(url, token).request_empty("DELETE", f"/webhooks/{webhook_id}"))
    console.print(f"webhook {webhook_id} removed")


@webhooks_app.command("test")
def webhooks_test(webhook_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Send webhook WEBHOOK_ID a signed `webhook.test` event now and say what its receiver answered."""
    said = call(lambda: client_for(url, token).post(f"/webhooks/{webhook_id}/test"))
    if said["status"] is not None and 200 <= said["status"] < 300:
        console.print(f"webhook {webhook_id}: the receiver answered {said['status']}")
        return
    answer = f"answered {said['status']}" if said["status"] is not None else "did not answer"
    console.print(f"webhook {webhook_id}: the receiver {answer}: {said['error']}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)
