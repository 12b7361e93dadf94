"""Health spec §10, H35-H56: turn content, per-call checks, token totals, runaway, chains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.health.builders import JUDGE, call, health, record, trajectory, turn

LENGTH = {"finish_reason": "length"}


def test_h35_hollow_turns_without_references(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(answer=None, refs=[]), turn(answer="  ", refs=[], turn_no=2)])
    out = health(tmp_path, [record(traj=traj)])
    assert out.checks() == ["rollout_missing_agent_turns", "agent_turn_hollow", "agent_turn_hollow"]
    assert [f["locator"] for f in out.findings("agent_turn_hollow")] == [{"turn": 1}, {"turn": 2}]
    assert out.findings("agent_turn_hollow")[0]["detail"] == {
        "reason": "agent turn has no message or tool calls"
    }
    assert out.row()["unobserved"] == [
        "model_call_zero_completion_tokens",
        "model_call_missing_token_counts",
        "trajectory_capture_mismatch",
        "model_call_failed",
        "rollout_token_count_mismatch",
        "model_call_runaway_generation",
    ]


def test_h36_reference_counts_as_activity_but_not_as_content(tmp_path: Path) -> None:
    summary = {"summary": [{"type": "summary_text", "text": "thinking"}]}
    out = health(
        tmp_path,
        [
            record(0, traj=trajectory(turns=[turn(answer=None)])),
            record(1, traj=trajectory(turns=[turn(answer=None, reasoning_content=summary)])),
        ],
    )
    assert out.checks(0) == ["agent_turn_hollow"]
    assert out.row(1)["verdict"] == "healthy"


def test_h37_tool_calls_in_answers(tmp_path: Path) -> None:
    not_hollow: list[Any] = [
        [{"type": "function_call"}],
        {"tool_calls": [{"id": "t"}]},
        {"type": "refusal", "refusal": "no"},
        [[{"type": "tool_use"}]],
    ]
    hollow: list[Any] = [42, {"thinking": "x"}, {"content": [{"type": "function_call"}]}]
    answers = not_hollow + hollow
    out = health(
        tmp_path, [record(i, traj=trajectory(turns=[turn(answer=a)])) for i, a in enumerate(answers)]
    )
    assert [r["verdict"] for r in out.rows] == ["healthy"] * 4 + ["unhealthy"] * 3
    for i in range(4, 7):
        assert out.checks(i) == ["agent_turn_hollow"]


def test_h38_zero_completion_tokens(tmp_path: Path) -> None:
    out = health(tmp_path, [record(usage=(3, 0), traj=trajectory(calls=[call(completion=0)]))])
    assert out.row()["findings"] == [
        {
            "check": "model_call_zero_completion_tokens",
            "locator": {"call_id": "c1"},
            "detail": {"completion_tokens": 0},
        }
    ]


def test_h39_missing_token_counts(tmp_path: Path) -> None:
    traj = trajectory()
    traj["model_calls"][0]["token_stats"] = {}
    out = health(tmp_path, [record(traj=traj)])
    assert out.findings("model_call_missing_token_counts")[0]["detail"] == {
        "missing": ["prompt_tokens", "completion_tokens"]
    }
    assert out.row()["unobserved"] == ["rollout_token_count_mismatch"]


def test_h40_failure_predicates_and_status_buckets(tmp_path: Path) -> None:
    calls = [
        call("c1", "r1", status=399),
        call("c2", "r2", status=None, response_status="cancelled"),
        call("c3", "r3", status=None, response_status="incomplete"),
        call("c4", "r4", status=200, error_category="timeout"),
        call("c5", "r5", status=None, response_status="error"),
        call("c6", "r6", status=408, error_category="timeout"),
    ]
    refs = [{"model_call_id": f"c{i}"} for i in range(1, 7)]
    out = health(tmp_path, [record(usage=(18, 12), traj=trajectory(turns=[turn(refs=refs)], calls=calls))])
    failed = out.findings("model_call_failed")
    assert [(f["locator"]["call_id"], f["detail"]["terminal"]) for f in failed] == [
        ("c2", False),
        ("c4", False),
        ("c5", False),
        ("c6", True),
    ]
    assert out.run["stats"]["model_call_errors"]["by_status"] == {"200": 1, "408": 1, "unknown": 2}
    assert out.findings("rollout_ended_on_failed_model_call") == []


def test_h41_all_failed_chain_reports_last_call(tmp_path: Path) -> None:
    calls = [call("c1", "r1", status=500), call("c2", "r2", status=500)]
    refs = [{"model_call_id": "c2"}, {"model_call_id": "c1"}]
    out = health(tmp_path, [record(usage=(6, 4), traj=trajectory(turns=[turn(refs=refs)], calls=calls))])
    assert [
        (f["locator"]["call_id"], f["detail"]["terminal"]) for f in out.findings("model_call_failed")
    ] == [
        ("c1", False),
        ("c2", True),
    ]
    (ended,) = out.findings("rollout_ended_on_failed_model_call")
    assert ended["locator"] == {"call_id": "c2"}
    assert ended["detail"]["observed_calls"] == 2


def test_h42_token_mismatch(tmp_path: Path) -> None:
    out = health(tmp_path, [record(usage=(99, 2))])
    assert out.row()["findings"] == [
        {
            "check": "rollout_token_count_mismatch",
            "detail": {
                "transcript_prompt": 99,
                "transcript_completion": 2,
                "capture_prompt": 3,
                "capture_completion": 2,
            },
        }
    ]


def test_h43_usage_that_does_not_count(tmp_path: Path) -> None:
    records = [
        record(0, usage=None),
        record(1, response={"usage": {"input_tokens": 3.0, "output_tokens": 2}}),
        record(2, response={"usage": {"input_tokens": True, "output_tokens": 2}}),
        record(3, response={"usage": {"input_tokens": None, "prompt_tokens": 3, "output_tokens": 2}}),
        record(4, response="text"),
    ]
    out = health(tmp_path, records)
    for row in out.rows:
        assert row["unobserved"] == ["rollout_token_count_mismatch"]
    assert out.run["stats"]["tokens"]["prompt"] == 0


def test_h44_prompt_and_completion_token_names(tmp_path: Path) -> None:
    out = health(tmp_path, [record(response={"usage": {"prompt_tokens": 3, "completion_tokens": 5}})])
    assert out.findings("rollout_token_count_mismatch")[0]["detail"]["transcript_completion"] == 5


def test_h45_support_and_judge_calls_stay_outside_token_totals(tmp_path: Path) -> None:
    support = trajectory(
        calls=[call(), call("s1", "rs", prompt=5, completion=3)],
        invocations=[{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "s1"}]}],
    )
    judge = trajectory(calls=[call(), call("j1", "rj", prompt=50, completion=50, model_ref=JUDGE)])
    out = health(tmp_path / "a", [record(traj=support)])
    assert out.row()["verdict"] == "healthy"
    out = health(tmp_path / "b", [record(traj=judge)])
    assert out.row()["verdict"] == "healthy"
    assert out.run["stats"]["tokens"]["capture_prompt"] == 53


def test_h46_length_limited_empty_response(tmp_path: Path) -> None:
    reasons = ["length", "max_output_tokens", "max_tokens", "content_filter"]
    out = health(
        tmp_path,
        [
            record(i, traj=trajectory(calls=[call(response={}, finish_reason=r)]))
            for i, r in enumerate(reasons)
        ],
    )
    for i, reason in enumerate(reasons[:3]):
        assert out.findings("model_call_runaway_generation", i) == [
            {
                "check": "model_call_runaway_generation",
                "locator": {"call_id": "c1"},
                "detail": {"finish_reason": reason},
            }
        ]
    assert out.row(3)["verdict"] == "healthy"


def test_h47_length_limited_with_content_is_healthy(tmp_path: Path) -> None:
    responses = [
        {"output_text": "x"},
        {"content": "x"},
        {"choices": [{"message": {"content": "x"}}]},
        {"choices": [{"text": "x"}]},
        {"output": [{"type": "reasoning", "summary": [{"text": "x"}]}]},
        {"output": [{"type": "reasoning", "encrypted_content": "abc"}]},
        {"output": {"text": "x"}},
    ]
    out = health(
        tmp_path,
        [record(i, traj=trajectory(calls=[call(response=r, **LENGTH)])) for i, r in enumerate(responses)],
    )
    assert [row["verdict"] for row in out.rows] == ["healthy"] * len(responses)


def test_h48_length_limited_without_recognised_content(tmp_path: Path) -> None:
    responses: list[Any] = [
        {"choices": [{"message": {"reasoning_content": "x"}}]},
        {"content_blocks": [{"type": "thinking", "thinking": "x"}]},
        {"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        {"reasoning": "x"},
        "some text",
        {"choices": "abc"},
    ]
    out = health(
        tmp_path,
        [record(i, traj=trajectory(calls=[call(response=r, **LENGTH)])) for i, r in enumerate(responses)],
    )
    for i in range(len(responses)):
        assert out.checks(i) == ["model_call_runaway_generation"], responses[i]


def test_h49_null_length_limited_response_masks_the_check(tmp_path: Path) -> None:
    calls = [call("c1", "r1", response={}, **LENGTH), call("c2", "r2", **LENGTH)]
    calls[1]["response"] = None
    refs = [{"model_call_id": "c1"}, {"model_call_id": "c2"}]
    out = health(tmp_path, [record(usage=(6, 4), traj=trajectory(turns=[turn(refs=refs)], calls=calls))])
    assert "model_call_runaway_generation" in out.row()["unobserved"]
    assert out.findings("model_call_runaway_generation") == []


def test_h50_id_less_failures_form_one_chain(tmp_path: Path) -> None:
    calls = [call(None, None, status=403, error_category="auth") for _ in range(3)]
    out = health(tmp_path, [record(traj=trajectory(turns=[turn(refs=[])], calls=calls))])
    assert out.findings("rollout_ended_on_failed_model_call") == [
        {
            "check": "rollout_ended_on_failed_model_call",
            "locator": {"call_id": "2"},
            "detail": {
                "model_ref": "responses_api_models/policy",
                "status": 403,
                "error_category": "auth",
                "observed_calls": 3,
                "successful_calls": 0,
            },
        }
    ]
    assert "model_call_failed" in out.row()["unobserved"]


def _chain(*calls: dict[str, Any]) -> dict[str, Any]:
    return record(traj=trajectory(turns=[turn(refs=[])], calls=list(calls)))


def test_h51_recovered_or_unorderable_chains_did_not_end_on_failure(tmp_path: Path) -> None:
    records = [
        _chain(call(None, None, status=429, started_at=1), call(None, None, status=200, started_at=2)),
        _chain(call(None, None, status=200, started_at=2), call(None, None, status=500, started_at=1)),
        _chain(call(None, None, status=500), call(None, None, status=200)),
        _chain(call(None, None, status=500, started_at=1), call(None, None, status=200, started_at=1)),
    ]
    for i, rec in enumerate(records):
        rec["_ng_task_index"] = i
    out = health(tmp_path, records)
    for i in range(4):
        assert out.findings("rollout_ended_on_failed_model_call", i) == []
    assert out.run["stats"]["model_call_errors"]["ended_on_error"] == 0


def test_h52_ordered_chain_ending_on_failure(tmp_path: Path) -> None:
    first = _chain(
        call(None, None, status=200, started_at=1),
        call(None, None, status=500, started_at=2, error_category="upstream"),
    )
    second = _chain(call(None, None, status=100, started_at=1), call(None, None, status=500, started_at=2))
    second["_ng_task_index"] = 1
    out = health(tmp_path, [first, second])
    (ended,) = out.findings("rollout_ended_on_failed_model_call", 0)
    assert ended["locator"] == {"call_id": "1"}
    assert ended["detail"]["successful_calls"] == 1
    assert out.findings("rollout_ended_on_failed_model_call", 1)[0]["detail"]["successful_calls"] == 0


def test_h53_chains_are_per_model_server(tmp_path: Path) -> None:
    one = _chain(
        call(None, None, status=403, started_at=1), call(None, "j", status=200, started_at=2, model_ref=JUDGE)
    )
    two = _chain(
        call(None, "j", status=500, started_at=2, model_ref=JUDGE), call(None, None, status=403, started_at=1)
    )
    two["_ng_task_index"] = 1
    out = health(tmp_path, [one, two])
    assert [f["detail"]["model_ref"] for f in out.findings("rollout_ended_on_failed_model_call", 0)] == [
        "responses_api_models/policy"
    ]
    assert [f["detail"]["model_ref"] for f in out.findings("rollout_ended_on_failed_model_call", 1)] == [
        "responses_api_models/judge",
        "responses_api_models/policy",
    ]


def test_h54_failing_call_without_model_ref(tmp_path: Path) -> None:
    out = health(tmp_path, [_chain(call(None, None, status=500, model_ref=None))])
    assert out.findings("rollout_ended_on_failed_model_call")[0]["detail"]["model_ref"] is None


def test_h55_malformed_tool_type_is_a_check_execution_error(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(answer={"type": ["x"]})], calls=[call(status=500)])
    out = health(tmp_path, [record(traj=traj)])
    assert out.checks() == [
        "check_execution_error",
        "rollout_ended_on_failed_model_call",
        "check_execution_error",
        "model_call_failed",
    ]
    assert [f["detail"] for f in out.findings("check_execution_error")] == [
        {
            "reason": "check raised an unexpected exception",
            "failed_check": "rollout_missing_agent_turns",
            "error": "TypeError",
        },
        {
            "reason": "check raised an unexpected exception",
            "failed_check": "agent_turn_hollow",
            "error": "TypeError",
        },
    ]
    assert out.row()["unobserved"] == ["rollout_missing_agent_turns", "agent_turn_hollow"]


def test_h56_malformed_choices(tmp_path: Path) -> None:
    responses: list[Any] = [
        {"choices": 5},
        {"choices": True},
        {"choices": [{"message": "hi"}]},
        {"output_text": "x", "choices": 5},
    ]
    out = health(
        tmp_path,
        [record(i, traj=trajectory(calls=[call(response=r, **LENGTH)])) for i, r in enumerate(responses)],
    )
    errors = [[f["detail"]["error"] for f in out.findings("check_execution_error", i)] for i in range(3)]
    assert errors == [["TypeError"], ["TypeError"], ["AttributeError"]]
    assert out.row(3)["verdict"] == "healthy"
