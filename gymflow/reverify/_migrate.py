"""``retry_invalid_judge_responses`` in recovery mode (reverify.md §2.9 step 5): rows of ``--rollouts``
holding an invalid judge response move into its sidecar, so the recovery re-verifies them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import orjson

from gymflow import storage
from gymflow.reverify._inputs import iter_rows

__all__ = ["migrate_invalid_judge_rows"]


def _has_deliverable(row: dict[str, Any]) -> bool:
    directory = row.get("deliverables_dir")
    if not isinstance(directory, str) or not directory or not storage.is_local(directory):
        return False
    return os.path.isdir(directory) and any(os.scandir(directory))


def _moved(row: dict[str, Any]) -> bytes:
    out = dict(row)
    out["_ng_failure_class"] = out.get("_ng_failure_class") or "judge_invalid"
    out.pop("_ng_failure_terminal", None)
    out["_ng_migrated_invalid_judge_response"] = True
    if _has_deliverable(out):
        out["reuse_cached_deliverable"] = True
    try:
        return orjson.dumps(out) + b"\n"
    except TypeError:
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def migrate_invalid_judge_rows(rollouts: str, sidecar: str) -> int:
    """Move the rows with a truthy ``invalid_judge_response``; both files rewritten atomically
    (the sidecar first, so an interruption leaves a row in both files, never in neither).
    Idempotent: a second call finds nothing to move. Returns the number of rows moved."""
    moved: list[bytes] = []
    for _, _, _, row in iter_rows(rollouts):
        if row.get("invalid_judge_response"):
            moved.append(_moved(row))
    if not moved:
        return 0

    def sidecar_lines() -> Iterator[bytes]:
        if storage.isfile(sidecar):
            for _, line in storage.iter_lines(sidecar):
                yield line if line.endswith(b"\n") else line + b"\n"
        yield from moved

    def kept_lines() -> Iterator[bytes]:
        for _, line in storage.iter_lines(rollouts):
            if line.strip() and orjson.loads(line).get("invalid_judge_response"):
                continue
            yield line if line.endswith(b"\n") or not line.strip() else line + b"\n"

    storage.write_atomic(sidecar, b"".join(sidecar_lines()))
    storage.write_atomic(rollouts, b"".join(kept_lines()))
    return len(moved)
