"""Content and status predicates shared by the checks (health spec §2.5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymflow.evidence import TrajectoryModelCall

_CONTENT_MEMBERS = (
    "text",
    "content",
    "output_text",
    "answer",
    "refusal",
    "encrypted_content",
    "reasoning",
    "reasoning_content",
    "summary",
)
_TOOL_CALL_TYPES = frozenset(
    {
        "function_call",
        "tool_call",
        "tool_use",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "file_search_call",
        "web_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "custom_tool_call",
    }
)
_FAILED_STATUSES = frozenset({"failed", "error", "cancelled"})
_LENGTH_REASONS = frozenset({"length", "max_output_tokens", "max_tokens"})


def non_empty(value: Any) -> bool:
    """Whether a saved answer, reasoning or response part carries any content."""
    if isinstance(value, str):
        return bool(value) and not value.isspace()
    if isinstance(value, list):
        for item in value:
            if non_empty(item):
                return True
        return False
    if isinstance(value, dict):
        for member in _CONTENT_MEMBERS:
            part = value.get(member)
            if part is not None and non_empty(part):
                return True
    return False


def has_tool_call(value: Any) -> bool:
    """Whether an answer holds a tool call.

    A ``type`` that is an array or object raises ``TypeError`` (unhashable), as in the reference;
    the runner reports that as ``check_execution_error``.
    """
    if isinstance(value, list):
        return any(has_tool_call(item) for item in value)
    if isinstance(value, dict):
        return value.get("type") in _TOOL_CALL_TYPES or bool(value.get("tool_calls"))
    return False


def response_has_content(response: Any) -> bool:
    """Whether a saved response has answer or reasoning content, in any supported dialect."""
    if not isinstance(response, dict):
        return False
    if non_empty(response.get("output_text")) or non_empty(response.get("content")):
        return True
    choice_counts = False
    choices = response.get("choices")
    if choices:
        for choice in choices:  # a number raises TypeError, as in the reference
            if not isinstance(choice, dict):
                continue
            if non_empty(choice.get("text")):
                choice_counts = True
                break
            message = choice.get("message") or {}
            if non_empty(message.get("content")):  # a non-object message raises AttributeError
                choice_counts = True
                break
    return non_empty(response.get("output")) or choice_counts


def is_failed(call: TrajectoryModelCall) -> bool:
    meta = call.response_metadata
    return (
        (meta.status_code is not None and meta.status_code >= 400)
        or bool(meta.error_category)
        or meta.response_status in _FAILED_STATUSES
    )


def is_successful(call: TrajectoryModelCall) -> bool:
    status = call.response_metadata.status_code
    return not is_failed(call) and (status is None or 200 <= status < 400)


def is_length_limited(call: TrajectoryModelCall) -> bool:
    return call.response_metadata.finish_reason in _LENGTH_REASONS


def call_locator(call: TrajectoryModelCall) -> dict[str, Any]:
    """The per-call locator: the call id, or the response id when the call id is empty."""
    return {"call_id": call.model_call_id or call.response_metadata.response_id}


def failed_chains(
    calls: Sequence[TrajectoryModelCall], failed: Sequence[bool]
) -> list[tuple[int, list[int]]]:
    """Chains of calls (one per ``model_ref``) that ended on a failed call, in order of first
    appearance, each as (reported position, positions in the chain); ``failed`` holds
    :func:`is_failed` of each call."""
    if not any(failed):  # no chain can end on a failed call
        return []
    chains: dict[tuple[str, str] | None, list[int]] = {}
    for position, call in enumerate(calls):
        ref = call.response_metadata.model_ref
        chains.setdefault(None if ref is None else (ref.type, ref.name), []).append(position)
    ended: list[tuple[int, list[int]]] = []
    for positions in chains.values():
        flags = [failed[p] for p in positions]
        if not any(flags):
            continue
        if all(flags):
            last = max(positions, key=lambda p: (calls[p].started_at or 0.0, p))
        elif all(calls[p].started_at is not None for p in positions):
            last = max(positions, key=lambda p: (calls[p].started_at, p))
            if not failed[last]:
                continue
        else:
            continue
        ended.append((last, positions))
    return ended
