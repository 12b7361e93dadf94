"""Validate-and-dump functions for the observation models (evidence.md §5).

Each function takes a parsed JSON value and returns its full dump as 0.7.0 writes it: every field,
nulls included, in the model's field order, with lax values coerced. Unknown keys are rejected
(except in :func:`server_ref`, which drops them). Free-form values (``request``, ``output``, ...)
are passed through by reference, never copied. Failures raise :class:`~gymflow.evidence.lax.ValidationError`.
"""

from __future__ import annotations

from typing import Any, Final

from gymflow.evidence.conversation import conversation_items, raise_discrimination_errors
from gymflow.evidence.lax import (
    ValidationError,
    fail,
    lax_float,
    lax_int,
    nonneg_float,
    nonneg_int,
    opt_literal,
    opt_str,
    req_str,
)

__all__ = [
    "ValidationError",
    "bundle",
    "call_ref",
    "gap",
    "invocation",
    "opt_call_ref",
    "server_ref",
    "tool_call",
]

Obj = dict[str, Any]

POLICY_TYPE: Final = "responses_api_models"
_INVOCATION_STATUS: Final = frozenset({"completed", "failed", "incomplete", "unknown"})
_TOOL_STATUS: Final = frozenset({"completed", "failed", "timeout", "cancelled", "incomplete", "unknown"})
_TIMING: Final = frozenset({"executor", "artifact", "harness"})
_COMPACTION_OUTCOME: Final = frozenset({"completed", "failed", "aborted", "unknown"})
_SANDBOX_ROLE: Final = frozenset({"agent", "verifier", "environment"})
_SANDBOX_OUTCOME: Final = frozenset(
    {"completed", "failed", "timeout", "oom", "sandbox_error", "cancelled", "unknown"}
)


def _keys(value: Any, allowed: frozenset[str], where: str) -> Obj:
    if not isinstance(value, dict):
        fail(where, f"an object is required, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            fail(where, f"unknown key {key!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if isinstance(value, list):
        return value
    fail(where, "a list is required")


def _literal_default(value: Any, allowed: frozenset[str], default: str, where: str) -> str:
    if value is _MISSING:
        return default
    if isinstance(value, str) and value in allowed:
        return value
    fail(where, f"must be one of {sorted(allowed)}: {value!r}")


_MISSING: Final = object()


def server_ref(value: Any, where: str = "model_ref") -> Obj:
    """``ModelServerRef``: the policy-model type only; extra keys are dropped."""
    if not isinstance(value, dict):
        fail(where, "an object is required")
    kind = value.get("type", _MISSING)
    if kind != POLICY_TYPE or not isinstance(kind, str):
        fail(where, f"type must be {POLICY_TYPE!r}")
    return {"type": kind, "name": req_str(value.get("name"), "name")}


def _opt_server_ref(value: Any, where: str) -> Obj | None:
    return None if value is None else server_ref(value, where)


_REF_KEYS: Final = frozenset({"model_call_id", "model_ref", "response_id"})


def call_ref(value: Any, where: str = "model_calls[]") -> Obj:
    """``ModelCallRef``: valid iff ``model_call_id`` is truthy, or ``model_ref`` and ``response_id`` are."""
    _keys(value, _REF_KEYS, where)
    call_id = opt_str(value.get("model_call_id"), "model_call_id")
    ref = _opt_server_ref(value.get("model_ref"), "model_ref")
    response_id = opt_str(value.get("response_id"), "response_id")
    if not call_id and not (ref is not None and response_id):
        fail(where, "needs model_call_id, or model_ref and response_id")
    return {"model_call_id": call_id, "model_ref": ref, "response_id": response_id}


def opt_call_ref(value: Any, where: str) -> Obj | None:
    return None if value is None else call_ref(value, where)


def _refs(value: Any, where: str) -> list[Obj]:
    return [call_ref(item, where) for item in _list(value, where)]


_GAP_KEYS: Final = frozenset({"code", "invocation_id", "detail"})


def gap(value: Any, where: str = "gaps[]") -> Obj:
    """``ObservationGap``."""
    _keys(value, _GAP_KEYS, where)
    return {
        "code": req_str(value.get("code"), "code"),
        "invocation_id": opt_str(value.get("invocation_id"), "invocation_id"),
        "detail": opt_str(value.get("detail"), "detail"),
    }


_INVOCATION_KEYS: Final = frozenset(
    {
        "kind",
        "invocation_id",
        "parent_invocation_id",
        "spawned_by_tool_call_id",
        "status",
        "duration_ms",
        "error_type",
        "model_calls",
        "conversation",
    }
)


def invocation(value: Any, where: str = "invocation") -> Obj:
    """``AgentInvocation``; ``kind`` defaults to ``agent_invocation``."""
    _keys(value, _INVOCATION_KEYS, where)
    get = value.get
    conversation = get("conversation", [])
    return {
        "kind": _literal_default(get("kind", _MISSING), _KIND_INVOCATION, "agent_invocation", "kind"),
        "invocation_id": req_str(get("invocation_id"), "invocation_id"),
        "parent_invocation_id": opt_str(get("parent_invocation_id"), "parent_invocation_id"),
        "spawned_by_tool_call_id": opt_str(get("spawned_by_tool_call_id"), "spawned_by_tool_call_id"),
        "status": _literal_default(get("status", _MISSING), _INVOCATION_STATUS, "unknown", "status"),
        "duration_ms": nonneg_float(get("duration_ms"), "duration_ms"),
        "error_type": opt_str(get("error_type"), "error_type"),
        "model_calls": _refs(get("model_calls", []), "model_calls[]"),
        "conversation": conversation_items(_list(conversation, "conversation")),
    }


_KIND_INVOCATION: Final = frozenset({"agent_invocation"})
_KIND_TOOL: Final = frozenset({"tool_call"})
_TOOL_KEYS: Final = frozenset(
    {
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
    }
)
_TRAJECTORY_TOOL_KEYS: Final = _TOOL_KEYS | {"output"}


def tool_call(value: Any, where: str = "tool_call", *, with_output: bool = False) -> Obj:
    """``ToolCallObservation``, or ``TrajectoryToolCall`` (the same plus ``output``) when ``with_output``."""
    _keys(value, _TRAJECTORY_TOOL_KEYS if with_output else _TOOL_KEYS, where)
    get = value.get
    started = lax_float(get("started_at"), "started_at")
    completed = lax_float(get("completed_at"), "completed_at")
    if started is not None and completed is not None and completed < started:
        fail(where, "completed_at precedes started_at")
    out: Obj = {
        "kind": _literal_default(get("kind", _MISSING), _KIND_TOOL, "tool_call", "kind"),
        "invocation_id": req_str(get("invocation_id"), "invocation_id"),
        "tool_call_id": req_str(get("tool_call_id"), "tool_call_id"),
        "sandbox_id": opt_str(get("sandbox_id"), "sandbox_id"),
        "tool_name": opt_str(get("tool_name"), "tool_name"),
        "started_at": started,
        "completed_at": completed,
        "duration_ms": nonneg_float(get("duration_ms"), "duration_ms"),
        "timing_source": opt_literal(get("timing_source"), _TIMING, "timing_source"),
        "status": _literal_default(get("status", _MISSING), _TOOL_STATUS, "unknown", "status"),
        "error_type": opt_str(get("error_type"), "error_type"),
    }
    if with_output:
        out["output"] = get("output")
    return out


_COMPACTION_KEYS: Final = frozenset(
    {
        "kind",
        "invocation_id",
        "observed_at",
        "trigger",
        "tokens_before",
        "tokens_after",
        "outcome",
        "summary",
        "first_kept_item_id",
        "before_model_call",
        "model_calls",
        "after_model_call",
    }
)


def compaction(value: Any, where: str = "context_compaction") -> Obj:
    """``ContextCompactionObservation``."""
    _keys(value, _COMPACTION_KEYS, where)
    get = value.get
    return {
        "kind": "context_compaction",
        "invocation_id": req_str(get("invocation_id"), "invocation_id"),
        "observed_at": lax_float(get("observed_at"), "observed_at"),
        "trigger": opt_str(get("trigger"), "trigger"),
        "tokens_before": nonneg_int(get("tokens_before"), "tokens_before"),
        "tokens_after": nonneg_int(get("tokens_after"), "tokens_after"),
        "outcome": _literal_default(get("outcome", _MISSING), _COMPACTION_OUTCOME, "unknown", "outcome"),
        "summary": opt_str(get("summary"), "summary"),
        "first_kept_item_id": opt_str(get("first_kept_item_id"), "first_kept_item_id"),
        "before_model_call": opt_call_ref(get("before_model_call"), "before_model_call"),
        "model_calls": _refs(get("model_calls", []), "model_calls[]"),
        "after_model_call": opt_call_ref(get("after_model_call"), "after_model_call"),
    }


_SANDBOX_KEYS: Final = frozenset(
    {
        "kind",
        "role",
        "provider",
        "sandbox_id",
        "outcome",
        "exit_code",
        "wall_time_s",
        "cpu_time_s",
        "peak_memory_mib",
        "resource_usage_source",
        "error_type",
    }
)


def sandbox(value: Any, where: str = "sandbox") -> Obj:
    """``SandboxObservation`` (measured usage only; configured limits do not belong here)."""
    _keys(value, _SANDBOX_KEYS, where)
    get = value.get
    role = get("role", _MISSING)
    if not (isinstance(role, str) and role in _SANDBOX_ROLE):
        fail("role", f"must be one of {sorted(_SANDBOX_ROLE)}")
    return {
        "kind": "sandbox",
        "role": role,
        "provider": opt_str(get("provider"), "provider"),
        "sandbox_id": opt_str(get("sandbox_id"), "sandbox_id"),
        "outcome": _literal_default(get("outcome", _MISSING), _SANDBOX_OUTCOME, "unknown", "outcome"),
        "exit_code": lax_int(get("exit_code"), "exit_code"),
        "wall_time_s": nonneg_float(get("wall_time_s"), "wall_time_s"),
        "cpu_time_s": nonneg_float(get("cpu_time_s"), "cpu_time_s"),
        "peak_memory_mib": nonneg_float(get("peak_memory_mib"), "peak_memory_mib"),
        "resource_usage_source": opt_str(get("resource_usage_source"), "resource_usage_source"),
        "error_type": opt_str(get("error_type"), "error_type"),
    }


_BUNDLE_KEYS: Final = frozenset({"source", "records", "gaps"})


def _record(value: Any, where: str) -> Obj:
    kind = value.get("kind") if isinstance(value, dict) else None
    if kind == "agent_invocation":
        return invocation(value, where)
    if kind == "tool_call":
        return tool_call(value, where)
    if kind == "context_compaction":
        return compaction(value, where)
    if kind == "sandbox":
        return sandbox(value, where)
    fail(where, f"unknown record kind {kind!r}")


def bundle(value: Any, where: str = "ng_agent_observations") -> Obj:
    """``AgentObservationBundle``: unique invocation ids, no ``parent_invocation_id`` cycle."""
    try:
        return _bundle(value, where)
    except ValidationError:
        records = value.get("records") if isinstance(value, dict) else None
        if isinstance(records, list):
            raise_discrimination_errors(
                r for r in records if isinstance(r, dict) and r.get("kind") == "agent_invocation"
            )
        raise


def _bundle(value: Any, where: str) -> Obj:
    _keys(value, _BUNDLE_KEYS, where)
    records = [_record(item, "records[]") for item in _list(value.get("records", []), where)]
    gaps = [gap(item, "gaps[]") for item in _list(value.get("gaps", []), where)]
    parents: dict[str, str | None] = {}
    for record in records:
        if record["kind"] == "agent_invocation":
            if record["invocation_id"] in parents:
                fail(where, f"duplicate invocation_id {record['invocation_id']!r}")
            parents[record["invocation_id"]] = record["parent_invocation_id"]
    for start in parents:
        seen = {start}
        current = parents[start]
        while current is not None and current in parents:
            if current in seen:
                fail(where, f"parent_invocation_id cycle through {current!r}")
            seen.add(current)
            current = parents[current]
    return {"source": req_str(value.get("source"), "source"), "records": records, "gaps": gaps}
