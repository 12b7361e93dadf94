"""Unit tests of the error paths: the /verify client with httpx.MockTransport, routing, keys, options."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import orjson
import pytest

from gymflow.gym_config import RouteError, Routing, resources_server_urls, verifier_block, verifier_sha256
from gymflow.reverify._client import ClientSettings, Request, Result, verify_requests
from gymflow.reverify._inputs import build_body, sent_fields
from gymflow.reverify._results import classify, stamp

pytestmark = pytest.mark.timeout(30)

FAST = ClientSettings(concurrency=4, timeout_s=5.0, max_attempts=3, backoff_base_s=0.01)


def _run(handler: Any, n: int = 1, settings: ClientSettings = FAST) -> list[Result]:
    results: dict[int, Result] = {}
    requests = [Request(f"http://rs.test/{i}/verify", b"{}") for i in range(n)]
    verify_requests(requests, settings, results.__setitem__, lambda _: httpx.MockTransport(handler))
    return [results[i] for i in range(n)]


def test_retry_after_then_success() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return httpx.Response(503, headers={"Retry-After": "0.2"}, text="busy")
        return httpx.Response(200, json={"reward": 1.0})

    [result] = _run(handler)
    assert result.answer == {"reward": 1.0} and len(calls) == 2 and calls[1] - calls[0] >= 0.2


def test_other_4xx_not_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(404, text="no such route")

    [result] = _run(handler)
    assert len(calls) == 1 and result.failure is not None
    assert result.failure["_ng_failure_class"] == "verify_http_error"
    assert result.failure["_ng_failure_http_status"] == 404
    assert result.failure["_ng_failure_response_body"] == "no such route"
    assert result.failure["_ng_failure_attempts"] == 1


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (httpx.ConnectError("refused"), "verify_connection_error"),
        (httpx.ReadTimeout("slow"), "verify_timeout"),
        (httpx.RemoteProtocolError("dropped"), "verify_connection_error"),
    ],
)
def test_transport_errors_retried_then_classified(error: Exception, kind: str) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise error

    [result] = _run(handler)
    assert len(calls) == 3 and result.failure is not None
    assert result.failure["_ng_failure_class"] == kind and result.failure["_ng_failure_attempts"] == 3
    assert result.failure["_ng_failure_http_status"] is None


def test_body_too_long_is_cut_and_invalid_json_detected() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/0"):
            return httpx.Response(500, text="x" * 5000)
        return httpx.Response(200, text="not json")

    first, second = _run(handler, 2, ClientSettings(max_attempts=1))
    assert first.failure is not None and len(first.failure["_ng_failure_response_body"]) == 2000
    assert second.failure is not None and second.failure["_ng_failure_class"] == "verify_invalid_response"


def test_in_flight_bounded() -> None:
    state = {"now": 0, "peak": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return httpx.Response(200, json={})

    results = _run(handler, 40, ClientSettings(concurrency=3))
    assert all(r.answer == {} for r in results) and state["peak"] == 3


def test_per_request_timeout_bounds_a_hang() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json={})

    started = time.monotonic()
    [result] = _run(handler, 1, ClientSettings(timeout_s=0.2, max_attempts=1))
    assert time.monotonic() - started < 5
    assert result.failure is not None and result.failure["_ng_failure_class"] == "verify_timeout"


def test_stamp_and_classify() -> None:
    body = {
        "_ng_task_index": 1,
        "_ng_rollout_index": 2,
        "agent_ref": {"name": "a"},
        "_ng_atif_provenance": {"source_sha256": "s"},
        "uuid": "u",
    }
    row = stamp({"reward": 1.0, "_ng_task_index": 9, "invalid_judge_response": True}, body, "k", True)
    assert list(row) == [  # as 0.7.0 assigns them: the answer's _ng_task_index keeps its place
        "reward", "_ng_task_index", "invalid_judge_response", "_ng_failure_class", "_ng_rollout_index",
        "agent_ref", "_ng_atif_provenance", "_ng_reverify_key",
    ]  # fmt: skip
    assert row["_ng_failure_class"] == "judge_invalid" and row["_ng_task_index"] == 1 and "uuid" not in row
    assert classify(row, atif=False) == "sidecar"
    assert classify({"_ng_no_persist": True}, atif=False) == "none"
    killed: dict[str, Any] = {"_ng_no_persist": True}
    assert classify(killed, atif=True) == "sidecar" and killed["_ng_failure_class"] == "kill_shaped"
    assert classify({"_ng_failure_class": None, "reward": 0.0}, atif=False) == "output"


CONFIG: dict[str, Any] = {
    "rs_a": {"resources_servers": {"mcqa": {"host": "127.0.0.1", "port": 1, "grading_mode": "x"}}},
    "rs_b": {"resources_servers": {"mcqa": {"base_url": "http://b.test:9/", "host": "h", "port": 2}}},
    "env": {"environment_servers": {"e": {"resources_server": {"name": "rs_b"}}}},
    "agent_a": {"responses_api_agents": {"simple_agent": {"resources_server": {"name": "rs_a"}}}},
    "no_server_agent": {"responses_api_agents": {"simple_agent": {"model": "m"}}},
}


def test_routing_rules_in_order() -> None:
    routing = Routing.of(CONFIG)
    assert routing.route_row({"task_source": "rs_b", "agent_ref": {"name": "agent_a"}}) == "rs_b"
    assert routing.route_row({"_ng_environment_server": "env", "agent_ref": {"name": "agent_a"}}) == "rs_b"
    assert routing.route_row({"agent_ref": {"name": "agent_a"}}) == "rs_a"
    with pytest.raises(RouteError, match=r"Known agents: \['agent_a'\]\.$"):
        routing.route_row({"agent_ref": {"name": "no_server_agent"}, "task_source": "nope"})
    assert resources_server_urls(CONFIG) == {"rs_a": "http://127.0.0.1:1", "rs_b": "http://b.test:9"}


def test_verifier_identity_ignores_addresses() -> None:
    assert verifier_block(CONFIG, "rs_b") == {"mcqa": {}}
    moved = {
        **CONFIG,
        "rs_a": {"resources_servers": {"mcqa": {"host": "10.0.0.1", "port": 7, "grading_mode": "x"}}},
    }
    assert verifier_sha256(moved, "rs_a") == verifier_sha256(CONFIG, "rs_a")
    changed = {**CONFIG, "rs_a": {"resources_servers": {"mcqa": {"grading_mode": "y"}}}}
    assert verifier_sha256(changed, "rs_a") != verifier_sha256(CONFIG, "rs_a")


def test_the_output_is_sorted_stably_after_the_append_prefix(tmp_path: Any) -> None:
    """Rows appended near their sorted place, some far from it, the last without a newline, after
    an --append prefix that stays first as it was: one stable sorted rewrite."""
    import json
    import random

    from gymflow.reverify import _finish

    rng = random.Random(3)
    keys = [(task, rollout) for task in range(60) for rollout in range(3)]
    order = sorted(range(len(keys)), key=lambda i: i + rng.randint(0, 20))  # near their place
    order[5], order[-5] = order[-5], order[5]  # and two far from it
    rows = [
        {"_ng_task_index": keys[i][0], "_ng_rollout_index": keys[i][1], "pad": "x" * rng.randint(0, 90)}
        for i in order
    ]
    rows.append({"_ng_task_index": 0, "_ng_rollout_index": 0, "pad": "duplicate key keeps its place"})
    prefix = b'{"kept": "before"}\n{"_ng_task_index": 99, "_ng_rollout_index": 0}\n'
    body = b"".join(json.dumps(row).encode() + b"\n" for row in rows).rstrip(b"\n")
    path = tmp_path / "out.jsonl"
    path.write_bytes(prefix + body)
    assert _finish._sort_file(str(path), len(prefix)) == len(rows) + 2
    expected = sorted(rows, key=lambda row: (row["_ng_task_index"], row["_ng_rollout_index"]))  # stable
    assert path.read_bytes() == prefix + b"".join(json.dumps(row).encode() + b"\n" for row in expected)


def test_a_stream_verifies_batch_after_batch_on_one_loop_in_its_starters_context() -> None:
    """The Prefect path's batches share one loop and sender (reverify._client.Stream); the rows
    are built there, in the context of the run that started it (its storage options)."""
    import contextvars
    import threading

    from gymflow.reverify._client import Stream

    run_setting: contextvars.ContextVar[str] = contextvars.ContextVar("run_setting", default="unset")
    run_setting.set("the run's")
    transports: list[int] = []

    def transport(size: int) -> httpx.AsyncBaseTransport:
        transports.append(size)
        return httpx.MockTransport(lambda request: httpx.Response(200, json={"reward": 1.0}))

    seen: list[tuple[int, str, str]] = []

    def items(start: int) -> Any:
        for i in range(start, start + 5):
            seen.append((i, run_setting.get(), threading.current_thread().name))
            yield i, Request(f"http://rs.test/{i}/verify", b"{}")

    results: dict[int, Result] = {}
    with Stream(FAST, transport, tls=False) as stream:
        stream.verify(items(0), results.__setitem__)
        stream.verify(items(5), results.__setitem__)
    assert sorted(results) == list(range(10)) and all(r.answer == {"reward": 1.0} for r in results.values())
    assert transports == [FAST.concurrency]  # one sender for both batches
    assert {(setting, thread) for _, setting, thread in seen} == {("the run's", "gymflow-verify")}


_SENT_LINES = [
    b'{"_ng_task_index":0,"_ng_rollout_index":1,"response":{"id":"r","output":[]},"reward":1.0}',
    # json.dumps spacing and escapes, fields a body takes from the rollout, the response not last
    json.dumps(
        {
            "response": {"output": [{"text": "d\u00e9j\u00e0 \u2028 \U0001f680", "n": 2.5e-7}]},
            "reference_ids": [3],
            "deliverables_dir": "/d",
            "reward": 0,
            "big": 18446744073709551615,
        },
        ensure_ascii=True,
    ).encode(),
    b'{"response":null,"response":{"again":true}}',  # a repeated key: the last one, as orjson reads it
    b'{"response":"x","deep":' + b"[" * 250 + b"]" * 250 + b"}",  # deeper than the agreement check
    b'{"response":{"s":"\\ud83d\\ude80"}}',  # a surrogate pair escaped
]


@pytest.mark.parametrize("line", _SENT_LINES)
def test_a_body_sends_the_response_as_the_line_holds_it(line: bytes) -> None:
    """The body built from the line's own response text reads back as the body built from the
    whole parsed row, key for key and in the same order."""
    materialized = {"responses_create_params": {"input": []}, "_ng_task_index": 0, "expected_answer": "A"}
    fast = orjson.loads(orjson.dumps(build_body(materialized, sent_fields(line))))
    exact = build_body(materialized, orjson.loads(line))
    assert fast == exact and list(fast) == list(exact)
