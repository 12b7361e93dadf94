"""Stamping and routing of ``/verify`` results (reverify.md §2.6) and the 🚨 console line (§2.11)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

from gymflow.reverify._classes import FailureClass

__all__ = ["Destination", "alarm_line", "classify", "reverify_key", "stamp"]

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
    for name in ("_ng_task_index", "_ng_rollout_index"):
        row.pop(name, None)
        row[name] = body.get(name)
    for name in _STAMPS:
        if name in body:
            row.pop(name, None)
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
