"""`rankzero hosts drain HOST` / `undrain HOST` against a live API: the host row says so, the listing shows
it, a wrong action or host says what to do."""

from __future__ import annotations

from sqlmodel import Session
from typer.testing import CliRunner

from cli.main import app
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Host
from tests.support.settings import API_TOKEN


def test_drain_and_undrain_from_the_command_line(live_api, api_settings) -> None:
    settings = api_settings()
    base = live_api(settings)
    upgrade(settings.resolved_database_url)
    with Session(get_engine(settings.resolved_database_url)) as s:
        s.add(Host(name="gpu-1", address="10.0.0.2", pool="rankzero", gpus=["0"], cpu_slots=4, storage_id="x"))
        s.commit()
    auth = ["--url", base, "--token", API_TOKEN]
    runner = CliRunner()

    out = runner.invoke(app, ["hosts", "drain", "gpu-1", "--note", "new PSU", *auth])
    assert out.exit_code == 0 and "gpu-1 drained" in out.output, out.output
    with Session(get_engine(settings.resolved_database_url)) as s:
        row = s.get_one(Host, "gpu-1")
        assert row.drain_requested and row.drain_note == "new PSU"
    listing = runner.invoke(app, ["hosts", *auth])
    assert listing.exit_code == 0 and "draining" in listing.output, listing.output

    out = runner.invoke(app, ["hosts", "undrain", "gpu-1", *auth])
    assert out.exit_code == 0 and "undrained" in out.output
    with Session(get_engine(settings.resolved_database_url)) as s:
        assert not s.get_one(Host, "gpu-1").drain_requested

    bad = runner.invoke(app, ["hosts", "cordon", "gpu-1", *auth])
    assert bad.exit_code == 1 and "usage: rankzero hosts" in bad.output
    missing = runner.invoke(app, ["hosts", "drain", "nowhere", *auth])
    assert missing.exit_code != 0 and "no host 'nowhere'" in missing.output
