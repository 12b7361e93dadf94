"""Records: evidence.md §13 C11-C17 (tokens, cache, tool calls, reasoning, raw payloads)."""

from __future__ import annotations

from typing import Any

from gymflow.join import PAYLOAD_KEYS
from tests.join.helpers import L, bundle, codes, inv, join, jsonl, ref, row, store


def _call(response: Any, **extra: Any) -> dict[str, Any]:
    out = join(row(1, 0), store(**{"1-0": jsonl(L("c1", response=response, **extra))}))
    [call] = out["ng_model_call_capture"]["calls"]
    return call  # type: ignore[no-any-return]


def test_c11_responses_usage_tools_and_reasoning() -> None:
    call = _call(
        {
            "id": "r1",
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "function_call", "call_id": "t1", "name": "f", "arguments": '{"a":1}'},
            ],
            "usage": {
                "input_tokens": 94,
                "output_tokens": 28,
                "total_tokens": 122,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 12},
            },
        }
    )
    assert (call["tokens_in"], call["tokens_out"], call["tokens_reasoning"], call["tokens_total"]) == (
        94,
        28,
        12,
        122,
    )
    assert (call["cached_tokens"], call["cache_hit"]) == (0, False)
    assert call["tool_calls"] == [{"call_id": "t1", "name": "f", "arguments": {"a": 1}}]
    assert call["reasoning_content"] == "think"


def test_c12_chat_usage_and_raw_arguments() -> None:
    call = _call(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "reasoning": "hmm",
                        "tool_calls": [
                            {
                                "id": "t9",
                                "type": "function",
                                "function": {"name": "g", "arguments": "not-json"},
                            }
                        ],
                    },
                }
            ],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 32},
                "completion_tokens_details": {"reasoning_tokens": 4},
            },
        },
        dialect="chat",
    )
    assert (call["tokens_in"], call["tokens_out"], call["tokens_total"], call["tokens_reasoning"]) == (
        40,
        9,
        49,
        4,
    )
    assert (call["cached_tokens"], call["cache_hit"]) == (32, True)
    assert call["tool_calls"] == [{"call_id": "t9", "name": "g", "arguments": {"_raw": "not-json"}}]
    assert call["finish_reason"] == "tool_calls"
    assert call["response_status"] is None
    assert call["reasoning_content"] == "hmm"


def test_c13_anthropic_cache_fold() -> None:
    call = _call(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "stop_reason": "end_turn",
            "content": [
                {"type": "thinking", "thinking": "ponder", "signature": "s"},
                {"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "tu1", "name": "h", "input": {"x": 1}},
            ],
            "usage": {
                "input_tokens": 10,
                "output_tokens": 7,
                "cache_read_input_tokens": 5,
                "cache_creation_input_tokens": 3,
            },
        },
        dialect="messages",
    )
    assert (call["tokens_in"], call["tokens_total"], call["tokens_reasoning"]) == (18, 25, None)
    assert (call["cached_tokens"], call["cache_creation_tokens"]) == (5, 3)
    assert call["finish_reason"] == "end_turn"
    assert call["reasoning_content"] == "ponder"
    assert call["model"] == "claude"
    assert call["tool_calls"] == [{"call_id": "tu1", "name": "h", "arguments": {"x": 1}}]


def test_c14_invalid_counts_read_as_absent() -> None:
    usage = {"input_tokens": True, "prompt_tokens": 11, "output_tokens": -3, "completion_tokens": 2.0}
    call = _call({"id": "r", "status": "completed", "output": [], "usage": usage})
    assert (call["tokens_in"], call["tokens_out"], call["tokens_total"]) == (11, None, None)


SSE = 'event: response.created\ndata: {"type":"response.created"}\n\n'


def test_c15_raw_payloads_project_as_text() -> None:
    line = L("c1", request=None, response=None, request_raw="[1,2]", response_raw=SSE)
    data = {"1-0": jsonl(line)}
    out = join(row(1, 0), store(**data))
    [call] = out["ng_trajectory"]["model_calls"]
    assert (call["request"], call["response"]) == ("[1,2]", SSE)
    out = join(row(1, 0, ng_agent_observations=bundle(inv("root", ref("c1")))), store(**data))
    [turn] = out["ng_trajectory"]["turns"]
    assert (turn["question"], turn["answer"]) == ("[1,2]", None)
    for call in out["ng_model_call_capture"]["calls"]:
        assert not set(PAYLOAD_KEYS) & set(call)


def test_c16_session_and_execution_outcome_are_copied() -> None:
    line = L(
        "c1",
        client_session_id="sess",
        upstream_attempted=False,
        response_source="local",
        upstream_status_code=None,
        local_response_reason="context_length_exceeded",
        error_category="context_length_exceeded",
    )
    out = join(row(1, 0), store(**{"1-0": jsonl(line)}))
    [record] = out["ng_model_call_capture"]["calls"]
    assert record["client_session_id"] == "sess"
    assert (record["upstream_attempted"], record["response_source"]) == (False, "local")
    assert record["local_response_reason"] == "context_length_exceeded"
    metadata = out["ng_trajectory"]["model_calls"][0]["response_metadata"]
    assert metadata["upstream_attempted"] is False
    assert metadata["response_source"] == "local"
    assert metadata["upstream_status_code"] is None
    assert metadata["local_response_reason"] == "context_length_exceeded"
    assert metadata["error_category"] == "context_length_exceeded"


def test_c17_redacted_history_attaches_no_payloads() -> None:
    observations = bundle(inv("root", ref("c1")), gaps=[{"code": "multimodal_history_redacted"}])
    out = join(row(1, 0, ng_agent_observations=observations), store(**{"1-0": jsonl(L("c1"))}))
    for call in out["ng_model_call_capture"]["calls"]:
        assert not set(PAYLOAD_KEYS) & set(call)
    [call] = out["ng_trajectory"]["model_calls"]
    assert (call["request"], call["response"]) == (None, None)
    assert out["ng_trajectory"]["turns"] == []
    assert "turns_unavailable" in codes(out["ng_trajectory"]["gaps"])
    assert out["ng_perf"] == {
        "num_turns": 1,
        "num_tool_calls": 0,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 5,
        "completion_tokens": 2,
    }
