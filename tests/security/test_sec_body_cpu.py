"""Hardening 1: no unauthenticated (or authenticated) body can make the server spend super-linear CPU
on the event loop. The attack: an unterminated JSON string full of escaped quotes, sent without a
content type (which the old depth check scanned with a backtracking regex: ~15 s for 64 KB)."""

from __future__ import annotations

import threading
import time
from contextlib import closing

import httpx

from api.limits import json_depth
from tests.support.attack import HealthProbe, sign_in


def _escaped_quotes(size: int) -> bytes:
    """`"\\"\\"\\"…` with no closing quote: every quote could start a string that never ends."""
    return b'"' + b'\\"' * ((size - 1) // 2)


# The server runs in this process (live_api): the process's CPU time over a request is what the server
# spent on it (plus the client's and the health probe's few ms), a measure load does not stretch, unlike
# wall-clock time. The scan this guards against cost ~15 s of CPU for 64 KB.
ATTACK_CPU_S = 2.0


def _attack(url: str, body: bytes, headers: dict[str, str], out: dict[str, object]) -> None:
    t0, cpu0 = time.monotonic(), time.process_time()
    try:
        out["status"] = httpx.post(url, content=body, headers=headers, timeout=120).status_code
    except httpx.HTTPError as exc:
        out["status"] = repr(exc)
    out["seconds"], out["cpu_s"] = time.monotonic() - t0, time.process_time() - cpu0


def _attack_while_probing(base: str, path: str, body: bytes, headers: dict[str, str] | None = None):
    out: dict[str, object] = {}
    with HealthProbe(base) as probe:
        time.sleep(0.2)
        attacker = threading.Thread(target=_attack, args=(base + path, body, headers or {}, out))
        attacker.start()
        attacker.join(timeout=120)
        _health_answered(probe)
    return out, probe


def _health_answered(probe: HealthProbe) -> None:
    """Wait (bounded) for the probe to have answers: a stalled server has none to give."""
    until = time.monotonic() + 30
    seen = len(probe.latencies)
    while len(probe.latencies) < seen + 2 and time.monotonic() < until:
        time.sleep(0.05)


def test_adversarial_bodies_without_content_type_do_not_stall_the_server(server) -> None:
    for size in (64 * 1024, server.settings.max_body_bytes - 1):
        body = _escaped_quotes(size)
        for path in ("/api/jobs", "/login", "/no/such/route"):
            out, probe = _attack_while_probing(server.base, path, body)
            print(f"{path} {len(body)} B: {out}, health worst {probe.worst * 1000:.0f} ms")
            assert out.get("cpu_s", 99) < ATTACK_CPU_S, (path, size, out)
            assert out["status"] in (401, 413), (path, size, out)
            assert probe.failures == 0 and probe.latencies, (path, size, probe.latencies)


def test_authenticated_adversarial_bodies_are_scanned_in_linear_time(server) -> None:
    body = _escaped_quotes(server.settings.max_body_bytes - 1)
    out, probe = _attack_while_probing(server.base, "/api/jobs", body, server.auth)
    print(f"authenticated {len(body)} B: {out}, health worst {probe.worst * 1000:.0f} ms")
    assert out.get("cpu_s", 99) < ATTACK_CPU_S and out["status"] in (400, 422), out
    assert probe.failures == 0 and probe.latencies, probe.latencies


def _comb(size: int) -> bytes:
    """64 levels where no 33 openers are adjacent: survives the most bracket-deleting passes."""
    side = b"[" * 31 + b"]" * 31
    tooth = (b"[" + side) * 33 + b"]" * 33
    return tooth * max(1, size // len(tooth))


WORST_CASES = {
    "escaped-quotes": _escaped_quotes,
    "quotes": lambda n: b'"' * n,
    "openers": lambda n: b"[" * n,
    "nested": lambda n: b"[" * (n // 2) + b"]" * (n // 2),
    "pairs": lambda n: b"[]" * (n // 2),
    "comb": _comb,
}


def _seconds(body: bytes) -> float:
    """CPU seconds of one scan (pure code: the machine's load does not stretch it)."""
    t0 = time.process_time()
    json_depth(body, cap=33)
    return time.process_time() - t0


def test_depth_check_is_linear_on_worst_cases() -> None:
    for name, make in WORST_CASES.items():
        small, big = _seconds(make(64 * 1024)), _seconds(make(1 << 20))
        print(f"{name}: 64 KiB {small * 1000:.1f} ms, 1 MiB {big * 1000:.1f} ms")
        assert big < 2.0 and big < 40 * small + 0.05, (name, small, big)  # 16x the bytes; quadratic would be 256x
    assert json_depth(b"[" * 40 + b"]" * 40, cap=33) == 33
    assert json_depth(_comb(10_000), cap=100) == 33 + 31
    assert json_depth(b'{"a": "[[[", "b": [1, {"c": "]]]\\"[["}]}') == 3
    assert json_depth(b'["a\\\\", ["\\\\\\"["]]') == 2
    assert json_depth(b'"unterminated \\" [[[[') == 0


def test_json_content_type_is_matched_case_insensitively(server) -> None:
    body = '{"name": "x", "model": {"name": "mlp", "args": {"a": ' + "[" * 40 + "]" * 40 + "}}}"
    for content_type in ("Application/JSON", "APPLICATION/JSON; charset=utf-8", "application/vnd.api+JSON"):
        r = httpx.post(
            f"{server.base}/api/jobs", content=body, headers={**server.auth, "Content-Type": content_type}, timeout=10
        )
        assert r.status_code == 400 and "nests deeper" in r.json()["detail"], (content_type, r.status_code, r.text)


def test_yaml_parsing_runs_off_the_event_loop(server) -> None:
    """The costliest YAML per byte (a flow list of 30,000 one-letter items, 60 KB) takes PyYAML over a
    second of CPU; /api/health must not wait for it, and a bigger text is refused unparsed."""
    text = b"k: [" + b"a," * 30_000 + b"a]\n"
    with closing(sign_in(server)) as client:
        csrf = client.cookies["rankzero_csrf"]
        with HealthProbe(server.base) as probe:
            _health_answered(probe)
            before, t0, cpu0 = len(probe.latencies), time.monotonic(), time.process_time()
            r = client.post(
                "/ui/parse-spec", content=text, headers={"X-CSRF-Token": csrf, "Content-Type": "text/plain"}
            )
            parse_s, parse_cpu = time.monotonic() - t0, time.process_time() - cpu0
            during = len(probe.latencies) - before
    print(f"parse-spec {len(text)} B: {r.status_code} in {parse_s:.2f} s ({parse_cpu:.2f} s CPU), "
          f"{during} health answers meanwhile, worst {probe.worst * 1000:.0f} ms")  # fmt: skip
    assert r.status_code == 200 and len(r.json()["spec"]["k"]) == 30_001
    # The mechanism: health kept answering while the parse ran (parsed on the event loop, it answers at
    # most once, after). Load slows the parse and the probe alike, so the count does not depend on it.
    assert probe.failures == 0 and during >= 3, probe.latencies
    with closing(sign_in(server)) as client:
        big = b"k: [" + b"a," * 40_000 + b"a]\n"
        headers = {"X-CSRF-Token": client.cookies["rankzero_csrf"], "Content-Type": "text/plain"}
        cpu0 = time.process_time()
        assert client.post("/ui/parse-spec", content=big, headers=headers).status_code == 413
        refuse_cpu = time.process_time() - cpu0
    print(f"parse-spec {len(big)} B: refused in {refuse_cpu:.3f} s CPU")
    assert refuse_cpu < parse_cpu / 3, (refuse_cpu, parse_cpu)  # refused unparsed: a parse would cost more
