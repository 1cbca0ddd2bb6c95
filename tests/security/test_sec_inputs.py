"""Hardening 6: inputs that answered 500. Every one must get a 4xx."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5000 + "]" * 5000,  # flow nesting
        "a:\n" + "".join(" " * i + "- \n" for i in range(1, 3000)),  # block nesting
        "a: " + "{b: " * 3000 + "}" * 3000,
        "a: 2024-13-45",  # a date that is not one
        "2024-01-01: day",  # a key JSON cannot have
        "a: 1" + "0" * 10_000,  # past Python's int-from-text limit
        "a: *nope",
        "\xff\xfe",
    ],
    ids=["flow-deep", "block-deep", "map-deep", "bad-date", "date-key", "huge-int", "alias", "not-utf8"],
)
def test_parse_spec_answers_4xx_for_hostile_yaml(session_client, text: str) -> None:
    csrf = session_client.cookies["rankzero_csrf"]
    body = text.encode("latin-1") if text == "\xff\xfe" else text.encode()
    r = session_client.post(
        "/ui/parse-spec", content=body, headers={"X-CSRF-Token": csrf, "Content-Type": "text/plain"}
    )
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])


def test_parse_spec_still_parses_a_spec(session_client) -> None:
    csrf = session_client.cookies["rankzero_csrf"]
    r = session_client.post(
        "/ui/parse-spec", content=b"name: x\nmodel: {name: mlp, args: {hidden: [64, 64]}}\n",
        headers={"X-CSRF-Token": csrf, "Content-Type": "text/plain"},
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["spec"]["model"]["args"]["hidden"] == [64, 64]


BAD_IDS = ["clone=9223372036854775808", "clone=99999999999999999999", "resume=9223372036854775807", "clone=-1",
           "clone=0", "clone=abc", "resume=1e400"]  # fmt: skip


@pytest.mark.parametrize("query", BAD_IDS)
def test_new_page_refuses_out_of_range_ids(session_client, query: str) -> None:
    r = session_client.get(f"/new?{query}")
    assert 400 <= r.status_code < 500, (query, r.status_code)


@pytest.mark.parametrize("job_id", ["9223372036854775808", "0", "-5"])
def test_job_page_refuses_out_of_range_ids(session_client, job_id: str) -> None:
    assert 400 <= session_client.get(f"/jobs/{job_id}").status_code < 500
