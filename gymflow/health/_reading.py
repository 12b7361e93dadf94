"""Reading one record line into what the evaluation needs of it (spec §2): its identity fields,
its trajectory validated (or the reason it is not) and its transcript usage.

Two ways, one result. The exact way is ``orjson.loads`` and the trajectory's validation
(:func:`read_trajectory`). The fast way decodes the line with msgspec straight into the
trajectory's Structs, leaving the free-form payloads as text until a check reads one
(:data:`DEFERRED`); it is taken only for a line on which
msgspec and orjson agree (:func:`msgspec_agrees`, one pass in C) and whose decoding and validation
succeed. Anything else, unreadable lines included, goes the exact way, which decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import msgspec
import orjson

from gymflow._json_agreement import msgspec_agrees
from gymflow.evidence import TrajectoryModelCall, TrajectoryRecord, TrajectoryUnreadable
from gymflow.evidence.structs import read_trajectory, trajectory_decoding
from gymflow.evidence.trajectory import TrajectoryToolCall, TrajectoryTurn, conversation_too_deep
from gymflow.health._observed import response_usage, transcript_usage

_ASCII_WHITESPACE = b" \t\n\r\x0b\x0c"


class RecordRead(NamedTuple):
    """A line that holds a JSON object, as the evaluation sees it."""

    fields: Mapping[str, Any]
    """The record's top-level fields, or at least its identity fields and ``_ng_rollout_id``."""
    trajectory_rollout_id: Any
    """``ng_trajectory.rollout_id`` when ``ng_trajectory`` is an object, else None."""
    trajectory: TrajectoryRecord | None
    trajectory_error: str | None
    """The reference's name of the error when the trajectory is present but unreadable."""
    usage: tuple[int | None, int | None]


def is_blank(line: bytes) -> bool:
    # A record line starts with "{": only a line starting with whitespace is copied stripped.
    return not line or (line[0] in _ASCII_WHITESPACE and not line.strip(_ASCII_WHITESPACE))


def loads(line: bytes) -> Any:
    """The line's JSON value, surrounded by any ASCII whitespace (``\\v`` and ``\\f`` included)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return orjson.loads(line.strip(_ASCII_WHITESPACE))


def read_record(line: bytes) -> RecordRead | dict[str, Any]:
    """The line read, or the detail of its ``record_unreadable`` finding when it holds no JSON
    object."""
    return _read_fast(line) or _read_exact(line)


def _read_exact(line: bytes) -> RecordRead | dict[str, Any]:
    try:
        # orjson skips JSON whitespace itself; the line is copied stripped only when it fails
        record = loads(line)
    except orjson.JSONDecodeError:
        return {"reason": "rollout record is unreadable", "error": "JSONDecodeError"}
    if not isinstance(record, dict):
        return {"reason": "rollout record is unreadable", "error": "ValueError"}
    raw = record.get("ng_trajectory")
    trajectory: TrajectoryRecord | None = None
    error: str | None = None
    if raw is not None:
        try:
            trajectory = read_trajectory(raw)
        except TrajectoryUnreadable as exc:
            error = exc.error
    rollout_id = raw.get("rollout_id") if isinstance(raw, dict) else None
    return RecordRead(record, rollout_id, trajectory, error, transcript_usage(record))


# The free-form fields no check reads, and a call's response, which a check reads only for the
# calls cut short by a length limit: decoded when read. A line the fast way takes nests at most
# 200 levels (msgspec_agrees), so none of them can break the depth rule (255 levels).
DEFERRED = (
    (TrajectoryModelCall, "request"),
    (TrajectoryModelCall, "response"),
    (TrajectoryToolCall, "output"),
    (TrajectoryTurn, "question"),
)
_Trajectory, _validate = trajectory_decoding(DEFERRED)
_UNSET: Any = msgspec.UNSET


class _Response(msgspec.Struct, gc=False):
    usage: Any = None


_Record = msgspec.defstruct(
    "_Record",
    [
        ("task", Any, msgspec.field(name="_ng_task_index", default=_UNSET)),
        ("rollout", Any, msgspec.field(name="_ng_rollout_index", default=_UNSET)),
        ("stage", Any, msgspec.field(name="stage_index", default=_UNSET)),
        ("rollout_id", Any, msgspec.field(name="_ng_rollout_id", default=_UNSET)),
        ("trajectory", _Trajectory | None, msgspec.field(name="ng_trajectory", default=None)),
        ("response", _Response | None, None),
    ],
    gc=False,
    module=__name__,
)
"""The fields of a record line the evaluation reads; msgspec skips the others."""


_decode = msgspec.json.Decoder(_Record).decode
_FIELDS = (("_ng_task_index", "task"), ("_ng_rollout_index", "rollout"), ("stage_index", "stage"))


def _read_fast(line: bytes) -> RecordRead | None:
    if not msgspec_agrees(line):
        return None
    try:
        record: Any = _decode(line)
        trajectory: Any = record.trajectory
        if trajectory is not None:
            _validate(trajectory)
    except Exception:  # noqa: BLE001 - any doubt goes the exact way
        return None
    if trajectory is not None and conversation_too_deep(trajectory):
        return None
    fields = {name: value for name, field in _FIELDS if (value := getattr(record, field)) is not _UNSET}
    if record.rollout_id is not _UNSET:
        fields["_ng_rollout_id"] = record.rollout_id
    usage = response_usage(record.response.usage if record.response is not None else None)
    if trajectory is None:
        return RecordRead(fields, None, None, None, usage)
    return RecordRead(fields, trajectory.rollout_id, cast(TrajectoryRecord, trajectory), None, usage)
