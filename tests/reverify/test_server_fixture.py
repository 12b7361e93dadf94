"""The loopback resources server and its fixtures behave as the reverify tests rely on (reverify.md §2.4)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.reverify.server_process import ServerProcess, mcqa_response, port_is_free

pytestmark = pytest.mark.timeout(60)


def body(task: int = 0, rollout: int = 0, text: str = "so \\boxed{B}", expected: str = "B") -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Q?"}]},
        "response": mcqa_response(text),
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "agent_ref": {"name": "mcqa_simple_agent"},
        "uuid": "u-1",
        "options": [{"A": "a"}, {"B": "b"}],
        "expected_answer": expected,
        "grading_mode": "strict_single_letter_boxed",
    }


def post(server: ServerProcess, data: Any, timeout: float = 5.0) -> httpx.Response:
    return httpx.post(f"{server.url}/verify", json=data, timeout=timeout, trust_env=False)


def test_reverify_mode_is_a_bare_json_string(resources_server: ServerProcess) -> None:
    response = httpx.get(f"{resources_server.url}/reverify_mode", trust_env=False)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b'"stateless"'
    resources_server.set_mode("bogus", status=503)
    response = httpx.get(f"{resources_server.url}/reverify_mode", trust_env=False)
    assert (response.status_code, response.json()) == (503, "bogus")


def test_verify_grades_and_does_not_echo_dataset_fields(resources_server: ServerProcess) -> None:
    right = post(resources_server, body()).json()
    assert right == {
        "responses_create_params": body()["responses_create_params"],
        "response": body()["response"],
        "reward": 1.0,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None,
        "expected_answer": "B",
        "extracted_answer": "B",
    }
    wrong = post(resources_server, body(text="\\boxed{A} then \\boxed{C}")).json()
    assert (wrong["reward"], wrong["extracted_answer"]) == (0.0, "C")
    strict_letter = post(resources_server, body(text="The answer is B")).json()
    assert (strict_letter["reward"], strict_letter["extracted_answer"]) == (0.0, None)
    lenient = post(
        resources_server, {**body(text="The answer is B."), "grading_mode": "lenient_boxed"}
    ).json()
    assert (lenient["reward"], lenient["extracted_answer"]) == (1.0, "B")


def test_invalid_body_is_422_with_detail(resources_server: ServerProcess) -> None:
    data = body()
    del data["response"]
    response = post(resources_server, data)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "response"]


def test_status_for_first_attempts_then_ok(resources_server: ServerProcess) -> None:
    resources_server.set((0, 1), kind="status", status=429, retry_after=1, times=2)
    first, second, third = (post(resources_server, body(0, 1)) for _ in range(3))
    assert [first.status_code, second.status_code, third.status_code] == [429, 429, 200]
    assert first.headers["retry-after"] == "1"
    assert post(resources_server, body(0, 0)).status_code == 200  # other keys unaffected
    assert resources_server.stats()["requests"]["/verify"] == 4


def test_behaviour_for_all_rows_and_per_key_override(resources_server: ServerProcess) -> None:
    resources_server.set(None, kind="status", status=503)
    resources_server.set((2, 0), kind="ok")
    assert post(resources_server, body(1, 0)).status_code == 503
    assert post(resources_server, body(1, 0)).status_code == 503
    assert post(resources_server, body(2, 0)).status_code == 200
    detail = {"detail": [{"type": "missing", "loc": ["body", "x"], "msg": "Field required"}]}
    resources_server.set((3, 0), kind="status", status=422, body=detail)
    response = post(resources_server, body(3, 0))
    assert (response.status_code, response.json()) == (422, detail)


def test_non_object_and_drop_and_hang(resources_server: ServerProcess) -> None:
    resources_server.set((0, 0), kind="non_object")
    response = post(resources_server, body(0, 0))
    assert (response.status_code, response.json()) == (200, [1])
    resources_server.set((0, 1), kind="drop")
    with pytest.raises(httpx.RemoteProtocolError):
        post(resources_server, body(0, 1))
    resources_server.set((0, 2), kind="hang", hang_s=30)
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post(resources_server, body(0, 2), timeout=0.5)
    assert time.monotonic() - started < 5
    assert post(resources_server, body(0, 3)).status_code == 200  # the server still serves
    deadline = time.monotonic() + 5
    while resources_server.stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert resources_server.stats()["in_flight"] == 0  # the hung request ended with its client


def test_judge_failure_tags(resources_server: ServerProcess) -> None:
    resources_server.set((0, 0), kind="judge_failed", error="judge 401")
    answer = post(resources_server, body(0, 0)).json()
    assert {k: answer[k] for k in ("reward", "mask_sample", "failure_kind", "failure_reason")} == {
        "reward": 0.0,
        "mask_sample": True,
        "failure_kind": "judge_failed",
        "failure_reason": "judge 401",
    }
    assert answer["instance_config"] == {"mask_sample": True}
    assert (answer["_ng_failure_class"], answer["_ng_failure_judge_error"]) == ("judge_failed", "judge 401")
    assert answer["expected_answer"] == "B"  # the request body, then the tags


def test_no_persist_and_invalid_judge(resources_server: ServerProcess) -> None:
    resources_server.set((0, 0), kind="no_persist")
    resources_server.set((0, 1), kind="invalid_judge", retryable=False)
    resources_server.set((0, 2), kind="invalid_judge")
    resources_server.set((0, 3), extra={"reward": 0.25})
    assert post(resources_server, body(0, 0)).json()["_ng_no_persist"] is True
    answer = post(resources_server, body(0, 1)).json()
    assert (answer["invalid_judge_response"], answer["invalid_judge_retryable"]) == (True, False)
    assert "invalid_judge_retryable" not in post(resources_server, body(0, 2)).json()
    assert post(resources_server, body(0, 3)).json()["reward"] == 0.25


def test_log_stats_peak_and_reset(resources_server: ServerProcess) -> None:
    resources_server.set(None, latency_ms=500)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            responses = await asyncio.gather(
                *(client.post(f"{resources_server.url}/verify", json=body(i, 0)) for i in range(5))
            )
        return [r.status_code for r in responses]

    started = time.monotonic()
    assert asyncio.run(burst()) == [200] * 5
    assert time.monotonic() - started >= 0.5
    stats = resources_server.stats()
    assert (stats["peak_in_flight"], stats["in_flight"]) == (5, 0)
    log = resources_server.log("/verify")
    assert sorted(tuple(e["key"]) for e in log) == [(i, 0) for i in range(5)]
    assert log[0]["method"] == "POST" and log[0]["body"]["uuid"] == "u-1" and log[0]["t"] > 0
    resources_server.reset()
    assert resources_server.log() == [] and resources_server.stats()["peak_in_flight"] == 0


def test_aggregate_metrics(resources_server: ServerProcess) -> None:
    rows = [{"_ng_task_index": 0, "_ng_rollout_index": i, "reward": r} for i, r in enumerate([1.0, 0.0])]
    url = f"{resources_server.url}/aggregate_metrics"
    response = httpx.post(url, json={"verify_responses": rows}, trust_env=False)
    answer = response.json()
    assert answer["agent_metrics"]["mean/reward"] == 0.5
    assert list(answer) == [
        "group_level_metrics",
        "agent_metrics",
        "key_metrics",
        "perf_summary",
        "repeat_level_metrics",
        "server",
    ]
    # whole statistics are floats on the wire, counts are ints, keys not sorted
    assert b'"max/reward":1.0' in response.content and b'"num_repeats":2' in response.content
    assert list(answer["key_metrics"]) == ["pass@1/accuracy", "mean/reward"]
    resources_server.set_aggregate(404, {"detail": "Not Found"})
    missing = httpx.post(url, json={"verify_responses": rows}, trust_env=False)
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    resources_server.set_aggregate(None)
    duplicate = httpx.post(url, json={"verify_responses": rows + rows[:1]}, trust_env=False)
    assert duplicate.status_code == 500 and "Duplicate" in duplicate.text


def test_factory_two_servers_and_config_file(
    start_resources_server: Callable[..., ServerProcess], gym_config_file: Callable[..., Path]
) -> None:
    unknown = start_resources_server("unknown")
    stateless = start_resources_server("stateless", latency_ms=1)
    assert httpx.get(f"{unknown.url}/reverify_mode", trust_env=False).json() == "unknown"
    assert httpx.get(f"{stateless.url}/reverify_mode", trust_env=False).json() == "stateless"
    path = gym_config_file(
        {"a": unknown, "b": stateless, "c": {"command": ["x"]}},
        agents={"agent_b": "b"},
        extra={"b": {"grading_mode": "lenient_boxed"}},
    )
    config = yaml.safe_load(path.read_text())
    assert config["a"] == {
        "resources_servers": {"a": {"entrypoint": "app.py", "host": "127.0.0.1", "port": unknown.port}}
    }
    assert config["b"]["resources_servers"]["b"]["grading_mode"] == "lenient_boxed"
    assert config["c"] == {"resources_servers": {"c": {"command": ["x"]}}}
    assert config["agent_b"]["responses_api_agents"]["simple_agent"]["resources_server"]["name"] == "b"
    unknown.stop()
    assert not unknown.alive() and port_is_free(unknown.port)


def test_standalone_with_two_workers(start_resources_server: Callable[..., ServerProcess]) -> None:
    server = start_resources_server("stateless", workers=2, latency_ms=1, no_log=True)
    assert post(server, body()).json()["reward"] == 1.0
    server.stop()
    assert port_is_free(server.port)
