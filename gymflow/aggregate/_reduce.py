"""The reduce step: shards' facts -> one entry per group, coverage and console text (§1.3-§1.7).

Pure over the per-shard results of :func:`~gymflow.aggregate._scan.scan_shard` and
:func:`~gymflow.aggregate._sidecars.read_sidecars`; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gymflow.aggregate._metrics import group_metrics
from gymflow.aggregate._rows import ScoreSpec, extract
from gymflow.aggregate._scan import NO_AGENT, GroupRef, ScanRow, ShardScan
from gymflow.aggregate._sidecars import ShardSidecars
from gymflow.aggregate._spill import GroupFacts, merge_order, shard_rows
from gymflow.collector import paused_gc
from gymflow.errors import InputError
from gymflow.perf_summary import PerfAccumulator

__all__ = ["Coverage", "Reduction", "ReduceSettings", "assign_labels", "reduce_shards"]

Identity = tuple[str, int, int]


@dataclass(frozen=True)
class ReduceSettings:
    """The output-affecting settings of the metrics step."""

    count_failure_classes_as_zero: tuple[str, ...] = ()
    count_missing_rollouts_as_zero: bool = False
    pass_majority: ScoreSpec | None = None


@dataclass
class Coverage:
    """Counts behind the coverage lines of the banner (§1.7)."""

    expected: int = 0
    scored: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    imputed: int = 0

    @property
    def missing(self) -> int:
        return sum(self.dropped.values())


@dataclass
class Reduction:
    entries: list[dict[str, Any]]
    coverage: Coverage
    lines: list[str]
    warnings: list[str]
    groups: dict[str, GroupRef] = field(default_factory=dict)


class _Duplicates:
    """Finds a rollout identity that occurs twice among rows in merge order (where rows sharing a
    (task, rollout) key are adjacent): the first repeat in reading order (shard, then line), and
    where that identity came first."""

    def __init__(self) -> None:
        self._run: list[ScanRow] = []
        self.repeat: tuple[ScanRow, ScanRow] | None = None

    def add(self, row: ScanRow) -> None:
        run = self._run
        if run and (run[0].facts.task != row.facts.task or run[0].facts.rollout != row.facts.rollout):
            self._close()
        run.append(row)

    def _close(self) -> None:
        run = self._run
        if len(run) > 1:
            seen: dict[str, ScanRow] = {}
            for row in run:
                earlier = seen.setdefault(row.group.key, row)
                repeat = self.repeat
                if earlier is not row and (
                    repeat is None or (row.shard, row.line) < (repeat[0].shard, repeat[0].line)
                ):
                    self.repeat = (row, earlier)
        run.clear()

    def check(self, scans: Sequence[ShardScan]) -> None:
        self._close()
        if self.repeat is None:
            return
        row, earlier = self.repeat
        urls = {scan.index: scan.url for scan in scans}
        where = (
            f"in {urls[earlier.shard]!r} and {urls[row.shard]!r}"
            if earlier.shard != row.shard
            else f"in {urls[row.shard]!r} at lines {earlier.line} and {row.line}"
        )
        raise InputError(
            f"Duplicate rollout (group {row.group.key!r}, task {row.facts.task}, "
            f"rollout {row.facts.rollout}) {where}"
        )


def assign_labels(groups: dict[str, GroupRef]) -> dict[str, str]:
    """§1.6 labels: the agent's name when it belongs to one group only, else the group key;
    then any label shared by several groups is replaced by the key, until labels are unique."""
    agent_groups: dict[str, int] = {}
    for ref in groups.values():
        agent_groups[ref.agent] = agent_groups.get(ref.agent, 0) + 1
    labels = {key: (ref.agent if agent_groups[ref.agent] == 1 else key) for key, ref in groups.items()}
    while True:
        holders: dict[str, list[str]] = {}
        for key, label in labels.items():
            holders.setdefault(label, []).append(key)
        clashing = [key for keys in holders.values() if len(keys) > 1 for key in keys if labels[key] != key]
        if not clashing:
            return labels
        for key in clashing:
            labels[key] = key


def _with_dataset(row: dict[str, Any], dataset: dict[str, Any], carried: set[str]) -> dict[str, Any]:
    for name, value in dataset.items():
        if name in carried and name not in row:
            row[name] = value
    return row


def reduce_shards(
    scans: Sequence[ShardScan],
    sidecars: Sequence[ShardSidecars],
    settings: ReduceSettings,
) -> Reduction:
    """Group, count-as-zero, compute the metrics of every group, and the coverage numbers. Rows
    are read in merge order; when the scans spilled their rows, so does each group (a
    :class:`~gymflow.aggregate._spill.GroupStore` its metrics read).

    Raises :class:`InputError` for a rollout identity that occurs twice (naming both places).
    """
    with paused_gc():
        return _reduce(scans, sidecars, settings)


def _reduce(
    scans: Sequence[ShardScan],
    sidecars: Sequence[ShardSidecars],
    settings: ReduceSettings,
) -> Reduction:
    lines: list[str] = []
    warnings: list[str] = []
    facts_of = GroupFacts(spill=any(scan.runs for scan in scans))
    rows = facts_of.groups
    counts: dict[str, int] = {}
    groups: dict[str, GroupRef] = {}
    perf: dict[str, PerfAccumulator] = {}
    carried: dict[str, set[str]] = {}
    anonymous_rows = 0
    duplicates = _Duplicates()
    for row in merge_order(scans):  # each group's rows in key order
        duplicates.add(row)
        key = row.group.key
        facts_of.append(key, row.facts)
        counts[key] = counts.get(key, 0) + 1
        if key == NO_AGENT and not row.group.is_environment:
            anonymous_rows += 1
    duplicates.check(scans)
    # The identities scored, only where sidecar rows are to be matched against them (each row's
    # identity is unique, as checked above).
    matching = any(car.failures or car.materialized for car in sidecars)
    scored_ids = (
        {(row.group.key, row.facts.task, row.facts.rollout) for row in merge_order(scans)}
        if matching
        else set()
    )
    for scan in scans:
        for key, ref in scan.groups.items():  # as the first row in reading order names it
            groups.setdefault(key, ref)
        for key, accumulator in scan.perf.items():
            perf.setdefault(key, PerfAccumulator()).merge(accumulator)
        for key, names in scan.row_keys.items():
            carried.setdefault(key, set()).update(names)

    materialized_ids: set[Identity] = set()
    datasets: dict[tuple[int, int, int], dict[str, Any]] = {}
    for index, car in enumerate(sidecars):
        for item in car.materialized:
            materialized_ids.add((item.group.key, item.task, item.rollout))
            datasets.setdefault((index, item.task, item.rollout), item.dataset)

    def add(ref: GroupRef, row: dict[str, Any]) -> None:
        facts = extract(row, settings.pass_majority)
        groups.setdefault(ref.key, ref)
        facts_of.append(ref.key, facts)
        counts[ref.key] = counts.get(ref.key, 0) + 1
        perf.setdefault(ref.key, PerfAccumulator()).add(None)
        scored_ids.add((ref.key, facts.task, facts.rollout))

    counted_classes = set(settings.count_failure_classes_as_zero)
    dropped: dict[str, int] = {}
    dropped_ids: set[Identity] = set()
    counted: list[str] = []
    for index, car in enumerate(sidecars):
        for failure in car.failures:
            identity = (failure.group.key, failure.task, failure.rollout)
            if identity in scored_ids:
                continue
            if failure.failure_class in counted_classes and failure.names_server:
                dataset = datasets.get((index, failure.task, failure.rollout), {})
                add(
                    failure.group,
                    _with_dataset(dict(failure.zero_row), dataset, carried.get(failure.group.key, set())),
                )
                counted.append(failure.failure_class)
                continue
            if identity not in dropped_ids:
                dropped_ids.add(identity)
                dropped[failure.failure_class] = dropped.get(failure.failure_class, 0) + 1
    if anonymous_rows:  # G (§1.6): 0.7.0 leaves such rows out of every entry
        lines.append(f"Scored {anonymous_rows} row(s) without an agent name under {NO_AGENT!r}.")
    if counted:
        lines.append(f"Counting {len(counted)} failure row(s) as scored zeros: {sorted(set(counted))!r}")

    imputed = 0
    if settings.count_missing_rollouts_as_zero:
        anonymous = 0
        for scan, car in zip(scans, sidecars, strict=True):
            if car.materialized_file is None:
                warnings.append(
                    f"[WARNING] {car.materialized_expected} is missing; "
                    "rollouts owed by that shard cannot be counted"
                )
                continue
            shard_keys = {(row.facts.task, row.facts.rollout) for row in shard_rows(scan)}
            shard_keys.update((failure.task, failure.rollout) for failure in car.failures)
            for item in car.materialized:
                identity = (item.group.key, item.task, item.rollout)
                if (
                    (item.task, item.rollout) in shard_keys
                    or identity in scored_ids
                    or identity in dropped_ids
                ):
                    continue
                if not item.names_server:
                    anonymous += 1
                    continue
                zero = _with_dataset(dict(item.stub), item.dataset, carried.get(item.group.key, set()))
                add(item.group, zero)
                imputed += 1
        if imputed:
            lines.append(f"Counting {imputed} materialized rollout(s) with no row as scored zeros")
        if anonymous:
            warnings.append(
                f"[WARNING] {anonymous} materialized rollout(s) name no agent or environment server "
                "and are not counted"
            )

    labels = assign_labels(groups)
    entries: list[dict[str, Any]] = []
    for key in sorted(groups, key=lambda k: (labels[k], k)):
        label = labels[key]
        metrics = group_metrics(rows[key], label, perf[key].result(), settings.pass_majority)
        warnings.extend(metrics.warnings)
        entry: dict[str, Any] = {"agent_ref": {"name": label}}
        if groups[key].is_environment:
            entry["_ng_environment_server"] = key
        entry.update(metrics.blocks())
        entries.append(entry)

    scored = sum(counts.values())
    expected = len(materialized_ids | scored_ids | dropped_ids) if matching else scored
    coverage = Coverage(
        expected=expected, scored=scored, dropped=dict(sorted(dropped.items())), imputed=imputed
    )
    return Reduction(entries=entries, coverage=coverage, lines=lines, warnings=warnings, groups=groups)


def key_metrics_lines(entry: dict[str, Any]) -> list[str]:
    """``Key metrics for <label>:`` and the key metrics as 4-space JSON (§1.6)."""
    return [f"Key metrics for {entry['agent_ref']['name']}:", json.dumps(entry["key_metrics"], indent=4)]
