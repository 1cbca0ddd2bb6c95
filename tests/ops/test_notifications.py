"""Webhooks: a receiver started by the test gets one signed delivery per transition worth telling, from a
real worker's sender, and a retry after a 500; the delivery log says so; the pure rules, table-driven."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator

import pytest

from core import notify
from core.tables import JobStatus
from tests.ops.receiver import Receiver
from tests.support.deadlines import deadline_in
from tests.support.jobs import fake_spec

S = JobStatus
SECRET = "webhook-secret-for-the-tests-0123456789"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(statuses=[500])  # the first delivery fails: the sender must retry it
    yield r
    r.close()


def wait_for(what: str, check, timeout: float = 60.0):
    deadline = deadline_in(timeout)
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return result


def test_one_signed_delivery_per_transition_and_a_retry_after_a_500(service, workers, receiver: Receiver) -> None:
    settings, client = service(webhook_urls=receiver.url, webhook_secret=SECRET, webhook_backoff_s=0.2)
    workers.start(settings)
    done = client.submit(fake_spec("notified"))
    assert client.wait_terminal(done["id"])["status"] == "succeeded"
    gone = client.submit(fake_spec("cancelled-one", behaviour={"step_s": 1.0}))
    client.wait(gone["id"], lambda j: j["status"] == "running", 60, "running")
    assert client.http.post(f"/jobs/{gone['id']}/cancel").status_code == 202
    assert client.wait_terminal(gone["id"])["status"] == "cancelled"

    def delivered() -> list:
        ok = [c for c in receiver.calls if c[2] == 200]
        return ok if len(ok) >= 2 else []

    wait_for("two delivered notifications", delivered)
    time.sleep(1.5)  # a duplicate, if the sender made one, would arrive within a pass or two
    events = []
    for headers, raw, _ in receiver.calls:
        assert notify.signature_ok(SECRET, raw, headers["x-rankzero-signature"]), "bad signature"
        body = json.loads(raw)
        assert headers["x-rankzero-event"] == body["event"] and body["text"].startswith("rankzero job")
        events.append((body["job"]["id"], body["event"], headers["x-rankzero-delivery"]))
    # The first try got a 500 and that delivery was tried again later (the other job's delivery may come in
    # between on a busy host); every delivery ends delivered exactly once.
    statuses = [c[2] for c in receiver.calls]
    assert statuses[0] == 500 and statuses.count(500) == 1 and len(events) == 3
    assert events.index(events[0], 1) > 0 and statuses[events.index(events[0], 1)] == 200
    delivered_ok = [e for e, st in zip(events, statuses, strict=True) if st == 200]
    assert len(delivered_ok) == len(set(delivered_ok)) == 2
    assert {e[:2] for e in events} == {(done["id"], "job.succeeded"), (gone["id"], "job.cancelled")}

    log = client.http.get(f"/jobs/{done['id']}/notifications").json()
    assert [(n["event"], n["state"], n["attempts"], n["last_status"]) for n in log] == [
        ("job.succeeded", "delivered", 2, 200)
    ]
    assert "secret-path" not in log[0]["url"]  # a webhook URL's path is its secret: never shown


@pytest.mark.parametrize(
    ("to", "detail", "kind"),
    [
        (S.succeeded, "finished", "succeeded"),
        (S.failed, "the ranks failed", "failed"),
        (S.cancelled, "cancelled before start", "cancelled"),
        (S.queued, "preempted to make room for job 7 (higher priority); resumes", "preempted"),
        (S.queued, "host b went silent; every node stopped, resuming (1/3 host losses)", "host_lost"),
        (S.queued, "worker lost (no heartbeat for 31 s); resuming (1/3 host losses)", "host_lost"),
        (S.queued, "worker shutting down; the job resumes from its latest checkpoint", "requeued"),
        (S.running, "started", None),
        (S.starting, "claimed by a", None),
        (S.cancelling, "cancel requested", None),
    ],
)  # fmt: skip
def test_event_kind(to: JobStatus, detail: str, kind: str | None) -> None:
    assert notify.event_kind(to, detail) == kind


@pytest.mark.parametrize(
    ("status", "attempts", "state"),
    [(200, 1, "delivered"), (204, 8, "delivered"), (500, 1, "pending"), (None, 3, "pending"),
     (500, 8, "failed"), (410, 1, "failed"), (404, 2, "pending")],
)  # fmt: skip
def test_after_try(status: int | None, attempts: int, state: str) -> None:
    assert notify.after_try(status, attempts, max_attempts=8) == state


@pytest.mark.parametrize(("failures", "wait"), [(1, 2.0), (2, 4.0), (3, 8.0), (20, 3600.0)])
def test_backoff_doubles_up_to_an_hour(failures: int, wait: float) -> None:
    assert notify.backoff_s(failures, 2.0) == wait


def test_signature_is_hmac_sha256_of_the_raw_body() -> None:
    header = notify.sign("k", b'{"a":1}')
    assert header == "sha256=" + hmac.new(b"k", b'{"a":1}', hashlib.sha256).hexdigest()
    assert notify.signature_ok("k", b'{"a":1}', header)
    assert not notify.signature_ok("k", b'{"a":2}', header) and not notify.signature_ok("other", b'{"a":1}', header)


def test_slack_text_escapes_what_slack_reads_as_markup() -> None:
    assert notify.message_text(3, "a<b>&c", "failed", None) == "rankzero job 3 (a&lt;b&gt;&amp;c) failed"
