"""What the metrics need from one parsed rollout row, extracted once and kept instead of the row.

A :class:`RowFacts` holds the identity, the mask flag, the numeric fields of aggregate.md §3.2, the
``rollout_infos`` entry of §3.4 and (for the opt-in pass@k family) the score and answer. Everything
else of the row (responses, trajectories, payloads) is dropped as soon as the row is parsed, so
a row costs the same whatever its size (and, spilled, no memory: ``gymflow.aggregate._spill``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gymflow.errors import InputError

__all__ = ["Answer", "RowFacts", "ScoreSpec", "extract", "read_index", "shared_names"]

Number = int | float
Answer = str | int | float | bytes | None


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """How pass@k scores a row: ``score_field`` published as ``accuracy``, optional ``answer_key``."""

    score_field: str = "reward"
    answer_key: str | None = None


_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def shared_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The one tuple kept of these names (rows' layouts are compared by identity)."""
    # Rows of one run share a handful of key layouts: keep one tuple of names per layout.
    return _NAMES.setdefault(names, names)


@dataclass(slots=True)
class RowFacts:
    """The numbers one row contributes to the metrics of its group.

    Names and values are kept as parallel tuples (the name tuples shared between rows) so a row
    costs a few hundred bytes whatever its size on disk.
    """

    task: int
    rollout: int
    masked: bool
    field_names: tuple[str, ...]
    field_values: tuple[Number, ...]
    info_names: tuple[str, ...]
    info_values: tuple[Any, ...]
    score: float = 0.0
    answer: Answer = None

    @property
    def fields(self) -> dict[str, Number]:
        """§3.2 numeric fields, in discovery order."""
        return dict(zip(self.field_names, self.field_values, strict=True))

    @property
    def info(self) -> dict[str, Any]:
        """The row's ``rollout_infos`` entry (§3.4)."""
        out: dict[str, Any] = {
            "rollout_id": f"{self.task}:{self.rollout}",
            "_ng_task_index": self.task,
            "_ng_rollout_index": self.rollout,
        }
        out.update(zip(self.info_names, self.info_values, strict=True))
        return out


def _numeric(value: object) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return True
    return isinstance(value, float) and not math.isnan(value)


def _as_number(value: Number) -> Number:
    # JSON booleans count as 1 / 0 (bool is an int subclass; make the int explicit for output).
    return int(value) if isinstance(value, bool) else _wide(value) if isinstance(value, int) else value


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _wide(value: int) -> Number:
    """A metric value as the reference's reader sees it: integers beyond 64 bits are floats
    (rows keep them exact; only the statistics use the float)."""
    return value if _INT_MIN <= value <= _INT_MAX else float(value)


def read_index(row: Mapping[str, Any], key: str) -> int:
    """``_ng_task_index`` / ``_ng_rollout_index``: missing or null reads as 0; must be an integer."""
    value = row.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {orjson.dumps(value).decode()}")
    return value


_INTS: dict[int, int] = {}
_FLOATS: dict[float, float] = {}
_ZERO, _NEGATIVE_ZERO = 0.0, -0.0
_INTERNED_MAX = 2**16
"""Distinct values kept per type: a run's rows repeat a few rewards and token counts."""


def _interned(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with each int and non-zero float replaced by the one object of its value kept
    so far (rows then share them instead of holding a copy each); other values as they are."""
    out = []
    for value in values:
        kind = type(value)
        table: dict[Any, Any] | None = _INTS if kind is int else _FLOATS if kind is float else None
        if kind is float and not value:  # 0.0 and -0.0 are equal keys: one object per sign
            value = _ZERO if math.copysign(1.0, value) > 0 else _NEGATIVE_ZERO
        elif table is not None:
            kept = table.get(value)
            if kept is not None:
                value = kept
            elif len(table) < _INTERNED_MAX:
                table[value] = value
        out.append(value)
    return tuple(out)


def _answer(value: object) -> Answer:
    if value is None or isinstance(value, str | int | float):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def extract(row: Mapping[str, Any], spec: ScoreSpec | None = None, where: str = "") -> RowFacts:
    """Extract a row's :class:`RowFacts` (aggregate.md §3.1, §3.2, §3.4, §4).

    ``where`` names the row in error messages (``'<file>' line N``).
    """
    try:
        task = read_index(row, "_ng_task_index")
        rollout = read_index(row, "_ng_rollout_index")
    except ValueError as exc:
        raise InputError(f"{where}: {exc}" if where else str(exc)) from None
    masked = bool(row.get("mask_sample"))
    response = row.get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        usage = None

    # Numeric, non-"_" top-level entries (most values of a row are objects or strings: skip fast).
    top: dict[str, Number] = {}
    for name, value in row.items():
        kind = type(value)
        if (kind is float or kind is int or kind is bool) and name[:1] != "_" and name != "mask_sample":
            if kind is not float or value == value:  # NaN counts as missing
                top[name] = int(value) if kind is bool else _wide(value) if kind is int else value

    # §3.2: top-level entries overlaid by usage entries (usage wins), then the numeric ones.
    fields = top
    info: dict[str, Any] = {}
    if "reward" in row:
        reward = row["reward"]
        info["reward"] = int(reward) if isinstance(reward, bool) else reward
    if usage is not None:
        fields = dict(top)
        for name, value in usage.items():
            if name[:1] == "_" or name == "mask_sample":
                continue
            if _numeric(value):
                fields[name] = info[name] = _as_number(value)
            else:
                fields.pop(name, None)
    # §3.4: reward (if present, even null), usage numerics, then top-level numerics (top-level wins).
    for name, value in top.items():
        if name != "reward":
            info[name] = value

    field_names, field_values = shared_names(tuple(fields)), tuple(fields.values())
    info_names, info_values = shared_names(tuple(info)), tuple(info.values())
    if info_names is field_names and all(a is b for a, b in zip(field_values, info_values, strict=True)):
        info_values = field_values = _interned(field_values)  # the usual row: one tuple for both
    else:
        field_values, info_values = _interned(field_values), _interned(info_values)
    facts = RowFacts(
        task=task,
        rollout=rollout,
        masked=masked,
        field_names=field_names,
        field_values=field_values,
        info_names=info_names,
        info_values=info_values,
    )
    if spec is not None:
        raw = row.get(spec.score_field)
        facts.score = float(raw) if isinstance(raw, int | float) and _numeric(raw) else 0.0
        if spec.answer_key is not None:
            facts.answer = _answer(row.get(spec.answer_key))
    return facts
