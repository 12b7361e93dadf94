"""Per-shard sidecars: ``<stem>_failures.jsonl`` and ``<stem>_materialized_inputs.jsonl`` (§1.4, §1.5).

Read per shard, in the shard's task. Only what coverage and the count-as-zero rules need is kept:
identities, failure classes, and the numeric fields a zero row would carry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gymflow import storage
from gymflow.aggregate._rows import read_index
from gymflow.aggregate._scan import GroupRef, parse_line, resolve_group
from gymflow.aggregate._select import failures_path, materialized_path
from gymflow.errors import InputError

__all__ = ["FailureRow", "MaterializedRow", "SidecarFile", "ShardSidecars", "read_sidecars"]

_FAILURE_KEYS = ("failure_kind", "failure_reason")
_NOT_DATASET = ("responses_create_params", "response")


@dataclass(frozen=True)
class SidecarFile:
    """A sidecar that exists: where it is and the digest of its bytes (for provenance)."""

    url: str
    sha256: str
    nbytes: int


@dataclass
class FailureRow:
    """The last sidecar row of one rollout key whose shard has no row for it."""

    group: GroupRef
    task: int
    rollout: int
    failure_class: str
    names_server: bool
    zero_row: dict[str, Any]


@dataclass
class MaterializedRow:
    """A materialized input's identity and the numeric dataset fields a zero row may inherit."""

    group: GroupRef
    task: int
    rollout: int
    names_server: bool
    stub: dict[str, Any]
    dataset: dict[str, Any]


@dataclass
class ShardSidecars:
    failures_file: SidecarFile | None = None
    materialized_file: SidecarFile | None = None
    materialized_expected: str | None = None
    failures: list[FailureRow] = field(default_factory=list)
    materialized: list[MaterializedRow] = field(default_factory=list)


def _numeric(value: object) -> bool:
    return isinstance(value, int | float)


def _rows(url: str) -> Iterator[tuple[int, dict[str, Any]]]:
    line_number = 0
    for _, line in storage.iter_lines(url):
        line_number += 1
        if line and not line.isspace():
            yield line_number, parse_line(url, line_number, line)


def _key(url: str, line: int, row: Mapping[str, Any]) -> tuple[int, int]:
    try:
        return read_index(row, "_ng_task_index"), read_index(row, "_ng_rollout_index")
    except ValueError as exc:
        raise InputError(f"{url!r} line {line}: {exc}") from None


def _names_server(row: Mapping[str, Any]) -> bool:
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
    return bool(agent) or bool(row.get("_ng_environment_server"))


def _zero_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The sidecar row as a scored zero: failure diagnostics removed, only metric-relevant keys."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name.startswith("_ng_failure_") or name in _FAILURE_KEYS:
            continue
        if name in ("_ng_task_index", "_ng_rollout_index", "agent_ref", "_ng_environment_server"):
            out[name] = value
        elif name == "response" and isinstance(value, Mapping) and isinstance(value.get("usage"), Mapping):
            out[name] = {"usage": value["usage"]}
        elif not name.startswith("_") and _numeric(value):
            out[name] = value
    out["mask_sample"] = False
    out.setdefault("reward", 0.0)
    return out


def _digest_of(url: str) -> SidecarFile:
    sha = hashlib.sha256()
    count = 0
    for _, line in storage.iter_lines(url):
        sha.update(line)
        count += len(line)
    return SidecarFile(url, sha.hexdigest(), count)


def read_sidecars(
    shard: str,
    shard_keys: Collection[tuple[int, int]],
    agent_environments: Mapping[str, str] | None = None,
) -> ShardSidecars:
    """Read a shard's sidecars, if present (a missing one is not an error here)."""
    environments = agent_environments or {}
    out = ShardSidecars()
    failures = failures_path(shard)
    if storage.isfile(failures):
        out.failures_file = _digest_of(failures)
        latest: dict[tuple[int, int], FailureRow] = {}
        for line, row in _rows(failures):
            key = _key(failures, line, row)
            if key in shard_keys:
                continue
            klass = row.get("_ng_failure_class")
            latest[key] = FailureRow(
                group=resolve_group(row, environments),
                task=key[0],
                rollout=key[1],
                failure_class=klass if isinstance(klass, str) and klass else "unknown",
                names_server=_names_server(row),
                zero_row=_zero_row(row),
            )
        out.failures = list(latest.values())
    materialized = materialized_path(shard)
    out.materialized_expected = materialized
    if storage.isfile(materialized):
        out.materialized_file = _digest_of(materialized)
        for line, row in _rows(materialized):
            task, rollout = _key(materialized, line, row)
            stub: dict[str, Any] = {"_ng_task_index": task, "_ng_rollout_index": rollout}
            stub["agent_ref"] = row.get("agent_ref")
            if "_ng_environment_server" in row:
                stub["_ng_environment_server"] = row["_ng_environment_server"]
            stub["reward"] = 0.0
            dataset = {
                name: value
                for name, value in row.items()
                if not name.startswith("_") and name not in _NOT_DATASET and _numeric(value)
            }
            out.materialized.append(
                MaterializedRow(
                    resolve_group(row, environments), task, rollout, _names_server(row), stub, dataset
                )
            )
    return out
