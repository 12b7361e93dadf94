"""Shard selection (aggregate.md §1.2) and the paths derived from the output and each shard."""

from __future__ import annotations

from gymflow import storage
from gymflow.errors import InputError

__all__ = [
    "derived_outputs",
    "failures_path",
    "materialized_path",
    "metrics_path",
    "select_shards",
    "split_patterns",
    "stem",
]

_SKIPPED_STEM_SUFFIXES = ("_failures", "_materialized_inputs")


def stem(url: str) -> str:
    """The file name without its last suffix (``a.b.jsonl`` -> ``a.b``)."""
    base = storage.name(url)
    head, dot, _ = base.rpartition(".")
    return head if dot and head else base


def _sibling(url: str, name: str) -> str:
    return storage.join(storage.parent(url), name)


def metrics_path(output: str) -> str:
    """``<dir>/<stem>_aggregate_metrics.json`` next to the merged output."""
    return _sibling(output, f"{stem(output)}_aggregate_metrics.json")


def failures_path(shard: str) -> str:
    """The shard's failure sidecar ``<dir>/<stem>_failures.jsonl``."""
    return _sibling(shard, f"{stem(shard)}_failures.jsonl")


def materialized_path(shard: str) -> str:
    """The shard's materialized inputs ``<dir>/<stem>_materialized_inputs.jsonl``."""
    return _sibling(shard, f"{stem(shard)}_materialized_inputs.jsonl")


HEALTH_REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl", "quality_summary.provenance.json")


def derived_outputs(output: str) -> list[str]:
    """Files this command writes next to ``output`` (merged file, metrics, sidecar, records, health
    reports): never read back as shards, so a glob that covers the output directory still works."""
    from gymflow.provenance import record_path

    directory = storage.parent(output)
    reports = [storage.join(directory, name) for name in HEALTH_REPORTS]
    return [output, metrics_path(output), failures_path(output), record_path(output), *reports]


def split_patterns(input_glob: str) -> list[str]:
    """Split on ``,``, strip whitespace, drop empty patterns."""
    return [pattern.strip() for pattern in input_glob.split(",") if pattern.strip()]


def select_shards(input_glob: str, output: str | None = None) -> list[str]:
    """Expand ``input_glob`` into the shard list (§1.2).

    Patterns keep their order, each one's matches sorted; sidecars (``*_failures``,
    ``*_materialized_inputs``) and the output with its derived files are skipped; the first
    occurrence of a path wins. Raises :class:`InputError` when nothing is left.
    """
    excluded = {storage.to_uri(path) for path in derived_outputs(output)} if output else set()
    seen: set[str] = set()
    shards: list[str] = []
    for pattern in split_patterns(input_glob):
        for match in storage.glob(pattern):
            if stem(match).endswith(_SKIPPED_STEM_SUFFIXES) or storage.isdir(match):
                continue
            identity = storage.to_uri(match)
            if identity in seen or identity in excluded:
                continue
            seen.add(identity)
            shards.append(match)
    if not shards:
        raise InputError(f"No shards matched input_glob={input_glob!r}")
    return shards
