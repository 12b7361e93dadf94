"""Validate-and-dump functions for the trajectory models (``ng_trajectory``, evidence.md §5).

As in :mod:`gymflow.join.schema`: each returns the full 0.7.0 dump (every field, nulls included,
in field order, lax values coerced), rejects unknown keys and passes free-form values through.
"""

from __future__ import annotations

from typing import Any, Final

from gymflow.evidence.conversation import raise_discrimination_errors
from gymflow.evidence.lax import (
    ValidationError,
    fail,
    lax_bool,
    lax_float,
    lax_int,
    nonneg_float,
    nonneg_int,
    opt_literal,
    opt_str,
    req_str,
)
from gymflow.join.schema import _keys, _list, _opt_server_ref, _refs, gap, invocation, tool_call

__all__ = [
    "METADATA_KEYS",
    "TOKEN_KEYS",
    "ValidationError",
    "check_trajectory",
    "model_call",
    "response_metadata",
    "token_stats",
    "trajectory",
    "turn",
]

Obj = dict[str, Any]

_SOURCE: Final = frozenset({"upstream", "local"})

TOKEN_KEYS: Final = (
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "total_tokens",
    "cached_tokens",
)
_TOKEN_KEYSET: Final = frozenset(TOKEN_KEYS)


def token_stats(value: Any, where: str = "token_stats") -> Obj:
    _keys(value, _TOKEN_KEYSET, where)
    get = value.get
    return {key: nonneg_int(get(key), f"{where}.{key}") for key in TOKEN_KEYS}


METADATA_KEYS: Final = (
    "response_id",
    "model_ref",
    "model",
    "dialect",
    "status_code",
    "response_status",
    "finish_reason",
    "upstream_attempted",
    "response_source",
    "upstream_status_code",
    "local_response_reason",
    "error_category",
    "latency_ttft_ms",
)
_METADATA_KEYSET: Final = frozenset(METADATA_KEYS)


def response_metadata(value: Any, where: str = "response_metadata") -> Obj:
    _keys(value, _METADATA_KEYSET, where)
    get = value.get
    return {
        "response_id": opt_str(get("response_id"), "response_id"),
        "model_ref": _opt_server_ref(get("model_ref"), "model_ref"),
        "model": opt_str(get("model"), "model"),
        "dialect": opt_str(get("dialect"), "dialect"),
        "status_code": lax_int(get("status_code"), "status_code"),
        "response_status": opt_str(get("response_status"), "response_status"),
        "finish_reason": opt_str(get("finish_reason"), "finish_reason"),
        "upstream_attempted": lax_bool(get("upstream_attempted"), "upstream_attempted"),
        "response_source": opt_literal(get("response_source"), _SOURCE, "response_source"),
        "upstream_status_code": lax_int(get("upstream_status_code"), "upstream_status_code"),
        "local_response_reason": opt_str(get("local_response_reason"), "local_response_reason"),
        "error_category": opt_str(get("error_category"), "error_category"),
        "latency_ttft_ms": nonneg_float(get("latency_ttft_ms"), "latency_ttft_ms"),
    }


_CALL_KEYS: Final = frozenset(
    {
        "model_call_id",
        "started_at",
        "completed_at",
        "duration_ms",
        "request",
        "response",
        "response_metadata",
        "token_stats",
    }
)


def model_call(value: Any, where: str = "model_calls[]") -> Obj:
    """``TrajectoryModelCall``."""
    _keys(value, _CALL_KEYS, where)
    get = value.get
    return {
        "model_call_id": opt_str(get("model_call_id"), "model_call_id"),
        "started_at": lax_float(get("started_at"), "started_at"),
        "completed_at": lax_float(get("completed_at"), "completed_at"),
        "duration_ms": nonneg_float(get("duration_ms"), "duration_ms"),
        "request": get("request"),
        "response": get("response"),
        "response_metadata": response_metadata(get("response_metadata", {}), "response_metadata"),
        "token_stats": token_stats(get("token_stats", {}), "token_stats"),
    }


_TURN_KEYS: Final = frozenset(
    {
        "invocation_id",
        "task_id",
        "rollout_id",
        "turn_no",
        "timestamp",
        "question",
        "answer",
        "reasoning_content",
        "resolved",
        "step_count",
        "model_calls",
    }
)


def turn(value: Any, where: str = "turns[]") -> Obj:
    """``TrajectoryTurn``."""
    _keys(value, _TURN_KEYS, where)
    get = value.get
    turn_no = lax_int(get("turn_no"), "turn_no")
    if turn_no is None or turn_no < 1:
        fail("turn_no", "an integer >= 1 is required")
    timestamp = lax_float(get("timestamp"), "timestamp")
    if timestamp is None:
        fail("timestamp", "required")
    step_count = nonneg_int(get("step_count"), "step_count")
    if step_count is None:
        fail("step_count", "required")
    return {
        "invocation_id": req_str(get("invocation_id"), "invocation_id"),
        "task_id": req_str(get("task_id"), "task_id"),
        "rollout_id": req_str(get("rollout_id"), "rollout_id"),
        "turn_no": turn_no,
        "timestamp": timestamp,
        "question": get("question"),
        "answer": get("answer"),
        "reasoning_content": get("reasoning_content"),
        "resolved": lax_bool(get("resolved"), "resolved"),
        "step_count": step_count,
        "model_calls": _refs(get("model_calls", []), "model_calls[]"),
    }


_TRAJECTORY_KEYS: Final = frozenset(
    {"schema_version", "task_id", "rollout_id", "invocations", "turns", "model_calls", "tool_calls", "gaps"}
)


def trajectory(value: Any, where: str = "ng_trajectory") -> Obj:
    """``TrajectoryRecord``, with its four consistency checks."""
    try:
        return _trajectory(value, where)
    except ValidationError:
        invocations = value.get("invocations") if isinstance(value, dict) else None
        if isinstance(invocations, list):
            raise_discrimination_errors(invocations)
        raise


def _trajectory(value: Any, where: str) -> Obj:
    _keys(value, _TRAJECTORY_KEYS, where)
    get = value.get
    version = get("schema_version", "1.0")
    if version != "1.0" or not isinstance(version, str):
        fail("schema_version", "must be '1.0'")
    record: Obj = {
        "schema_version": version,
        "task_id": req_str(get("task_id"), "task_id"),
        "rollout_id": req_str(get("rollout_id"), "rollout_id"),
        "invocations": [invocation(v, "invocations[]") for v in _list(get("invocations", []), where)],
        "turns": [turn(v, "turns[]") for v in _list(get("turns", []), where)],
        "model_calls": [model_call(v, "model_calls[]") for v in _list(get("model_calls", []), where)],
        "tool_calls": [
            tool_call(v, "tool_calls[]", with_output=True) for v in _list(get("tool_calls", []), where)
        ],
        "gaps": [gap(v, "gaps[]") for v in _list(get("gaps", []), where)],
    }
    check_trajectory(record, where)
    return record


def check_trajectory(record: Obj, where: str = "ng_trajectory") -> None:
    """The record-level checks of ``TrajectoryRecord`` on an already dumped record."""
    invocation_ids = [item["invocation_id"] for item in record["invocations"]]
    if len(set(invocation_ids)) != len(invocation_ids):
        fail(where, "invocation_id values must be unique")
    call_ids = [call["model_call_id"] for call in record["model_calls"] if call["model_call_id"]]
    if len(set(call_ids)) != len(call_ids):
        fail(where, "model_call_id values must be unique")
    task_id, rollout_id = record["task_id"], record["rollout_id"]
    seen: set[tuple[str, int]] = set()
    for item in record["turns"]:
        if item["task_id"] != task_id or item["rollout_id"] != rollout_id:
            fail(where, "every turn must carry the trajectory's task_id and rollout_id")
        key = (item["invocation_id"], item["turn_no"])
        if key in seen:
            fail(where, f"duplicate turn {key!r}")
        seen.add(key)
