"""Materialized inputs read in ATIF mode: strict, and a repeated key is an error (reverify.md §3.3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymflow.atif import strict_json
from gymflow.atif.errors import AtifError
from gymflow.atif.reading import iter_lines


@dataclass(frozen=True)
class MaterializedRow:
    """One materialized input row and the exact bytes of its line (without the terminator)."""

    row: dict[str, Any]
    line: bytes


def read_materialized(url: str) -> list[MaterializedRow]:
    """Every non-blank row of ``url``, parsed strictly; each must be a JSON object."""
    rows: list[MaterializedRow] = []
    for number, line in iter_lines(url, "materialized inputs"):
        if not line.strip():
            continue
        try:
            row = strict_json.loads(line)
        except ValueError as exc:
            raise AtifError(f"invalid materialized input row {number} in {url}: {exc}") from exc
        if not isinstance(row, dict):
            raise AtifError(f"materialized input row {number} in {url} is not an object")
        rows.append(MaterializedRow(row=row, line=line))
    return rows


def _index_value(row: Mapping[str, Any], name: str, number: int) -> int:
    value = row.get(name)
    if type(value) is not int or value < 0:
        raise AtifError(f"materialized input row {number} has invalid {name}: {value!r}")
    return value


def index_materialized(rows: list[MaterializedRow]) -> dict[tuple[int, int], MaterializedRow]:
    """``rows`` by (task, rollout); ``number`` in messages counts non-blank rows."""
    indexed: dict[tuple[int, int], MaterializedRow] = {}
    for number, item in enumerate(rows, start=1):
        task = _index_value(item.row, "_ng_task_index", number)
        rollout = _index_value(item.row, "_ng_rollout_index", number)
        agent_ref = item.row.get("agent_ref")
        name = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
        if not isinstance(name, str) or not name.strip():
            raise AtifError(f"materialized input row {number} has invalid agent_ref.name: {name!r}")
        key = (task, rollout)
        if key in indexed:
            raise AtifError(f"duplicate materialized input key {key}")
        indexed[key] = item
    return indexed
