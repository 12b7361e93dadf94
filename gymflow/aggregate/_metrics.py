"""The default aggregate metrics of one group (aggregate.md §3): pure, over :class:`RowFacts`.

:func:`group_metrics` returns the blocks of one entry of the aggregate-metrics file and the
warnings the reference logs. ``perf`` is the group's ``perf_summary`` (computed while streaming,
from all rows including masked ones); ``pass_majority`` opts into §4.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from gymflow.aggregate._passk import pass_at_k
from gymflow.aggregate._rows import RowFacts, ScoreSpec
from gymflow.aggregate._stats import (
    UniformPlan,
    across_repeats,
    discover_fields,
    repeat_statistics,
    set_statistics,
    uniform_plan,
    uniform_small_statistics,
)
from gymflow.errors import InputError

__all__ = ["DuplicateRolloutError", "GroupMetrics", "TaskEntries", "group_metrics", "key_metrics"]

SAMPLE = {"agent_ref": {"name": "agent"}}


class DuplicateRolloutError(InputError):
    """Two rows of one group share a (task, rollout) key."""


@dataclass
class GroupMetrics:
    """The blocks of one aggregate-metrics entry (without its labels) plus the warnings."""

    agent_metrics: dict[str, Any] = field(default_factory=dict)
    key_metrics: dict[str, Any] = field(default_factory=dict)
    group_level_metrics: Sequence[dict[str, Any]] = field(default_factory=list)
    repeat_level_metrics: list[dict[str, Any]] = field(default_factory=list)
    perf_summary: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def blocks(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "agent_metrics": self.agent_metrics,
            "key_metrics": self.key_metrics,
            "group_level_metrics": self.group_level_metrics,
            "repeat_level_metrics": self.repeat_level_metrics,
        }
        if self.perf_summary is not None:
            out["perf_summary"] = self.perf_summary
        return out


def key_metrics(agent_metrics: dict[str, Any], coverage: dict[str, int]) -> dict[str, Any]:
    """§3.7: every ``mean/`` entry of ``agent_metrics``, then the coverage keys."""
    out = {name: value for name, value in agent_metrics.items() if name.startswith("mean/")}
    out.update(coverage)
    return out


def _sorted_unique(rows: Sequence[RowFacts], label: str) -> list[RowFacts]:
    ordered = list(rows)
    if any(
        (previous.task, previous.rollout) > (current.task, current.rollout)
        for previous, current in zip(ordered, ordered[1:], strict=False)
    ):  # rows usually come sorted (the reduce step's merge order): no keys to hold then
        ordered.sort(key=lambda row: (row.task, row.rollout))
    for previous, current in zip(ordered, ordered[1:], strict=False):
        if (previous.task, previous.rollout) == (current.task, current.rollout):
            raise DuplicateRolloutError(
                f"Duplicate rollout key ({current.task}, {current.rollout}) in group {label!r}"
            )
    return ordered


def _missing_warning(example_rollout: int, missing: int, count: int) -> str:
    return (
        f"{count} repeat(s) are missing rollouts for some tasks (e.g. agent='agent', "
        f"_ng_rollout_index={example_rollout}, missing_count={missing}). repeat_level_metrics statistics "
        "were computed from unequal sample sizes across repeats and may not be directly comparable, and "
        "agent_level_metrics may be biased toward whichever tasks happened to complete. Consider obtaining "
        "the missing rollouts before drawing conclusions from these metrics."
    )


def _task_entries(
    scored: Sequence[RowFacts], fields: list[str], integral: set[str]
) -> Iterator[dict[str, Any]]:
    """The ``group_level_metrics`` objects (§3.4), one task at a time (rows sorted by key)."""
    plans: dict[int, UniformPlan] = {}
    start = 0
    while start < len(scored):
        task = scored[start].task
        stop = start
        while stop < len(scored) and scored[stop].task == task:
            stop += 1
        rows = scored[start:stop]
        entry: dict[str, Any] = {"_ng_task_index": task}
        layout = rows[0].field_names
        if len(rows) < 8 and all(row.field_names is layout for row in rows):
            plan = plans.get(id(layout))
            if plan is None:
                plan = plans[id(layout)] = uniform_plan(layout, fields, integral)
            uniform_small_statistics(rows, plan, entry)
        else:
            entry.update(set_statistics(rows, fields, integral))
        entry["sample"] = {"agent_ref": {"name": "agent"}}
        entry["num_rollouts"] = len(rows)
        entry["expected_num_rollouts"] = len(rows)
        entry["missing_num_rollouts"] = 0
        entry["reward_profile_completion_pct"] = 100.0
        entry["rollout_infos"] = [row.info for row in rows]
        yield entry
        start = stop


class TaskEntries(Sequence[dict[str, Any]]):
    """A group's ``group_level_metrics``, made on demand from its scored rows (sorted by key):
    iterating makes one task's object at a time, so the metrics file streams them and a large
    group's objects (a ``rollout_infos`` entry per row) are never all held. Equal to the list
    of the same objects."""

    def __init__(self, scored: Sequence[RowFacts], fields: list[str], integral: set[str]) -> None:
        self._scored = scored
        self._fields = fields
        self._integral = integral
        self._tasks: int | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _task_entries(self._scored, self._fields, self._integral)

    def __len__(self) -> int:
        if self._tasks is None:
            scored = self._scored
            self._tasks = sum(1 for i in range(len(scored)) if i == 0 or scored[i].task != scored[i - 1].task)
        return self._tasks

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TaskEntries | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TaskEntries({list(self)!r})"


def _repeat_level(scored: list[RowFacts], warnings: list[str]) -> list[dict[str, Any]]:
    by_rollout: dict[int, list[RowFacts]] = {}
    for row in scored:
        by_rollout.setdefault(row.rollout, []).append(row)
    if len(by_rollout) < 2:
        return []
    all_tasks = len({row.task for row in scored})
    out: list[dict[str, Any]] = []
    for rollout in sorted(by_rollout):
        rows = by_rollout[rollout]
        sample_count = len({row.task for row in rows})
        values: dict[str, list[float]] = {}
        layout = rows[0].field_names
        if all(row.field_names is layout for row in rows):
            # One layout (the usual case): transpose in C.
            for name, column in zip(
                layout, zip(*(row.field_values for row in rows), strict=True), strict=True
            ):
                values[name] = [float(value) for value in column]
        else:
            for row in rows:
                for name, value in zip(row.field_names, row.field_values, strict=True):
                    values.setdefault(name, []).append(float(value))
        entry: dict[str, Any] = {
            "_ng_rollout_index": rollout,
            "sample_count": sample_count,
            "missing_count": all_tasks - sample_count,
        }
        entry.update(repeat_statistics(values, warnings))
        out.append(entry)
    short = [entry for entry in out if entry["missing_count"] > 0]
    if short:
        warnings.append(
            _missing_warning(short[0]["_ng_rollout_index"], short[0]["missing_count"], len(short))
        )
    return out


def group_metrics(
    rows: Sequence[RowFacts],
    label: str = "agent",
    perf: dict[str, Any] | None = None,
    pass_majority: ScoreSpec | None = None,
) -> GroupMetrics:
    """Compute the default metrics of one group (aggregate.md §3, and §4 when ``pass_majority``).

    Raises :class:`DuplicateRolloutError` when two rows share a (task, rollout) key.
    """
    result = GroupMetrics(perf_summary=perf)
    if not rows:
        result.perf_summary = None
        return result
    ordered = _sorted_unique(rows, label)
    scored = [row for row in ordered if not row.masked]
    masked = len(ordered) - len(scored)
    coverage: dict[str, int] = {}
    if masked:
        scored_tasks = {row.task for row in scored}
        coverage = {
            "coverage/measured_rollouts": len(scored),
            "coverage/masked_rollouts": masked,
            "coverage/measured_tasks": len(scored_tasks),
            "coverage/fully_masked_tasks": len({row.task for row in ordered} - scored_tasks),
        }
    if not scored:
        result.agent_metrics = dict(coverage)
        result.key_metrics = dict(coverage)
        return result

    warnings: list[str] = []
    fields, integral = discover_fields(scored)
    agent = set_statistics(scored, fields, integral)
    result.repeat_level_metrics = _repeat_level(scored, warnings)
    agent.update(across_repeats(result.repeat_level_metrics, warnings))
    agent.update(coverage)
    if pass_majority is not None:
        agent.update(pass_at_k(scored, with_answers=pass_majority.answer_key is not None))
    agent["num_repeats"] = len({row.rollout for row in ordered})
    result.agent_metrics = agent
    result.key_metrics = key_metrics(agent, coverage)
    result.group_level_metrics = TaskEntries(scored, fields, integral)
    result.warnings = list(dict.fromkeys(warnings))
    return result
