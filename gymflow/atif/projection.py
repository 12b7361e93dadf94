"""Projection of an accepted trajectory into the ``/verify`` body (reverify.md §3.7).

The materialized row stays authoritative for the prompt, verifier fields and routing; the
trajectory contributes only ``response``. Item ids are ``atif_`` + 20 hex digits of SHA-256 over
the trajectory's identity seed and the item's components, joined by NUL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gymflow.atif.content_hash import canonical_dumps, content_sha256
from gymflow.atif.errors import AtifError
from gymflow.atif.model import ObservationResult, Step, Trajectory
from gymflow.atif.response_shape import NOT_NULLABLE, REQUEST_FIELDS, normalize_request_value, response_object
from gymflow.atif.shapes import text_parts
from gymflow.atif.usage import project_usage


def identity_seed(trajectory: Trajectory) -> str:
    """``trajectory_id`` when non-blank, else ``content:`` + the content hash."""
    if trajectory.trajectory_id is not None and trajectory.trajectory_id.strip():
        return trajectory.trajectory_id
    return f"content:{content_sha256(trajectory)}"


class _Ids:
    def __init__(self, seed: str) -> None:
        self.seed = seed

    def __call__(self, *components: str) -> str:
        digest = hashlib.sha256("\0".join((self.seed, *components)).encode()).hexdigest()
        return f"atif_{digest[:20]}"


def _output_text(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": None}


def _result_output(result: ObservationResult, where: str) -> Any:
    extra = result.extra
    has_tool_result = isinstance(extra, Mapping) and "tool_result" in extra
    if result.content is not None:
        if has_tool_result:
            raise AtifError(f"{where} contains both content and Relay extra.tool_result")
        texts = text_parts(result.content, where)
        if isinstance(result.content, str):
            return result.content
        return [{"text": text, "type": "input_text"} for text in texts]
    if has_tool_result:
        assert extra is not None
        value = extra["tool_result"]
        return value if isinstance(value, str) else canonical_dumps(value)
    raise AtifError(f"{where} has neither content nor Relay extra.tool_result")


class _Output:
    """Builds the output items step by step, enforcing the call/result rules of §3.6."""

    def __init__(self, ids: _Ids) -> None:
        self.ids = ids
        self.items: list[dict[str, Any]] = []
        self.call_ids: set[str] = set()
        self.answered: set[str] = set()

    def add_step(self, step: Step) -> None:
        prefix = f"step {step.step_id}"
        if step.reasoning_content is not None:
            self.items.append(
                {
                    "id": self.ids("reasoning", str(step.step_id)),
                    "summary": [{"text": step.reasoning_content, "type": "summary_text"}],
                    "type": "reasoning",
                    "encrypted_content": None,
                    "content": None,
                }
            )
        calls = step.tool_calls or ()
        texts = text_parts(step.message, f"{prefix} message")
        if texts or not calls:
            self.items.append(
                {
                    "id": self.ids("message", str(step.step_id)),
                    "content": [_output_text(text) for text in texts or [""]],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                    "phase": None,
                }
            )
        step_calls: set[str] = set()
        for call in calls:
            if not call.tool_call_id.strip():
                raise AtifError(f"{prefix} contains a tool call with a blank tool_call_id")
            if not call.function_name.strip():
                raise AtifError(f"{prefix} tool call {call.tool_call_id!r} has a blank function_name")
            if call.tool_call_id in step_calls:
                raise AtifError(f"{prefix} repeats tool_call_id {call.tool_call_id!r}")
            if call.tool_call_id in self.call_ids:
                raise AtifError(f"ATIF trajectory repeats tool_call_id {call.tool_call_id!r} across steps")
            step_calls.add(call.tool_call_id)
            self.call_ids.add(call.tool_call_id)
            self.items.append(
                {
                    "arguments": canonical_dumps(call.arguments),
                    "call_id": call.tool_call_id,
                    "name": call.function_name,
                    "type": "function_call",
                    "id": self.ids("function-call", call.tool_call_id),
                    "status": "completed",
                    "namespace": None,
                }
            )
        answered: set[str] = set()
        for index, result in enumerate(step.observation.results if step.observation else ()):
            where = f"{prefix} observation {index}"
            if result.subagent_trajectory_ref:
                raise AtifError(f"{where} references a subagent trajectory")
            call_id = result.source_call_id
            if call_id is None:
                raise AtifError(f"{where} has no source_call_id")
            if call_id not in step_calls:
                raise AtifError(f"{where} references unknown tool call {call_id!r}")
            if call_id in self.answered:
                raise AtifError(f"ATIF trajectory contains multiple outputs for tool call {call_id!r}")
            self.answered.add(call_id)
            answered.add(call_id)
            self.items.append(
                {
                    "id": self.ids("function-output", call_id, str(index)),
                    "call_id": call_id,
                    "output": _result_output(result, where),
                    "status": "completed",
                    "type": "function_call_output",
                    "created_by": None,
                }
            )
        missing = step_calls - answered
        if missing:
            listed = ", ".join(sorted(repr(call_id) for call_id in missing))
            raise AtifError(f"{prefix} has no observation result for tool call(s) {listed}")

    def check_ids(self) -> None:
        seen: set[str] = set()
        for index, item in enumerate(self.items):
            item_id = item.get("id")
            if not isinstance(item_id, str) or not item_id.strip():
                raise AtifError(f"projected response item {index} has a blank or invalid id")
            if item_id in seen:
                raise AtifError(f"projected response repeats item id {item_id!r}")
            seen.add(item_id)


def _created_at(agent_steps: list[Step]) -> float:
    for step in reversed(agent_steps):
        if step.timestamp is not None:
            moment = datetime.fromisoformat(step.timestamp.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                raise AtifError(
                    f"agent step {step.step_id} timestamp has no timezone and cannot produce a stable "
                    "created_at"
                )
            return moment.timestamp()
    return 0.0


def _model(trajectory: Trajectory) -> str:
    names = [step.model_name or trajectory.agent.model_name for step in trajectory.agent_steps]
    known = {name for name in names if name is not None}
    if len(known) > 1:
        raise AtifError(
            "ATIF agent steps resolve to multiple model names and cannot be represented by one "
            "verifier response"
        )
    if known and None in names:
        raise AtifError(
            "ATIF agent steps mix known and unknown model identity and cannot be represented by one "
            "verifier response"
        )
    return known.pop() if known else "unknown"


def project_response(trajectory: Trajectory) -> dict[str, Any]:
    """The Responses-shaped ``response`` of ``trajectory``, before request fields are applied."""
    agent_steps = trajectory.agent_steps
    if not agent_steps:
        raise AtifError("ATIF trajectory has no agent steps to score")
    ids = _Ids(identity_seed(trajectory))
    output = _Output(ids)
    for step in agent_steps:
        output.add_step(step)
    output.check_ids()
    return response_object(
        {
            "id": ids("response"),
            "created_at": _created_at(agent_steps),
            "model": _model(trajectory),
            "object": "response",
            "output": output.items,
            "parallel_tool_calls": any(len(step.tool_calls or ()) > 1 for step in agent_steps),
            "tool_choice": "auto",
            "tools": [],
            "status": "completed",
            "usage": project_usage(trajectory),
        }
    )


def build_body(materialized: Mapping[str, Any], trajectory: Trajectory) -> dict[str, Any]:
    """The ``/verify`` body: the materialized row as is, plus the projected ``response``."""
    response = project_response(trajectory)
    params = materialized.get("responses_create_params")
    if not isinstance(params, Mapping):
        raise AtifError("materialized input has no responses_create_params object")
    for name in REQUEST_FIELDS:
        if name not in params:
            continue
        value = params[name]
        if value is None and name in NOT_NULLABLE:
            continue
        response[name] = normalize_request_value(name, value)
    return {**materialized, "response": response}
