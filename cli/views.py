"""How the CLI shows what a job says: everything from the server is text, never rich markup
(`Text(...)`: `BUILDERS[spec.name]` and `[bold]` print as they are), numbers with separators,
times in the local time zone (named), tables that fit 80 columns."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported by the functions that build its objects: not at a command's start (issue 29)
    from rich.table import Table
    from rich.text import Text


def finished_states() -> frozenset[str]:
    """The states after which nothing changes (core/job_state.py TERMINAL, their one home)."""
    from core.job_state import TERMINAL  # here, not at the top: it loads the database schema (~0.5 s)

    return frozenset(s.value for s in TERMINAL)


STATUS_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan"}


def text(value: Any, style: str = "") -> Text:
    """A cell or line that prints verbatim."""
    from rich.text import Text

    return Text("" if value is None else str(value), style=style)


def local_time(iso: str | None, *, short: bool = False) -> str:
    """An API timestamp in this machine's time zone, the zone named: '2026-11-22 05:16:01 CET'."""
    if not iso:
        return ""
    try:
        at = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if at.tzinfo is None:  # the API's times are UTC
        at = at.replace(tzinfo=timezone.utc)
    at = at.astimezone()
    return at.strftime("%m-%d %H:%M") if short else at.strftime("%Y-%m-%d %H:%M:%S %Z")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def number(value: Any) -> str:
    """1234567 → '1,234,567'; 0.000123456 → '0.0001235'; 1234.5 → '1,234.5'."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return f"{value:.4g}"


def steps(job: dict[str, Any]) -> str:
    if job.get("step") is None and job.get("spec", {}).get("entrypoint"):
        return "not reported"  # a script job that reported no step (REST null), never "0"
    done = job.get("step") or 0
    return f"{done:,}/{job['total_steps']:,}" if job.get("total_steps") else f"{done:,}"


def console_line(line: dict[str, Any]) -> str:
    """A merged console line (GET /jobs/{id}/console) with its source: `[r0] text`, `[r1 err] text` for stderr,
    `[env] text` for uv's output while the worker prepared the job's own packages."""
    if line["stream"] == "environment":
        return f"[env] {line['text']}"
    return f"[r{line['rank']}{' err' if line['stream'] == 'stderr' else ''}] {line['text']}"


def lines_of_rank(lines: list[dict[str, Any]], rank: int | None) -> list[dict[str, Any]]:
    """The merged console's lines of one rank (every line when `rank` is None)."""
    return lines if rank is None else [ln for ln in lines if ln["rank"] == rank]


def rank_not_shown(rank: int | None, ranks: list[int], more_ranks: bool, job_id: int) -> str | None:
    """Why `logs --rank R` cannot show R from the merged console, or None. No ranks yet (a queued job) is no
    reason: its logs may come."""
    if rank is None or not ranks or rank in ranks:
        return None
    if more_ranks:
        return f"rank {rank} is past the ranks the merged view reads: give --stream stdout or --stream stderr"
    return f"job {job_id} has no rank {rank}: its ranks are {', '.join(map(str, ranks))}"


def status_text(status: str) -> Text:
    return text(status, STATUS_STYLE.get(status, ""))


def jobs_table(items: list[dict[str, Any]], width: int = 80) -> Table:
    """Fits `width` columns: id, status, step, loss and created keep their full width (the id is what every
    other command takes; a cut number reads as another number); name and strategy give way. The pool column
    shows whenever the jobs are of more than one pool, and otherwise when it fits without cutting a name."""
    from rich import box
    from rich.table import Table

    headers = ("id", "name", "status", "pool", "strategy", "step", "loss", "created")
    rows = [
        (str(j["id"]), str(j["name"]), str(j["status"]), str(j.get("pool") or ""), str(j.get("strategy") or ""),
         steps(j), number(j.get("latest_loss")), local_time(j.get("created_at"), short=True))
        for j in items
    ]  # fmt: skip
    widest = [max([len(r[i]) for r in rows] + [len(h)]) for i, h in enumerate(headers)]
    fixed = width - sum(widest[i] for i in (0, 2, 5, 6, 7))
    wanted = min(widest[1], 24) + min(widest[4], 12)
    pool_w = min(widest[3], 16)
    with_pool = len({r[3] for r in rows}) > 1 or fixed - table_overhead(8) - pool_w >= wanted
    room = fixed - table_overhead(8 if with_pool else 7) - (pool_w if with_pool else 0)
    name_w, strategy_w = give_way(room, min(widest[1], 24), min(widest[4], 12))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    table.add_column("id", justify="right", no_wrap=True, min_width=widest[0])
    table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=name_w)
    table.add_column("status", no_wrap=True, min_width=widest[2])
    if with_pool:
        table.add_column("pool", overflow="ellipsis", no_wrap=True, max_width=pool_w)
    table.add_column("strategy", overflow="ellipsis", no_wrap=True, max_width=strategy_w)
    for i, name in ((5, "step"), (6, "loss"), (7, "created")):
        table.add_column(name, justify="left" if name == "created" else "right", no_wrap=True, min_width=widest[i])
    for r in rows:
        rest = r[3:] if with_pool else r[4:]
        table.add_row(text(r[0]), text(r[1]), status_text(r[2]), *(text(v) for v in rest))
    return table


def table_overhead(columns: int) -> int:
    """Characters a SIMPLE_HEAD table with padding (0, 1) and no edge padding adds to its columns' widths."""
    return 3 * columns - 1


def give_way(room: int, first: int, second: int, least: int = 4) -> tuple[int, int]:
    """Widths for two columns that share `room`: the first (a name) keeps as much as it can; each keeps at
    least `least` (the table then runs wider than the terminal rather than show nothing)."""
    if first + second <= room:
        return first, second
    second = max(least, min(second, room // 3))
    return max(least, min(first, room - second)), second


SHOW_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "id"), ("name", "name"), ("owner", "submitted by"), ("status", "status"), ("pool", "pool"),
    ("strategy", "strategy"),
    ("global_batch_size", "global batch"), ("attempt", "attempt"), ("worker_host", "worker"),
    ("backend_job_id", "Slurm job"), ("backend_partition", "partition"), ("backend_nodes", "nodes"),
    ("backend_state_words", "Slurm says"),
    ("epoch", "epoch"), ("samples", "samples"), ("latest_loss", "latest loss"),
    ("failed_rank", "failed rank"), ("exit_code", "exit code"),
)  # fmt: skip


def show_table(job: dict[str, Any]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(show_header=False, box=box.SIMPLE, pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    # A script chooses its own batch: the built-in trainer's global batch is no advice for it.
    hidden = {"global_batch_size"} if (job.get("spec") or {}).get("entrypoint") else set()
    rows: list[tuple[str, str]] = [
        (label, number(job[key])) for key, label in SHOW_FIELDS if job.get(key) is not None and key not in hidden
    ]
    rows.insert(4, ("step", steps(job)))
    # its worker or Slurm agent is silent: what the row says may be frozen (issue 35, core/supervision.py)
    rows[5:5] = [("unwatched", job["supervisor_silence"])] if job.get("supervisor_silence") else []
    if job.get("samples_per_s") is not None:
        rows.append(("samples/s", number(job["samples_per_s"])))
    if job.get("status") == "running" and job.get("eta_s") is not None:
        rows.append(("ETA", duration(job["eta_s"])))
    rows += placement_rows(job)
    for key in ("created_at", "started_at", "finished_at"):
        if job.get(key):
            rows.append((key.removesuffix("_at"), local_time(job[key])))
    for label, value in rows:
        table.add_row(text(label), status_text(value) if label == "status" else text(value))
    return table


def queue_place(est: dict[str, Any]) -> str:
    """A queued job's place and estimated start (REST's start_estimate), as `show` and `follow` say it:
    '#2 in its pool, starts in ~4:10 (when job 12 ends)'."""
    when = "start not known" if est.get("start_in_s") is None else f"starts in ~{duration(est['start_in_s'])}"
    return f"#{est['position']} in its pool, {when} ({est['why']})"


def placement_rows(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Why a queued job waits, where a placed one runs (elastic fit in words), priority, host losses."""
    rows: list[tuple[str, str]] = []
    if job.get("status") == "queued" and job.get("pending_reason"):
        rows.append(("waiting", job["pending_reason"]))
    if est := job.get("start_estimate"):  # core/start_estimate.py
        rows.append(("queue", queue_place(est)))
    if (spent := job.get("time_breakdown")) and spent.get("wall_s"):  # core/time_breakdown.py
        parts = ("queued", "starting", "training", "checkpointing", "lost_to_restarts", "stopped")
        shown = [f"{p.replace('_', ' ')} {duration(spent[p])}" for p in parts if spent.get(p, 0) >= 0.5]
        rows.append(("time", " · ".join(shown) or duration(spent["wall_s"])))
    placed = None
    if job.get("placement"):  # the reader (pydantic models, core.placement) only for a job that has one
        from core.placement_record import BadPlacement, read_placement  # the one reader of a placement

        try:
            placed = read_placement(job.get("placement"))
        except BadPlacement:
            placed = None  # a damaged one: the rest of the job still shows
    if placed is not None and placed.nodes:
        hosts = ", ".join(n.host + (f" (GPU {','.join(n.gpus)})" if n.gpus else "") for n in placed.nodes)
        rows.append(("hosts", hosts))
        wanted = (job.get("spec") or {}).get("nproc")
        if isinstance(wanted, int) and placed.nproc < wanted:
            rows.append(("elastic", f"running on {placed.nproc} of {wanted} ranks "
                                    f"(accumulation ×{placed.accumulation_steps})"))  # fmt: skip
    if job.get("priority"):
        rows.append(("priority", str(job["priority"])))
    if job.get("host_losses"):
        rows.append(("host losses", str(job["host_losses"])))
    return rows


def host_storage(host: dict[str, Any], store: dict[str, Any] | None) -> str:
    """Where a host's job files are: the API's runs dir itself, or uploaded to the API's store (its disk or S3)."""
    kind = host.get("storage")
    if kind == "shared":
        return "shared runs dir"
    if kind == "store":
        where = (store or {}).get("kind")
        return {"s3": "API store (S3)", "disk": "API store (its disk)"}.get(str(where), "API store")
    return "own runs dir, cannot upload"


def hosts_table(hosts: list[dict[str, Any]], store: dict[str, Any] | None = None) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("host", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("free", no_wrap=True)
    table.add_column("storage", no_wrap=True)
    table.add_column("jobs", overflow="fold")
    table.add_column("last seen", no_wrap=True)
    for h in hosts:
        if h["gpus"]:
            free = f"{len(h['free_gpus'])}/{len(h['gpus'])} GPUs"
        else:
            free = f"{h['free_slots']}/{h['cpu_slots']} slots"
        state = "draining" if h["draining"] else ("alive" if h["alive"] else "dead")
        jobs = ", ".join(f"{j['id']} {j['name']}" + (f" (node {j['node_rank']})" if j["node_rank"] else "")
                         for j in h["jobs"])  # fmt: skip
        table.add_row(text(h["name"]), text(state, "" if h["alive"] else "dim"), text(free),
                      text(host_storage(h, store)), text(jobs or "-"),
                      text(local_time(h["last_seen"], short=True)))  # fmt: skip
    return table


def timeline_table(transitions: list[dict[str, Any]]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title="timeline", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("at", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("try", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for t in transitions:
        table.add_row(text(local_time(t.get("at"))), status_text(t["status"]), text(t.get("attempt")),
                      text(_last_line(t.get("detail"))))  # fmt: skip
    return table


def _last_line(detail: str | None) -> str:
    """A traceback's cause (its last line): the whole error is printed above the timeline."""
    lines = [line for line in (detail or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def series_summary(series: dict[str, Any]) -> dict[str, Any]:
    """latest / min / max (with their steps) of one series from GET /jobs/{id}/metrics.

    The server's downsampling keeps each bucket's min and max points, so min and max are exact."""
    points = series.get("points") or []
    out: dict[str, Any] = {"name": series["name"], "points": series.get("total_points", len(points))}
    if not points:
        return out | {"step": None, "latest": None, "min": None, "min_step": None, "max": None, "max_step": None}
    last = max(points, key=lambda p: p["step"])
    low = min(points, key=lambda p: p["value"])
    high = max(points, key=lambda p: p["value"])
    return out | {
        "step": last["step"], "latest": last["value"], "min": low["value"], "min_step": low["step"],
        "max": high["value"], "max_step": high["step"],
    }  # fmt: skip


TIME_KEYED_PREFIX = "sys/"  # the worker's samples (worker/ingest_handlers.py SYSTEM_PREFIX): step = unix time in ms


def series_step(name: str, step: Any) -> str:
    """A point's step as a reader wants it: a number, or for a `sys/…` series (keyed by wall-clock ms, not by
    the job's step) the local clock time it was sampled at."""
    if step is None:
        return ""
    if name.startswith(TIME_KEYED_PREFIX) and isinstance(step, int):
        return datetime.fromtimestamp(step / 1000, tz=timezone.utc).astimezone().strftime("%H:%M:%S")
    return number(step)


def metrics_tables(summaries: list[dict[str, Any]]) -> list[Table]:
    """The job's series (min and max with their step, `2.255 @10`), then the worker's sys/… samples (keyed by
    clock time: their latest, min and max, the time of the latest), each within 80 columns (`--json` has the
    point counts and every step); a long name folds rather than vanish."""
    from rich import box
    from rich.table import Table

    own = [s for s in summaries if not s["name"].startswith(TIME_KEYED_PREFIX)]
    system = [s for s in summaries if s["name"].startswith(TIME_KEYED_PREFIX)]
    tables: list[Table] = []
    if own:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("series", overflow="fold", min_width=min(max(len(s["name"]) for s in own), 12))
        for name in ("step", "latest", "min @step", "max @step"):
            table.add_column(name, justify="right", no_wrap=True)
        for s in own:
            low = f"{number(s['min'])} @{number(s['min_step'])}" if s["min"] is not None else ""
            high = f"{number(s['max'])} @{number(s['max_step'])}" if s["max"] is not None else ""
            table.add_row(text(s["name"]), text(number(s["step"])), text(number(s["latest"])), text(low), text(high))
        tables.append(table)
    if system:
        table = Table(title="system samples", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("series", overflow="fold", min_width=min(max(len(s["name"]) for s in system), 12))
        for name in ("at", "latest", "min", "max"):
            table.add_column(name, justify="right", no_wrap=True)
        for s in system:
            table.add_row(text(s["name"]), text(series_step(s["name"], s["step"])), text(number(s["latest"])),
                          text(number(s["min"])), text(number(s["max"])))  # fmt: skip
        tables.append(table)
    return tables


def checkpoints_table(rows: list[dict[str, Any]], run_dir: str) -> Table:
    """`path` relative to the runs dir: what `resume_from` takes as it is."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("epoch", justify="right", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("sha256", no_wrap=True)
    table.add_column("path (resume_from)", no_wrap=True)  # whole, so it copies as it is
    for c in rows:
        table.add_row(
            text(c["id"]), text(number(c["step"])), text(number(c.get("epoch"))), text(number(c["bytes"])),
            text(c["sha256"][:8] + "…"), text(f"{run_dir}/{c['path']}"),
        )  # fmt: skip
    return table


def local_zone() -> str:
    return datetime.now().astimezone().strftime("%Z") or "local time"
