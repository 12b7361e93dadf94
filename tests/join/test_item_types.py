"""Conversation items in the join: the ``type``-tag rule and the shape routing of 0.7.0.

An item whose ``type`` key is present but not a known item type is invalid in 0.7.0 (``null``
included), so the bundle or producer trajectory holding it is invalid. Expected dumps below were
produced by 0.7.0's own models.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gymflow.evidence.conversation import ITEM_TYPES, conversation_item
from gymflow.evidence.lax import ValidationError
from tests.join.helpers import L, bundle, gap_tuples, inv, join, jsonl, row, store

BAD_TYPES: list[Any] = ["", None, 0, 2.5, True, {}, {"type": "message"}, [], "bogus", "Message"]
BAD_TYPES += [
    "easy_message",
    "input_message",
    "output_message",
    "message__training",
    "function_call_output_input",
]


@pytest.mark.parametrize("kind", BAD_TYPES, ids=[repr(kind) for kind in BAD_TYPES])
def test_an_unknown_type_tag_invalidates_the_bundle(kind: Any) -> None:
    records = [inv("root", conversation=[{"type": kind, "role": "user", "content": "hi"}])]
    out = join(row(1, 0, ng_agent_observations=bundle(*records)), store(**{"1-0": jsonl(L("c1"))}))
    assert out["ng_model_call_capture"]["gaps"] == [{"code": "agent_observation_join_failed"}]
    assert out["ng_agent_observations"] == bundle(*records)
    assert gap_tuples(out["ng_trajectory"]["gaps"]) == [
        ("agent_observations_invalid", None, "ValidationError"),
        ("agent_observation_join_failed", None, None),
        ("turns_unavailable", None, None),
        ("conversation_unavailable", None, None),
    ]


@pytest.mark.parametrize("kind", [None, "", 7, "bogus"], ids=repr)
def test_an_unknown_type_tag_invalidates_the_producer_trajectory(kind: Any) -> None:
    producer = {
        "task_id": "1",
        "rollout_id": "1-0",
        "invocations": [{"invocation_id": "root", "conversation": [{"type": kind, "foo": 1}]}],
    }
    trajectory = join(row(1, 0, ng_trajectory=producer), store())["ng_trajectory"]
    assert gap_tuples(trajectory["gaps"])[0] == ("producer_trajectory_invalid", None, "ValidationError")
    assert trajectory["invocations"] == []


def test_every_known_type_is_accepted() -> None:
    """[G] hosted-tool items pass through unchecked (0.7.0 also checks their SDK fields)."""
    fields: dict[str, dict[str, Any]] = {
        "message": {"role": "user", "content": "hi"},
        "function_call": {"name": "f", "arguments": "{}", "call_id": "c"},
        "function_call_output": {"call_id": "c", "output": "x"},
        "reasoning": {"id": "r", "summary": []},
        "mcp_call": {"name": "f", "arguments": "{}"},
    }
    for kind in sorted(ITEM_TYPES):
        dumped = conversation_item({"type": kind, **fields.get(kind, {})})
        assert dumped["type"] == kind


OUTPUT_TEXT = {"type": "output_text", "text": "x", "annotations": []}
DUMPS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"type": "mcp_list_tools"},
        {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None},
    ),
    (
        {"role": "robot", "content": "hi"},
        {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None}
        | {"role": "robot", "content": "hi"},
    ),
    (
        {"role": "user", "content": [OUTPUT_TEXT]},
        {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None}
        | {"role": "user", "content": [OUTPUT_TEXT]},
    ),
    (
        {"content": [OUTPUT_TEXT], "id": "m1"},
        {
            "id": "m1",
            "content": [{"annotations": [], "text": "x", "type": "output_text", "logprobs": None}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
            "phase": None,
        },
    ),
    (
        {"role": "assistant", "content": [], "id": "m1"},
        {
            "id": "m1",
            "content": [],
            "role": "assistant",
            "status": "completed",
            "type": "message",
            "phase": None,
        },
    ),
    (
        {"name": "f", "arguments": "{}"},
        {
            "id": None,
            "arguments": "{}",
            "name": "f",
            "server_label": None,
            "type": "mcp_call",
            "approval_request_id": None,
            "error": None,
            "output": None,
            "status": None,
        },
    ),
    (
        {"name": "f", "arguments": "{}", "call_id": "c", "role": "user", "content": "hi"},
        {"content": "hi", "role": "user", "type": "message", "phase": None},
    ),
    (
        {"type": "message", "role": "user", "content": "hi", "status": "completed", "foo": 1},
        {"content": "hi", "role": "user", "type": "message", "phase": None},
    ),
    (
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c", "foo": 1},
        {
            "arguments": "{}",
            "call_id": "c",
            "name": "f",
            "type": "function_call",
            "id": None,
            "status": None,
            "namespace": None,
        },
    ),
    (
        {"id": "r", "summary": [{"text": "a", "type": "summary_text", "x": 1}]},
        {
            "id": "r",
            "summary": [{"text": "a", "type": "summary_text", "x": 1}],
            "type": "reasoning",
            "encrypted_content": None,
            "content": None,
        },
    ),
    (
        {
            "type": "message",
            "role": "user",
            "content": "hi",
            "prompt_token_ids": ["1", 2.0, True],
            "generation_token_ids": [],
            "generation_log_probs": [1, "0.5", False],
        },
        {
            "prompt_token_ids": [1, 2, 1],
            "generation_token_ids": [],
            "generation_log_probs": [1.0, 0.5, 0.0],
            "routed_experts": None,
            "content": "hi",
            "role": "user",
            "type": "message",
            "phase": None,
        },
    ),
]


DUMPS += [
    (
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x", "extra": 1}]},
        {"content": [{"text": "x", "type": "input_text"}], "role": "user", "type": "message", "phase": None},
    ),
    (
        {
            "role": "user",
            "status": "completed",
            "content": [
                {"type": "input_image", "detail": "auto", "image_url": None, "file_id": "f", "zzz": 1},
                {"type": "input_file", "filename": "a", "file_id": None, "detail": "high", "file_data": "d"},
                {"type": "input_video", "video": {"url": "x", "k": 1}},
            ],
        },
        {
            "content": [
                {"detail": "auto", "type": "input_image", "file_id": "f", "image_url": None},
                {"type": "input_file", "detail": "high", "file_data": "d", "file_id": None, "filename": "a"},
                {"type": "input_video", "video": {"url": "x", "k": 1}},
            ],
            "role": "user",
            "status": "completed",
            "type": "message",
        },
    ),
    (
        {
            "call_id": "c",
            "output": [
                {"type": "input_text", "text": "x", "z": 1},
                {"type": "input_image"},
                {"type": "input_file", "filename": None, "file_data": None, "detail": "low"},
            ],
        },
        {
            "call_id": "c",
            "output": [
                {"text": "x", "type": "input_text"},
                {"type": "input_image"},
                {"type": "input_file", "detail": "low", "file_data": None, "filename": None},
            ],
            "type": "function_call_output",
            "id": None,
            "status": None,
        },
    ),
]


@pytest.mark.parametrize(("item", "dumped"), DUMPS, ids=[str(i) for i in range(len(DUMPS))])
def test_items_route_and_dump_like_0_7_0(item: dict[str, Any], dumped: dict[str, Any]) -> None:
    result = conversation_item(item)
    assert orjson.dumps(result) == orjson.dumps(dumped)  # nested key order included


REJECTED: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "hi", "phase": "bogus"},
    {"type": "message", "role": "assistant", "content": [OUTPUT_TEXT]},  # an output message needs an id
    {"type": "message", "role": "robot", "content": "hi"},
    {"type": "reasoning", "id": "r", "summary": ["x"]},
    {"id": "r", "summary": [{"text": "a"}]},
    {"type": "message", "role": "user", "content": "hi", "prompt_token_ids": [1]},
    {"foo": 1, "prompt_token_ids": [1]},
    {"name": "f", "arguments": 3},
    {"type": "message", "role": "user", "content": [{"type": "bogus"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_image"}]},  # detail is required
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": 3}]},
    {"type": "message", "role": "user", "content": [{"text": "x"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_file", "file_data": None}]},
    {"type": "message", "role": "user", "content": [{"type": "input_video", "video_url": "u", "video": "v"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_video", "video": {"url": " "}}]},
    {"call_id": "c", "output": [{"type": "bogus"}]},
    {"call_id": "c", "output": [{"type": "input_video", "video": "v"}]},
    {"call_id": "c", "output": ["s"]},
]


@pytest.mark.parametrize("item", REJECTED, ids=[str(i) for i in range(len(REJECTED))])
def test_items_0_7_0_rejects(item: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        conversation_item(item)


def test_an_unhashable_role_is_a_type_error_in_the_producer_trajectory_and_the_bundle() -> None:
    item = {"role": [], "content": "hi"}
    producer = {
        "task_id": 5,  # a validation error first: the TypeError still wins, as in 0.7.0
        "rollout_id": "1-0",
        "invocations": [{"invocation_id": "root", "conversation": [{"type": 3}, item]}],
    }
    trajectory = join(row(1, 0, ng_trajectory=producer), store())["ng_trajectory"]
    assert gap_tuples(trajectory["gaps"])[0] == ("producer_trajectory_invalid", None, "TypeError")
    records = [
        {"kind": "tool_call"},
        inv("root", conversation=[{"type": None, "role": "user", "content": [], "status": {}}]),
    ]
    out = join(row(1, 0, ng_agent_observations=bundle(*records)), store(**{"1-0": jsonl(L("c1"))}))
    assert gap_tuples(out["ng_trajectory"]["gaps"])[0] == ("agent_observations_invalid", None, "TypeError")
    assert out["ng_model_call_capture"]["gaps"] == [{"code": "agent_observation_join_failed"}]
