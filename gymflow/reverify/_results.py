"""Stamping and routing of ``/verify`` results (reverify.md §2.6) and the 🚨 console line (§2.11)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from gymflow.reverify._classes import FailureClass

__all__ = ["Destination", "alarm_line", "answer_problem", "classify", "reverify_key", "stamp"]

Destination = Literal["output", "sidecar", "none"]

KEY_PREFIX = b"gymflow-reverify-key/1\n"
_STAMPS = ("agent_ref", "_ng_environment_server", "task_source", "skills_ref", "_ng_atif_provenance")


def reverify_key(mode: str, source_sha256: str, verifier_sha256: str) -> str:
    """§4 point 4: SHA-256 hex of
    ``"gymflow-reverify-key/1\\n" + mode + "\\n" + source + "\\n" + verifier``."""
    text = KEY_PREFIX + f"{mode}\n{source_sha256}\n{verifier_sha256}".encode()
    return hashlib.sha256(text).hexdigest()


def stamp(
    row: dict[str, Any], body: Mapping[str, Any], key: str, retry_invalid_judge: bool
) -> dict[str, Any]:
    """Re-stamp ``row`` (an answer or a failure row) from its request ``body``, in place."""
    if retry_invalid_judge and row.get("invalid_judge_response") and row.get("_ng_failure_class") is None:
        assigned: FailureClass = "judge_invalid"
        if row.get("invalid_judge_retryable") is False:
            assigned = "permanent"
            row["_ng_failure_terminal"] = True
        row["_ng_failure_class"] = assigned
    # Assigned as 0.7.0 assigns them: a field the answer already has (a server echoing
    # ``agent_ref``, a failure row holding the body) keeps its place; the others follow, in order.
    for name in ("_ng_task_index", "_ng_rollout_index"):
        row[name] = body.get(name)
    for name in _STAMPS:
        if name in body:
            row[name] = body[name]
    row.pop("_ng_reverify_key", None)
    row["_ng_reverify_key"] = key
    return row


def classify(row: dict[str, Any], atif: bool) -> Destination:
    """Where a stamped row goes; sets ``_ng_failure_class`` to ``kill_shaped`` where §2.6 says so."""
    no_persist = bool(row.get("_ng_no_persist"))
    if no_persist and not atif:
        return "none"
    if no_persist or row.get("_ng_failure_class") is not None:
        if row.get("_ng_failure_class") is None:
            default: FailureClass = "kill_shaped"
            row["_ng_failure_class"] = default
        return "sidecar"
    return "output"


REQUIRED_OBJECTS = ("responses_create_params", "response")
"""Fields every scored row carries as JSON objects (Gym's verify response requires them)."""


_TYPE_NAMES: dict[type, str] = {
    bool: "a boolean",
    str: "a string",
    type(None): "null",
    list: "an array",
    dict: "an object",
}


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def answer_problem(answer: Mapping[str, Any]) -> str | None:
    """Why a 2xx ``/verify`` answer cannot be kept as a scored row, or None when it can.

    A scored row needs a ``reward`` that is a finite JSON number (a string such as ``"1.0"``,
    ``null``, a boolean, NaN or infinity is refused; reverify.md §3.10 point 5), the objects of
    :data:`REQUIRED_OBJECTS`, and ``mask_sample``, when present, a boolean.
    """
    if "reward" not in answer:
        return "an answer without `reward`"
    reward = answer["reward"]
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        kind = _TYPE_NAMES.get(type(reward), type(reward).__name__)
        return f"`reward` {_shown(reward)} ({kind}), not a number"
    if isinstance(reward, float) and not math.isfinite(reward):
        return f"`reward` {reward!r}, not a finite number"
    for name in REQUIRED_OBJECTS:
        if not isinstance(answer.get(name), Mapping):
            if name not in answer:
                return f"an answer without `{name}`"
            return f"`{name}` {_shown(answer[name])}, not an object"
    mask = answer.get("mask_sample", False)
    if not isinstance(mask, bool):
        return f"`mask_sample` {_shown(mask)}, not a boolean"
    return None


def summary(row: Mapping[str, Any]) -> dict[str, Any]:
    agent_ref = row.get("agent_ref")
    out = {
        "_ng_task_index": row.get("_ng_task_index"),
        "_ng_rollout_index": row.get("_ng_rollout_index"),
        "agent_name": agent_ref.get("name") if isinstance(agent_ref, Mapping) else None,
        "environment_server": row.get("_ng_environment_server"),
        "taskset": _taskset(row),
    }
    return {k: v for k, v in out.items() if v is not None}


def _taskset(row: Mapping[str, Any]) -> str | None:
    """``task_id.taskset`` of a materialized-task row (``task_id`` an object and ``task_input``
    present), when it is a non-empty string."""
    task_id = row.get("task_id")
    if not isinstance(task_id, Mapping) or "task_input" not in row:
        return None
    taskset = task_id.get("taskset")
    return taskset if isinstance(taskset, str) and taskset else None


def alarm_line(row: Mapping[str, Any]) -> str:
    """The line printed for each sidecar row (§2.11)."""
    detail = str(row.get("_ng_failure_message") or row.get("error") or "")[:200]
    return (
        "🚨 [rollout_reverification] rollout dropped from the score: "
        f"row={json.dumps(summary(row), sort_keys=True)} class={row.get('_ng_failure_class')} error={detail}"
    )
