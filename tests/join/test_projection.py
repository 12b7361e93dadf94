"""Projection: evidence.md §13 C28-C42 (C27 and C41 are the appendix cases in test_appendix.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gymflow.evidence.conversation import conversation_item
from gymflow.join import join_row
from tests.join.helpers import JUDGE, L, answer, bundle, codes, gap_tuples, inv, join, jsonl, ref, row, store

OWN = "model_call_ownership_unavailable"
FINAL = ["model_calls_unavailable", "turns_unavailable", "conversation_unavailable"]


def _producer(**fields: Any) -> dict[str, Any]:
    return {"task_id": "1", "rollout_id": "1-0", **fields}


def test_c28_producer_turns_are_kept_and_refs_not_canonicalized() -> None:
    producer = _producer(
        invocations=[{"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}]}], turns=[]
    )
    out = join(row(1, 0, ng_trajectory=producer), store(**{"1-0": jsonl(L("c1"))}))
    trajectory = out["ng_trajectory"]
    assert trajectory["turns"] == []
    assert "turns_unavailable" not in codes(trajectory["gaps"])
    assert trajectory["invocations"][0]["model_calls"] == [
        {"model_call_id": "c1", "model_ref": None, "response_id": None}
    ]
    assert out["ng_perf"]["num_turns"] == 1 and out["ng_perf"]["token_observability_coverage"] == 1.0


def test_c29_unreferenced_call_gives_no_turn() -> None:
    out = join(row(1, 0, ng_agent_observations=bundle(inv("root"))), store(**{"1-0": jsonl(L("c1"))}))
    trajectory = out["ng_trajectory"]
    assert trajectory["turns"] == []
    assert gap_tuples(trajectory["gaps"]) == [
        (OWN, None, "capture:c1:call_index=0"),
        ("turns_unavailable", None, None),
        ("conversation_unavailable", None, None),
    ]
    assert out["ng_perf"] == {"num_turns": 1, "num_tool_calls": 0, "token_observability_coverage": 0.0}


def test_c30_failed_call_and_judge_call() -> None:
    lines = [
        L("fail", response=None, status_code=504, error_category="timeout"),
        L("pol", usage={"input_tokens": 10, "output_tokens": 2}, started=2.0),
        L("judge", ref=JUDGE, started=3.0),
    ]
    out = join(
        row(1, 0, ng_agent_observations=bundle(inv("root", ref("fail"), ref("pol")))),
        store(**{"1-0": jsonl(*lines)}),
    )
    trajectory = out["ng_trajectory"]
    assert [t["model_calls"][0]["model_call_id"] for t in trajectory["turns"]] == ["pol"]
    assert (OWN, None, "capture:judge:call_index=2") in gap_tuples(trajectory["gaps"])
    assert out["ng_perf"] == {
        "num_turns": 1,
        "num_tool_calls": 0,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 10,
        "completion_tokens": 2,
    }


def test_c31_chat_and_anthropic_turn_content() -> None:
    messages = [{"role": "user", "content": "hi"}]
    chat = {
        "id": "cc",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "yo",
                    "reasoning": "hmm",
                    "reasoning_content": None,
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    anthropic = {
        "id": "msg",
        "type": "message",
        "content": [{"type": "text", "text": "yo"}],
        "stop_reason": "end_turn",
    }
    lines = [
        L("c1", response=chat, request={"model": "m", "messages": messages}, dialect="chat"),
        L("c2", response=anthropic, request={"messages": messages}, dialect="messages", started=2.0),
    ]
    out = join(
        row(1, 0, ng_agent_observations=bundle(inv("root", ref("c1"), ref("c2")))),
        store(**{"1-0": jsonl(*lines)}),
    )
    first, second = out["ng_trajectory"]["turns"]
    assert first["answer"] == {"role": "assistant", "content": "yo"}
    assert first["reasoning_content"] == "hmm"
    assert first["question"] == messages
    assert (second["answer"], second["reasoning_content"], second["question"]) == (None, None, messages)


def test_c32_turns_follow_capture_order_with_step_counts() -> None:
    two_tools = {
        "id": "r1",
        "status": "completed",
        "output": [
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        ],
    }
    lines = [L("c1", response=two_tools, started=300.0), L("c2", started=200.0), L("c3", started=100.0)]
    records = [inv("root", ref("c1"), ref("c3")), inv("sub", ref("c2"), parent_invocation_id="root")]
    out = join(
        row(1, 0, resolved=True, ng_agent_observations=bundle(*records)), store(**{"1-0": jsonl(*lines)})
    )
    turns = out["ng_trajectory"]["turns"]
    assert [
        (t["invocation_id"], t["turn_no"], t["step_count"], t["resolved"], t["timestamp"]) for t in turns
    ] == [
        ("root", 1, 0, None, 300.0),
        ("sub", 1, 0, None, 200.0),
        ("root", 2, 2, True, 100.0),
    ]


def test_c33_producer_identity_mismatch() -> None:
    producer = {
        "task_id": "other",
        "rollout_id": "9-9",
        "invocations": [{"invocation_id": "root"}],
        "turns": [
            {
                "invocation_id": "root",
                "task_id": "other",
                "rollout_id": "9-9",
                "turn_no": 2,
                "timestamp": 5.0,
                "step_count": 0,
            },
            {
                "invocation_id": "root",
                "task_id": "other",
                "rollout_id": "9-9",
                "turn_no": 1,
                "timestamp": 1.0,
                "step_count": 0,
            },
        ],
    }
    trajectory = join(row(1, 0, ng_trajectory=producer), store())["ng_trajectory"]
    assert gap_tuples(trajectory["gaps"])[0] == (
        "producer_trajectory_identity_mismatch",
        None,
        "task_id,rollout_id",
    )
    assert [(t["turn_no"], t["task_id"], t["rollout_id"]) for t in trajectory["turns"]] == [
        (1, "1", "1-0"),
        (2, "1", "1-0"),
    ]
    assert (trajectory["task_id"], trajectory["rollout_id"]) == ("1", "1-0")


def test_c34_invalid_producer_trajectory() -> None:
    out = join(
        row(1, 0, ng_trajectory=_producer(surprise=1), ng_agent_observations=bundle(inv("root", ref("c1")))),
        store(**{"1-0": jsonl(L("c1"))}),
    )
    trajectory = out["ng_trajectory"]
    assert gap_tuples(trajectory["gaps"])[0] == ("producer_trajectory_invalid", None, "ValidationError")
    assert trajectory["turns"] == []
    assert "turns_unavailable" in codes(trajectory["gaps"])


def _tool(tool_call_id: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "tool_call", "invocation_id": "root", "tool_call_id": tool_call_id, **fields}


def test_c35_tool_join() -> None:
    producer = _producer(
        invocations=[{"invocation_id": "root"}],
        turns=[],
        tool_calls=[
            _tool("p-only", status="completed"),
            _tool("t-fail", status="failed"),
            _tool("t-stale", status="completed", output="stale"),
        ],
    )
    conversation = [
        {"type": "function_call_output", "call_id": "t-stale", "output": "fresh"},
        {"type": "function_call_output", "call_id": "t-new", "output": "new"},
    ]
    observed = bundle(
        inv("root", conversation=conversation),
        _tool("t-fail", duration_ms=5),
        _tool("t-stale"),
        _tool("t-new", status="completed"),
        _tool("t-none", tool_name="x"),
    )
    tools = join(row(1, 0, ng_trajectory=producer, ng_agent_observations=observed), store())["ng_trajectory"][
        "tool_calls"
    ]
    assert [(t["tool_call_id"], t["status"], t["output"]) for t in tools] == [
        ("p-only", "completed", None),
        ("t-fail", "failed", None),
        ("t-stale", "completed", "fresh"),
        ("t-new", "completed", "new"),
        ("t-none", "unknown", None),
    ]
    assert tools[1]["duration_ms"] == 5.0 and tools[4]["tool_name"] == "x"
    assert list(tools[3]) == [
        "kind",
        "invocation_id",
        "tool_call_id",
        "sandbox_id",
        "tool_name",
        "started_at",
        "completed_at",
        "duration_ms",
        "timing_source",
        "status",
        "error_type",
        "output",
    ]
    no_tools = join(
        row(
            1, 0, ng_trajectory=producer, ng_agent_observations=bundle(inv("root", conversation=conversation))
        ),
        store(),
    )
    assert [t["output"] for t in no_tools["ng_trajectory"]["tool_calls"]] == [None, None, "stale"]


def test_c36_capture_calls_merge_into_producer_calls() -> None:
    producer = _producer(
        invocations=[{"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}]}],
        turns=[],
        model_calls=[
            {"model_call_id": "producer-only"},
            {
                "model_call_id": "c1",
                "request": "old",
                "response_metadata": {"model": "old-model"},
                "token_stats": {"prompt_tokens": 1, "reasoning_tokens": 9},
            },
        ],
    )
    lines = [L("c1", request={"model": "m", "input": "new"}), L("c2", started=2.0)]
    calls = join(row(1, 0, ng_trajectory=producer), store(**{"1-0": jsonl(*lines)}))["ng_trajectory"][
        "model_calls"
    ]
    assert [c["model_call_id"] for c in calls] == ["producer-only", "c1", "c2"]
    c1 = calls[1]
    assert c1["request"] == {"model": "m", "input": "new"}
    assert c1["response_metadata"]["model"] == "m"
    assert c1["token_stats"] == {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "reasoning_tokens": 9,
        "total_tokens": 7,
        "cached_tokens": None,
    }


def test_c37_negative_latency_fails_the_projection() -> None:
    original = row(
        1,
        0,
        reward=1.0,
        ng_agent_observations=bundle(inv("root", ref("c1"))),
        ng_perf={"total_latency_ms": 5},
    )
    out = join(original, store(**{"1-0": jsonl(L("c1", latency=-1))}))
    assert "ng_trajectory" not in out and "ng_perf" not in out
    capture = out["ng_model_call_capture"]
    assert capture["gaps"] == [{"code": "trajectory_projection_failed", "detail": "ValidationError"}]
    assert capture["calls"][0]["request"] is not None and capture["calls"][0]["response"] is not None
    assert out["reward"] == 1.0 and out["ng_agent_observations"]["records"][0]["invocation_id"] == "root"


def test_c38_minimal_trajectory_when_gaps_is_not_a_list() -> None:
    capture = {
        "rollout_id": "1-0",
        "calls": [{"model_call_id": "x", "latency_total_ms": -5}],
        "gaps": "notalist",
    }
    out = join_row(row(1, 0, ng_model_call_capture=capture), None)
    assert out["ng_trajectory"] == {
        "schema_version": "1.0",
        "task_id": "1",
        "rollout_id": "1-0",
        "invocations": [],
        "turns": [],
        "model_calls": [],
        "tool_calls": [],
        "gaps": [
            {"code": "trajectory_projection_failed", "invocation_id": None, "detail": "ValidationError"}
        ],
    }
    assert out["ng_model_call_capture"] == capture


def test_c39_capture_gaps_are_validated() -> None:
    capture = {
        "rollout_id": "1-0",
        "calls": [],
        "gaps": [{"code": 5}, {"code": "x", "extra": 1}, "str", {"code": "ok"}],
    }
    trajectory = join_row(row(1, 0, ng_model_call_capture=capture), None)["ng_trajectory"]
    assert codes(trajectory["gaps"]) == ["model_call_capture_gap_invalid", "ok", *FINAL]


@pytest.mark.parametrize("marker", [{"_ng_failure_class": "agent_run_error"}, {"_ng_dispatch_drained": True}])
def test_c40_no_result_rows_are_not_merged(marker: dict[str, Any]) -> None:
    original = row(1, 0, reward=0.0, **marker)
    assert join(original, store(**{"1-0": jsonl(L("c1"))})) == original


def test_c40_garbage_trajectory_is_treated_as_absent() -> None:
    out = join(
        row(1, 0, ng_trajectory="garbage", ng_agent_observations=bundle(inv("root", ref("c1")))),
        store(**{"1-0": jsonl(L("c1"))}),
    )
    trajectory = out["ng_trajectory"]
    assert isinstance(trajectory, dict) and len(trajectory["turns"]) == 1
    assert list(out)[2] == "ng_trajectory"  # replaced in place


def test_c42_untyped_unclassifiable_item_becomes_mcp_list_tools() -> None:
    out = join(row(1, 0, ng_agent_observations=bundle(inv("root", conversation=[{"foo": "bar"}]))), store())
    assert out["ng_trajectory"]["invocations"][0]["conversation"] == [
        {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None, "foo": "bar"}
    ]


@pytest.mark.parametrize(
    ("item", "dumped"),
    [
        (
            {"role": "user", "content": "hi"},
            {"content": "hi", "role": "user", "type": "message", "phase": None},
        ),
        (
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}], "status": "completed"},
            {
                "content": [{"type": "input_text", "text": "hi"}],
                "role": "user",
                "status": "completed",
                "type": "message",
            },
        ),
        (
            {"type": "message", "role": "assistant", "id": "m1", "content": answer()[0]["content"]},
            {
                "id": "m1",
                "content": [{**answer()[0]["content"][0], "logprobs": None}],
                "role": "assistant",
                "status": "completed",
                "type": "message",
                "phase": None,
            },
        ),
        (
            {"call_id": "t", "name": "f", "arguments": "{}"},
            {
                "arguments": "{}",
                "call_id": "t",
                "name": "f",
                "type": "function_call",
                "id": None,
                "status": None,
                "namespace": None,
            },
        ),
        (
            {"call_id": "t", "output": "42"},
            {"call_id": "t", "output": "42", "type": "function_call_output", "id": None, "status": None},
        ),
        (
            {"id": "rs", "summary": []},
            {"id": "rs", "summary": [], "type": "reasoning", "encrypted_content": None, "content": None},
        ),
        (
            {"type": "web_search_call", "id": "w", "status": "completed"},
            {"type": "web_search_call", "id": "w", "status": "completed"},
        ),
    ],
)
def test_conversation_items_dump_like_0_7_0(item: dict[str, Any], dumped: dict[str, Any]) -> None:
    result = conversation_item(item)
    assert result == dumped and list(result) == list(dumped)


def test_projection_never_changes_its_input() -> None:
    import copy

    original = row(
        1,
        0,
        ng_agent_observations=bundle(inv("root", ref("c1")), gaps=[{"code": "x"}]),
        ng_perf={"total_latency_ms": 1},
    )
    snapshot = copy.deepcopy(original)
    join(original, store(**{"1-0": jsonl(L("c1", latency=-1))}))
    join(original, store(**{"1-0": jsonl(L("c1"))}))
    join_row({"ng_agent_observations": original["ng_agent_observations"]}, None)
    assert original == snapshot
