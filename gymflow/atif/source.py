"""ATIF input for ``gymflow eval reverify --input-format atif``: manifest + trajectories -> items.

:func:`atif_items` reads the materialized inputs and the manifest, loads each selected trajectory
(strict JSON, the v1.7 profile, the shapes checked before the hash), enforces the manifest's pin,
the trajectory's declared source and the one-to-one batch rules, and projects each entry into the
``/verify`` body the reverify core sends (reverify.md §3.2-§3.8). Nothing is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gymflow import storage
from gymflow.atif import strict_json
from gymflow.atif.content_hash import content_sha256
from gymflow.atif.errors import AtifError
from gymflow.atif.fields import ProfileError
from gymflow.atif.inputs import index_materialized, read_materialized
from gymflow.atif.manifest import ManifestEntry, read_manifest
from gymflow.atif.model import Trajectory
from gymflow.atif.paths import resolve_trajectory
from gymflow.atif.prefetch import fetched_in_order
from gymflow.atif.profile import parse_trajectory
from gymflow.atif.projection import build_body
from gymflow.atif.reading import read_bytes
from gymflow.atif.shapes import check_supported
from gymflow.verify_items import Item

PROVENANCE_KEY = "_ng_atif_provenance"
REMOTE_READERS = 8
"""Trajectory reads kept in flight when the manifest is on an object store."""


@dataclass(frozen=True)
class LoadedTrajectory:
    """A trajectory file that passed strict parsing, the profile and the pre-hash shape checks."""

    path: str
    data: bytes
    sha256: str
    """Hex SHA-256 of ``data``: the ``source_sha256`` of ``_ng_atif_provenance``."""
    trajectory: Trajectory


def load_trajectory(path: str) -> LoadedTrajectory:
    """Read and check the trajectory at ``path`` (§3.4 step 1)."""
    return check_trajectory(path, read_bytes(path, "ATIF trajectory"))


def check_trajectory(path: str, data: bytes) -> LoadedTrajectory:
    """Parse and check the bytes ``data`` read from ``path`` (§3.4 step 1, after reading)."""
    try:
        document = strict_json.loads(data)
        trajectory = parse_trajectory(document)
    except (ValueError, ProfileError) as exc:
        raise AtifError(f"invalid ATIF trajectory {path}: {exc}") from exc
    check_supported(trajectory, document)
    return LoadedTrajectory(
        path=path, data=data, sha256=hashlib.sha256(data).hexdigest(), trajectory=trajectory
    )


def _check_declared_source(trajectory: Trajectory, key: tuple[int, int]) -> None:
    """``extra.nemo_gym.source.{task_index, rollout_index}``, when present, must match the manifest."""
    extra = trajectory.extra
    nemo_gym = extra.get("nemo_gym") if isinstance(extra, Mapping) else None
    source = nemo_gym.get("source") if isinstance(nemo_gym, Mapping) else None
    if not isinstance(source, Mapping):
        return
    for name, expected in zip(("task_index", "rollout_index"), key, strict=True):
        if name not in source:
            continue
        value = source[name]
        if type(value) is not int or value < 0:
            raise AtifError(f"Gym ATIF source {name} is invalid: {value!r}")
        if value != expected:
            raise AtifError(f"Gym ATIF source {name} {value} conflicts with manifest value {expected}")


def provenance(trajectory: Trajectory, source_sha256: str) -> dict[str, Any]:
    """The ``_ng_atif_provenance`` stamp: no local path, no content hash (§3.8)."""
    return {
        "trajectory_id": trajectory.trajectory_id,
        "session_id": trajectory.session_id,
        "source_sha256": source_sha256,
        "schema_version": trajectory.schema_version,
        "projection_status": "complete",
    }


def reverify_source_sha256(materialized_line: bytes, trajectory_bytes: bytes) -> str:
    """The ``source_sha256`` of reverify.md §4 point 4 for ATIF: the materialized line, ``\\n``,
    the trajectory file's bytes."""
    digest = hashlib.sha256(materialized_line)
    digest.update(b"\n")
    digest.update(trajectory_bytes)
    return digest.hexdigest()


class _Batch:
    """The one-to-one rules across entries (§3.4 step 5)."""

    def __init__(self) -> None:
        self.keys: set[tuple[int, int]] = set()
        self.paths: set[str] = set()
        self.hashes: set[str] = set()
        self.identities: set[tuple[str, str]] = set()

    def claim_key(self, entry: ManifestEntry) -> None:
        if entry.key in self.keys:
            raise AtifError(f"manifest maps materialized rollout {entry.key} more than once")
        self.keys.add(entry.key)

    def claim_source(self, loaded: LoadedTrajectory) -> None:
        if loaded.path in self.paths:
            raise AtifError(f"manifest uses ATIF source path {loaded.path} more than once")
        self.paths.add(loaded.path)
        if loaded.sha256 in self.hashes:
            raise AtifError(f"manifest uses ATIF source content {loaded.sha256} more than once")
        self.hashes.add(loaded.sha256)
        trajectory_id = (loaded.trajectory.trajectory_id or "").strip()
        identity = (
            ("trajectory_id", trajectory_id)
            if trajectory_id
            else ("content_sha256", content_sha256(loaded.trajectory))
        )
        if identity in self.identities:
            raise AtifError(f"manifest repeats ATIF trajectory identity {identity}")
        self.identities.add(identity)


def atif_items(
    manifest: str,
    inputs: str,
    *,
    limit: int | None,
    allow_outside_manifest: bool,
    warn: Callable[[str], None],
) -> list[Item]:
    """The items to re-verify, one per selected manifest entry, in manifest order.

    ``limit`` keeps the first N manifest entries (the unpinned warning still counts all of them);
    ``allow_outside_manifest`` lets ``trajectory_path`` leave the manifest's directory. Raises
    :class:`~gymflow.atif.errors.AtifError` with the spec's message on the first problem.
    """
    rows = read_materialized(inputs)
    entries = read_manifest(manifest, warn=warn)
    if limit is not None:
        entries = entries[:limit]
    materialized = index_materialized(rows)
    batch = _Batch()
    items: list[Item] = []

    def fetch(entry: ManifestEntry) -> tuple[str, bytes]:
        path = resolve_trajectory(manifest, entry, allow_outside=allow_outside_manifest)
        return path, read_bytes(path, "ATIF trajectory")

    workers = 0 if storage.is_local(manifest) else REMOTE_READERS
    for entry, fetched in fetched_in_order(entries, fetch, workers=workers):
        batch.claim_key(entry)
        path, data = fetched()
        loaded = check_trajectory(path, data)
        if entry.expected_sha256 is not None and loaded.sha256 != entry.expected_sha256:
            raise AtifError(
                f"ATIF source hash mismatch for {path}: expected {entry.expected_sha256}, got {loaded.sha256}"
            )
        _check_declared_source(loaded.trajectory, entry.key)
        row = materialized.get(entry.key)
        if row is None:
            raise AtifError(f"manifest entry {path} has no matching materialized input {entry.key}")
        body = build_body(row.row, loaded.trajectory)
        batch.claim_source(loaded)
        body[PROVENANCE_KEY] = provenance(loaded.trajectory, loaded.sha256)
        items.append(
            Item(
                task=entry.task,
                rollout=entry.rollout,
                body=body,
                source_sha256=reverify_source_sha256(row.line, loaded.data),
                mode="atif",
            )
        )
    return items
