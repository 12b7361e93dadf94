"""Projection of a row's evidence into ``ng_trajectory`` (evidence.md §7).

Sources, in order: the producer's own trajectory (taken verbatim when valid), the agent
observations (gaps, new invocations, tool timing joined with conversation outputs), then the
captured calls (merged into producer calls by id, else appended). When the row had no producer
trajectory object, turns are derived from the captured calls and their owning invocations, as
0.7.0's code does (its documentation says otherwise, §12). Any exception aborts the projection;
:mod:`gymflow.join._row` turns it into ``trajectory_projection_failed``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from pydantic import TypeAdapter, ValidationError

from gymflow.evidence import (
    ObservationGap,
    ResponseMetadata,
    TokenStats,
    TrajectoryModelCall,
    TrajectoryRecord,
    check_tool_timing,
    check_trajectory_identity,
    identifies_a_call,
)
from gymflow.evidence.lax import fail
from gymflow.evidence.observations import dump_bundle
from gymflow.evidence.structs import convert_trajectory
from gymflow.evidence.trajectory import NonNegative
from gymflow.join._identity import projection_identity
from gymflow.join._reference_join import dedupe_gaps

__all__ = ["derive_turns", "project"]

Obj = dict[str, Any]

_TOKEN_SOURCE: Final = {
    "prompt_tokens": "tokens_in",
    "completion_tokens": "tokens_out",
    "reasoning_tokens": "tokens_reasoning",
    "total_tokens": "tokens_total",
    "cached_tokens": "cached_tokens",
}
"""Token stats field -> the ``ModelCallRecord`` key it is taken from."""
_TOKEN_MAP: Final = tuple((_TOKEN_SOURCE[name], name) for name in TokenStats.model_fields)
_METADATA_KEYS: Final = tuple(ResponseMetadata.model_fields)
"""The metadata fields; a ``ModelCallRecord`` carries each under the same name."""
_NON_NEGATIVE: Final[TypeAdapter[float | None]] = TypeAdapter(NonNegative | None)
_TOP_LEVEL: Final = tuple(
    n for n in TrajectoryModelCall.model_fields if n not in ("response_metadata", "token_stats")
)
"""The call's own fields a capture call overrides when it merges into a producer call."""


def _gap(code: str, detail: str | None = None) -> Obj:
    return {"code": code, "invocation_id": None, "detail": detail}


def _producer_dump(raw: Obj) -> Obj:
    """``TrajectoryRecord.model_validate(raw).model_dump()``, through the msgspec Structs when they
    accept ``raw`` (twice as fast; same values in the same field order, so the same bytes), else
    through the model, which raises what 0.7.0 raises."""
    record = convert_trajectory(raw)
    if record is None:
        return TrajectoryRecord.model_validate(raw).model_dump()
    dump: Obj = msgspec.to_builtins(record)
    return dump


def _capture_call(call: Obj) -> Obj:
    """A capture call of ``ng_model_call_capture.calls`` as an (unvalidated) trajectory call."""
    get = call.get
    request = get("request")
    if request is None:
        request = get("request_raw")
    response = get("response")
    if response is None:
        response = get("response_raw")
    metadata = {key: get(key) for key in _METADATA_KEYS if get(key) is not None}
    if "response_status" not in metadata and isinstance(response, dict):
        status = response.get("status")
        if isinstance(status, str):
            metadata["response_status"] = status
    stats = {}
    for source, target in _TOKEN_MAP:
        value = get(source)
        if type(value) is int and value >= 0:
            stats[target] = value
    return {
        "model_call_id": get("model_call_id"),
        "started_at": get("started_at"),
        "completed_at": get("completed_at"),
        "duration_ms": get("latency_total_ms"),
        "request": request,
        "response": response,
        "response_metadata": metadata,
        "token_stats": stats,
    }


def _record_call(record: Obj) -> Obj:
    """The trajectory call of a ``ModelCallRecord`` this join built (its types are already checked).

    Only the constraint the record does not carry is checked: latencies are >= 0.
    """
    latency = record["latency_total_ms"]
    ttft = record["latency_ttft_ms"]
    # A float >= 0 is what the validator returns unchanged (NaN fails the test and is refused there).
    if latency is not None and not (type(latency) is float and latency >= 0.0):
        latency = _NON_NEGATIVE.validate_python(latency)
    if ttft is not None and not (type(ttft) is float and ttft >= 0.0):
        _NON_NEGATIVE.validate_python(ttft)
    request = record.get("request")
    if request is None:
        request = record.get("request_raw")
    response = record.get("response")
    if response is None:
        response = record.get("response_raw")
    return {
        "model_call_id": record["model_call_id"],
        "started_at": record["started_at"],
        "completed_at": record["completed_at"],
        "duration_ms": latency,
        "request": request,
        "response": response,
        "response_metadata": {key: record[key] for key in _METADATA_KEYS},
        "token_stats": {target: record[source] for source, target in _TOKEN_MAP},
    }


def _merge_tools(tool_calls: list[Obj], bundle: Obj) -> list[Obj]:
    observed = [r for r in bundle["records"] if r["kind"] == "tool_call"]
    if not observed:
        return tool_calls
    outputs: dict[tuple[Any, Any], Any] = {}
    for record in bundle["records"]:
        if record["kind"] != "agent_invocation":
            continue
        for item in record["conversation"]:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                outputs[(record["invocation_id"], item.get("call_id"))] = item.get("output")
    tools = list(tool_calls)
    positions: dict[tuple[str, str], int] = {}
    for i, tool in enumerate(tools):
        positions.setdefault((tool["invocation_id"], tool["tool_call_id"]), i)
    for tool in observed:
        key = (tool["invocation_id"], tool["tool_call_id"])
        position = positions.get(key)
        if position is None:
            # Overlaying a full observation dump on {} gives the dump itself (its nulls are defaults).
            merged: Obj = {**tool, "output": outputs.get(key)}
        else:
            merged = dict(tools[position])
            for name, value in tool.items():
                if value is None:
                    continue
                if name == "status" and value == "unknown" and merged["status"] != "unknown":
                    continue
                merged[name] = value
            if key in outputs:
                merged["output"] = outputs[key]
            check_tool_timing(merged["started_at"], merged["completed_at"])
        if position is None:
            positions[key] = len(tools)
            tools.append(merged)
        else:
            tools[position] = merged
    return tools


def _question(request: Any) -> Any:
    if not isinstance(request, dict):
        return request
    if "input" in request:
        question = request["input"]
        if isinstance(question, list):
            return [
                {"type": "message", **item}
                if isinstance(item, dict) and "role" in item and "type" not in item
                else item
                for item in question
            ]
        return question
    return request.get("messages")


def _answer(response: Any) -> tuple[Any, Any, int]:
    """``(answer, reasoning, tool-call count)`` of a response, by its shape."""
    if not isinstance(response, dict):
        return None, None, 0
    output = response.get("output")
    if isinstance(output, list):
        answers: list[Obj] = []
        thoughts: list[Obj] = []
        tools = 0
        for item in output:
            if isinstance(item, dict):
                kind = item.get("type")
                if kind == "reasoning":
                    thoughts.append(item)
                else:
                    answers.append(item)
                    tools += kind == "function_call"
        return answers, (thoughts or None), tools
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        answer = {k: v for k, v in message.items() if k not in ("reasoning_content", "reasoning")}
        return answer, reasoning, len(message.get("tool_calls") or ())
    return None, None, 0


def derive_turns(
    invocations: list[Obj], model_calls: list[Obj], task_id: str, rollout_id: str, resolved: Any
) -> list[Obj]:
    """Turns derived from captured calls and the invocations referencing them (§7 step 7)."""
    by_id: dict[Any, str] = {}
    by_response: dict[Any, str] = {}
    for invocation in invocations:
        for ref in invocation["model_calls"]:
            if ref["model_call_id"]:
                by_id[ref["model_call_id"]] = invocation["invocation_id"]
            if ref["response_id"]:
                by_response[ref["response_id"]] = invocation["invocation_id"]
    turns: list[Obj] = []
    counters: dict[str, int] = {}
    steps: dict[str, int] = {}
    for call in model_calls:
        response = call["response"]
        if response is None:
            continue
        metadata = call["response_metadata"]
        owner = by_id.get(call["model_call_id"]) or by_response.get(metadata["response_id"])
        if owner is None:
            continue
        answer, reasoning, tools = _answer(response)
        counters[owner] = counters.get(owner, 0) + 1
        turn = {
            "invocation_id": owner,
            "task_id": task_id,
            "rollout_id": rollout_id,
            "turn_no": counters[owner],
            "timestamp": call["started_at"] or call["completed_at"] or 0.0,
            "question": _question(call["request"]),
            "answer": answer,
            "reasoning_content": reasoning,
            "resolved": None,
            "step_count": steps.get(owner, 0),
            "model_calls": [
                {
                    "model_call_id": call["model_call_id"],
                    "model_ref": metadata["model_ref"],
                    "response_id": metadata["response_id"],
                }
            ],
        }
        steps[owner] = steps.get(owner, 0) + tools
        if not identifies_a_call(call["model_call_id"], metadata["model_ref"], metadata["response_id"]):
            fail("turns[].model_calls[]", "a derived turn's model-call reference identifies no call")
        turns.append(turn)
    if turns and isinstance(resolved, bool):
        turns[-1]["resolved"] = resolved
    return turns


def project(row: Obj, bundle: Obj | None = None, *, owned_calls: bool = False) -> Obj:
    """The ``ng_trajectory`` dump of ``row``; raises when the evidence cannot be normalized.

    ``bundle`` is the row's observation bundle when the caller has just validated it (the merge
    did), to save validating it twice; ``owned_calls`` says the capture calls are records the
    merge just built (typed already), not values read from the row.
    """
    task_id, rollout_id = projection_identity(row)
    gaps: list[Obj] = []
    invocations: list[Obj] = []
    turns: list[Obj] = []
    model_calls: list[Obj] = []
    tool_calls: list[Obj] = []
    producer_turns = False
    raw = row.get("ng_trajectory")
    if isinstance(raw, dict):
        try:
            producer = _producer_dump(raw)
        except Exception as exc:  # noqa: BLE001 - reported as a gap, as 0.7.0 does
            gaps.append(_gap("producer_trajectory_invalid", type(exc).__name__))
        else:
            producer_turns = True
            differs = [n for n, v in (("task_id", task_id), ("rollout_id", rollout_id)) if producer[n] != v]
            turns = producer["turns"]
            if differs:
                gaps.append(_gap("producer_trajectory_identity_mismatch", ",".join(differs)))
                for turn in turns:
                    turn["task_id"], turn["rollout_id"] = task_id, rollout_id
            gaps += producer["gaps"]
            invocations = producer["invocations"]
            tool_calls = producer["tool_calls"]
            model_calls = producer["model_calls"]

    observations = row.get("ng_agent_observations")
    if observations is not None:
        try:
            validated = bundle if bundle is not None else dump_bundle(observations)
        except Exception as exc:  # noqa: BLE001
            gaps.append(_gap("agent_observations_invalid", type(exc).__name__))
        else:
            gaps += validated["gaps"]
            present = {invocation["invocation_id"] for invocation in invocations}
            for record in validated["records"]:
                if record["kind"] == "agent_invocation" and record["invocation_id"] not in present:
                    present.add(record["invocation_id"])
                    invocations.append(record)
            tool_calls = _merge_tools(tool_calls, validated)

    turns.sort(key=lambda t: (t["timestamp"], t["invocation_id"], t["turn_no"]))

    capture = row.get("ng_model_call_capture")
    if isinstance(capture, dict):
        calls = capture.get("calls")
        if calls and not isinstance(calls, list | str | dict):
            raise TypeError("ng_model_call_capture.calls is not iterable")
        producer_ids: dict[Any, int] = {}
        for i, call in enumerate(model_calls):
            if call["model_call_id"] is not None:
                producer_ids.setdefault(call["model_call_id"], i)
        merged: set[int] = set()
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, dict):
                continue
            call_id = call.get("model_call_id")
            position = producer_ids.get(call_id) if call_id is not None else None
            if owned_calls and (position is None or position in merged):
                model_calls.append(_record_call(call))
                continue
            new = _capture_call(call)
            if position is not None and position not in merged:
                merged.add(position)
                target = dict(model_calls[position])
                target["response_metadata"] = {**target["response_metadata"], **new["response_metadata"]}
                target["token_stats"] = {**target["token_stats"], **new["token_stats"]}
                for key in _TOP_LEVEL:
                    if new[key] is not None:
                        target[key] = new[key]
                model_calls[position] = TrajectoryModelCall.model_validate(target).model_dump()
            else:
                model_calls.append(TrajectoryModelCall.model_validate(new).model_dump())
        capture_gaps = capture.get("gaps")
        for item in capture_gaps if isinstance(capture_gaps, list) else ():
            if not isinstance(item, dict):
                continue
            try:
                gaps.append(ObservationGap.model_validate(item).model_dump())
            except ValidationError:
                gaps.append(_gap("model_call_capture_gap_invalid"))

    if not isinstance(raw, dict):
        turns = derive_turns(invocations, model_calls, task_id, rollout_id, row.get("resolved"))

    if not model_calls:
        gaps.append(_gap("model_calls_unavailable"))
    if not turns and not producer_turns:
        gaps.append(_gap("turns_unavailable"))
    if not any(invocation["conversation"] for invocation in invocations):
        gaps.append(_gap("conversation_unavailable"))
    trajectory: Obj = {
        "schema_version": "1.0",
        "task_id": task_id,
        "rollout_id": rollout_id,
        "invocations": invocations,
        "turns": turns,
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "gaps": dedupe_gaps(gaps),
    }
    check_trajectory_identity(
        task_id,
        rollout_id,
        (invocation["invocation_id"] for invocation in invocations),
        (call["model_call_id"] for call in model_calls),
        ((t["invocation_id"], t["task_id"], t["rollout_id"], t["turn_no"]) for t in turns),
    )
    return trajectory
