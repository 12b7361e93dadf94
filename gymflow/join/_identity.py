"""Rollout identity: the capture key of a row and its projection identity (evidence.md §3)."""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["FILE_ID", "RowKeyError", "capture_key", "projection_identity"]

FILE_ID: Final = re.compile(r"[A-Za-z0-9._-]+")
"""Ids the CaptureStore can name a file after."""

_EXPLICIT_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class RowKeyError(ValueError):
    """The row's capture key is malformed (0.7.0 aborts the whole collection; gymflow skips the row)."""


def capture_key(row: dict[str, Any]) -> str | None:
    """The CaptureStore id of ``row``'s attempt, or None when the row carries no key.

    Raises :class:`RowKeyError` for a malformed ``_ng_rollout_id`` or ``_ng_attempt_index``, or a
    derived id that is not a valid file name.
    """
    explicit = row.get("_ng_rollout_id")
    if explicit is not None:
        if not isinstance(explicit, str) or not _EXPLICIT_ID.fullmatch(explicit):
            raise RowKeyError(f"_ng_rollout_id {explicit!r} is not a valid rollout id")
        base = explicit
    else:
        task = row.get("_ng_task_index")
        rollout = row.get("_ng_rollout_index")
        if task is None or rollout is None:
            return None
        base = f"{task}-{rollout}"
    attempt = row.get("_ng_attempt_index")
    if attempt is not None:
        try:
            number = int(attempt)
        except (TypeError, ValueError, OverflowError) as exc:
            raise RowKeyError(f"_ng_attempt_index {attempt!r} is not an integer") from exc
        if number > 0:
            base = f"{base}-a{number}"
    if not FILE_ID.fullmatch(base):
        raise RowKeyError(f"rollout id {base!r} cannot name a capture file")
    return base


def projection_identity(row: dict[str, Any]) -> tuple[str, str]:
    """``(task_id, rollout_id)`` of the trajectory projected from ``row``.

    0.7.0's quirks are kept: ``_ng_task_index`` must exist even when ``task_id`` is given (and
    ``_ng_rollout_index`` when there is no explicit id), else ``KeyError``; a malformed explicit
    id raises ``ValueError``.
    """
    task_index = row["_ng_task_index"]
    task: Any = task_index
    for name in ("task_id", "problem_id", "instance_id"):
        if row.get(name) is not None:
            task = row[name]
            break
    key = capture_key(row)
    rollout_id = key if key is not None else f"{task_index}-{row['_ng_rollout_index']}"
    return str(task), rollout_id
