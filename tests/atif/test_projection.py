"""reverify.md §3.7 (items 63-65): the projected ``/verify`` body, ids, request fields and usage.

Golden ids and item shapes were observed with NeMo Gym 0.7.0 on the same trajectories.
"""

from __future__ import annotations

import json
from typing import Any

from gymflow.atif.content_hash import content_sha256
from gymflow.atif.profile import parse_trajectory
from tests.atif.builders import changed, materialized_row, text_trajectory, tool_trajectory
from tests.atif.test_shapes import project, rejection


def response(doc: dict[str, Any], **params: Any) -> dict[str, Any]:
    row = materialized_row()
    row["responses_create_params"].update(params)
    body = project(doc, row)
    assert body["responses_create_params"] == row["responses_create_params"]
    return dict(body["response"])


def test_text_trajectory_golden() -> None:
    doc = text_trajectory(
        steps=[
            {"step_id": 1, "source": "user", "message": "Which letter?"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "A",
                "metrics": {"prompt_tokens": 120, "completion_tokens": 30},
            },
        ],
        final_metrics={"total_prompt_tokens": 120, "total_completion_tokens": 30},
    )
    row = materialized_row()
    body = project(doc, row)
    assert list(body) == [*row, "response"]
    assert {k: v for k, v in body.items() if k != "response"} == row
    got = body["response"]
    assert got["id"] == "atif_0ea9136368c2aec407b0"
    assert got["output"] == [
        {
            "id": "atif_d4e6ec27e8634a46416d",
            "content": [{"annotations": [], "text": "A", "type": "output_text", "logprobs": None}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
            "phase": None,
        }
    ]
    assert got["usage"] == {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": None},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": None},
        "total_tokens": 150,
    }
    assert list(got) == [
        "id", "created_at", "error", "incomplete_details", "instructions", "metadata", "model", "object",
        "output", "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p", "background",
        "completed_at", "conversation", "max_output_tokens", "max_tool_calls", "moderation",
        "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_retention", "reasoning",
        "safety_identifier", "service_tier", "status", "text", "top_logprobs", "truncation", "usage", "user",
    ]  # fmt: skip
    assert (got["object"], got["status"], got["model"], got["created_at"]) == (
        "response",
        "completed",
        "m",
        0.0,
    )
    assert (got["tool_choice"], got["tools"], got["parallel_tool_calls"]) == ("auto", [], False)
    assert all(got[k] is None for k in ("error", "instructions", "temperature", "reasoning", "text", "user"))


def test_tool_trajectory_item_order_and_ids() -> None:
    got = response(tool_trajectory())
    assert got["output"] == [
        {
            "id": "atif_bd22c833508fbc297c8b",
            "summary": [{"text": "look it up", "type": "summary_text"}],
            "type": "reasoning",
            "encrypted_content": None,
            "content": None,
        },
        {
            "arguments": '{"a":1,"city":"Zürich"}',
            "call_id": "c1",
            "name": "weather",
            "type": "function_call",
            "id": "atif_5354e25c9c812328787f",
            "status": "completed",
            "namespace": None,
        },
        {
            "arguments": "{}",
            "call_id": "c2",
            "name": "time",
            "type": "function_call",
            "id": "atif_a99ee674cd5dc3a8a50e",
            "status": "completed",
            "namespace": None,
        },
        {
            "id": "atif_c27e4daa7f2cc178c603",
            "call_id": "c2",
            "output": [{"text": "noon", "type": "input_text"}],
            "status": "completed",
            "type": "function_call_output",
            "created_by": None,
        },
        {
            "id": "atif_0933f6d56325a184d99a",
            "call_id": "c1",
            "output": '{"temp":20}',
            "status": "completed",
            "type": "function_call_output",
            "created_by": None,
        },
        {
            "id": "atif_b32abad14b546d70a4f1",
            "content": [{"annotations": [], "text": "\\boxed{A}", "type": "output_text", "logprobs": None}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
            "phase": None,
        },
    ]
    assert got["parallel_tool_calls"] is True
    assert response(tool_trajectory(), parallel_tool_calls=False)["parallel_tool_calls"] is False


def test_message_forms() -> None:
    parts = [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]
    got = response(changed(text_trajectory(), lambda d: d["steps"][1].update(message=parts)))
    assert [c["text"] for c in got["output"][0]["content"]] == ["x", "y"]
    empty = response(text_trajectory(""))
    assert [c["text"] for c in empty["output"][0]["content"]] == [""]


def test_arguments_and_tool_results_as_python_json() -> None:
    doc = tool_trajectory()
    doc["steps"][1]["tool_calls"][0]["arguments"] = {"b": [1e-07, 1e16, -0.0, 10**30], "a": "ü"}
    for value, expected in (
        (None, "null"),
        (True, "true"),
        ("raw", "raw"),
        ({"z": 1, "y": [2]}, '{"y":[2],"z":1}'),
    ):
        doc["steps"][1]["observation"]["results"][1]["extra"] = {"tool_result": value}
        got = response(doc)["output"]
        assert got[1]["arguments"] == '{"a":"ü","b":[1e-07,1e+16,-0.0,1000000000000000000000000000000]}'
        assert got[4]["output"] == expected


def test_request_fields_overwrite_the_response() -> None:
    got = response(
        text_trajectory(), temperature=0.3, instructions="be brief", max_output_tokens=5, metadata=None
    )
    assert (got["temperature"], got["instructions"], got["max_output_tokens"], got["metadata"]) == (
        0.3,
        "be brief",
        5,
        None,
    )
    assert got["created_at"] == 0.0
    normalized = response(
        text_trajectory(),
        reasoning={"effort": "low"},
        text={"format": {"type": "text"}},
        tools=[{"type": "function", "name": "f", "parameters": {}}],
        prompt={"id": "p"},
    )
    assert normalized["reasoning"] == {
        "context": None,
        "effort": "low",
        "generate_summary": None,
        "summary": None,
    }
    assert normalized["text"] == {"format": {"type": "text"}, "verbosity": None}
    assert normalized["tools"] == [
        {
            "name": "f",
            "parameters": {},
            "strict": None,
            "type": "function",
            "defer_loading": None,
            "description": None,
        }
    ]
    assert normalized["prompt"] == {"id": "p", "variables": None, "version": None}


def test_null_tool_fields_keep_the_projected_values() -> None:
    got = response(tool_trajectory(), tool_choice=None, tools=None, parallel_tool_calls=None)
    assert (got["tool_choice"], got["tools"], got["parallel_tool_calls"]) == ("auto", [], True)


def test_created_at_from_last_timestamped_agent_step() -> None:
    doc = tool_trajectory()
    doc["steps"][1]["timestamp"] = "2026-01-01T00:00:00"  # naive, but not the last one
    doc["steps"][2]["timestamp"] = "2026-06-12T22:33:45.326647187Z"
    assert response(doc)["created_at"] == 1781303625.326647


def test_usage_rules() -> None:
    final_only = text_trajectory(
        final_metrics={"total_prompt_tokens": 6, "total_completion_tokens": 2, "total_cached_tokens": 1}
    )
    assert response(final_only)["usage"] == {
        "input_tokens": 6,
        "input_tokens_details": {"cached_tokens": 1},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": None},
        "total_tokens": 8,
    }
    assert response(text_trajectory())["usage"] is None
    assert response(text_trajectory(final_metrics={"total_steps": 2}))["usage"] is None
    detailed = text_trajectory(final_metrics={"total_prompt_tokens": 5, "total_completion_tokens": 3})
    detailed["steps"][1]["metrics"] = {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "cached_tokens": 2,
        "extra": {"total_tokens": 9, "output_tokens_details": {"reasoning_tokens": 1}},
    }
    assert response(detailed)["usage"] == {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 9,
    }
    step_usage_only = changed(detailed, lambda d: d.pop("final_metrics"))
    assert rejection(step_usage_only) == "ATIF contains per-step token metrics without final_metrics"


def test_no_trajectory_id_seeds_ids_by_content() -> None:
    doc = text_trajectory(trajectory_id=None, session_id=None)
    got = response(doc)
    assert (got["id"], got["output"][0]["id"]) == ("atif_1bc0624e080b8c25120d", "atif_8b3a14c58e42f13dd096")
    ignored = changed(
        doc, lambda d: (d["agent"].update(extra={"y": 1}), d["steps"][1].update(extra={"raw": "x"}))
    )
    assert response(ignored)["id"] == got["id"]
    assert response(changed(doc, lambda d: d.update(trajectory_id="  ")))["id"] == got["id"]
    assert response(changed(doc, lambda d: d["steps"][1].update(message="B")))["id"] != got["id"]


def test_content_hash_keeps_consumed_extras() -> None:
    def digest(doc: dict[str, Any]) -> str:
        return content_sha256(parse_trajectory(json.loads(json.dumps(doc))))

    doc = tool_trajectory(trajectory_id=None)
    base = digest(doc)
    assert digest(changed(doc, lambda d: d.update(trajectory_id="other"))) == base
    assert digest(changed(doc, lambda d: d.update(extra={"producer": 1}))) == base
    assert digest(changed(doc, lambda d: d.update(extra={"nemo_gym": {"source": {"task_index": 0}}}))) != base
    tool_result = digest(
        changed(doc, lambda d: d["steps"][1]["observation"]["results"][1].update(extra={"tool_result": 1}))
    )
    assert tool_result != base
    assert (
        digest(changed(doc, lambda d: d["steps"][1]["observation"]["results"][1]["extra"].update(p=1)))
        == base
    )
    assert digest(changed(doc, lambda d: d["steps"][1]["tool_calls"][0].update(extra={"raw": 1}))) == base
