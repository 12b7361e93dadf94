"""The ATIF manifest: one trajectory per JSONL row, joined explicitly to a rollout (reverify.md §3.2)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymflow.atif import strict_json
from gymflow.atif.errors import AtifError
from gymflow.atif.reading import iter_lines

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INDEX_NAMES = {"task": ("_ng_task_index", "task_index"), "rollout": ("_ng_rollout_index", "rollout_index")}


@dataclass(frozen=True)
class ManifestEntry:
    """One manifest row: which trajectory file scores which materialized rollout."""

    row: int
    """Physical line number in the manifest (from 1)."""
    trajectory_path: str
    task: int
    rollout: int
    expected_sha256: str | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.task, self.rollout)


class _RowError(ValueError):
    pass


def _index(obj: dict[str, Any], names: tuple[str, str]) -> tuple[int, str]:
    alias, name = names
    field = alias if alias in obj else name
    if field not in obj:
        raise _RowError(f"{alias}: Field required")
    value = obj[field]
    if type(value) is not int:
        raise _RowError(f"{field}: Input should be a valid integer")
    if value < 0:
        raise _RowError(f"{field}: Input should be greater than or equal to 0")
    return value, field


def _entry(row: int, document: Any) -> ManifestEntry:
    if not isinstance(document, dict):
        raise _RowError("Input should be an object")
    if "trajectory_path" not in document:
        raise _RowError("trajectory_path: Field required")
    path = document["trajectory_path"]
    if not isinstance(path, str):
        raise _RowError("trajectory_path: Input is not a valid path")
    if not path:
        raise _RowError("trajectory_path is empty")
    task, task_field = _index(document, _INDEX_NAMES["task"])
    rollout, rollout_field = _index(document, _INDEX_NAMES["rollout"])
    expected = document.get("expected_sha256")
    if expected is not None:
        if not isinstance(expected, str):
            raise _RowError("expected_sha256: Input should be a valid string")
        if not _SHA256.match(expected):
            raise _RowError(f"expected_sha256: String should match pattern '{_SHA256.pattern}'")
    known = {"trajectory_path", task_field, rollout_field, "expected_sha256"}
    for key in document:
        if key not in known:
            raise _RowError(f"{key}: Extra inputs are not permitted")
    return ManifestEntry(row=row, trajectory_path=path, task=task, rollout=rollout, expected_sha256=expected)


def read_manifest(url: str, *, warn: Callable[[str], None]) -> list[ManifestEntry]:
    """Every entry of the manifest at ``url`` (blank lines skipped), warning once about unpinned ones."""
    entries: list[ManifestEntry] = []
    for number, line in iter_lines(url, "ATIF manifest"):
        if not line.strip():
            continue
        try:
            entries.append(_entry(number, strict_json.loads(line)))
        except ValueError as exc:
            raise AtifError(f"invalid ATIF manifest row {number} in {url}: {exc}") from exc
    if not entries:
        raise AtifError(f"ATIF manifest {url} contains no entries")
    unpinned = sum(entry.expected_sha256 is None for entry in entries)
    if unpinned:
        warn(
            f"ATIF manifest {url} has {unpinned} of {len(entries)} entries without expected_sha256; "
            "Gym will record each observed source hash but cannot compare those files with a "
            "manifest-pinned digest."
        )
    return entries
