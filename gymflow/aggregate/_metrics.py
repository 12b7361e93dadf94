"""The default aggregate metrics of one group (aggregate.md §3): pure, over :class:`RowFacts`.

:func:`group_metrics` returns the blocks of one entry of the aggregate-metrics file and the
warnings the reference logs. ``perf`` is the group's ``perf_summary`` (computed while streaming,
from all rows including masked ones); ``pass_majority`` opts into §4.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from gymflow.aggregate._columns import Survey, column_statistics, repeat_blocks, survey
from gymflow.aggregate._passk import pass_at_k
from gymflow.aggregate._rows import RowFacts, ScoreSpec
from gymflow.aggregate._stats import (
    UniformPlan,
    across_repeats,
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


def _in_key_order(rows: Iterable[RowFacts], label: str) -> tuple[Iterable[RowFacts], int, set[int]]:
    """``rows`` in key order (as given when they are, else a sorted copy), the number of masked
    rows and the rollout indices, in one pass; raises :class:`DuplicateRolloutError` for the
    first repeated key in key order."""
    masked = 0
    rollouts: set[int] = set()
    ordered = True
    repeated: RowFacts | None = None
    previous: RowFacts | None = None
    for row in rows:
        masked += row.masked
        rollouts.add(row.rollout)
        if previous is not None and ordered:
            if previous.task > row.task or (previous.task == row.task and previous.rollout > row.rollout):
                ordered = False
            elif repeated is None and previous.task == row.task and previous.rollout == row.rollout:
                repeated = row
        previous = row
    if not ordered:
        rows = sorted(rows, key=lambda row: (row.task, row.rollout))
        repeated = next(
            (b for a, b in zip(rows, rows[1:], strict=False) if (a.task, a.rollout) == (b.task, b.rollout)),
            None,
        )
    if repeated is not None:
        raise DuplicateRolloutError(
            f"Duplicate rollout key ({repeated.task}, {repeated.rollout}) in group {label!r}"
        )
    return rows, masked, rollouts


class _Scored:
    """The scored rows of rows in key order (each iteration a new pass)."""

    def __init__(self, rows: Iterable[RowFacts]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[RowFacts]:
        return (row for row in self._rows if not row.masked)


def _distinct_tasks(rows: Iterable[RowFacts]) -> int:
    count = 0
    task: int | None = None
    for row in rows:
        if count == 0 or row.task != task:
            count += 1
            task = row.task
    return count


def _missing_warning(example_rollout: int, missing: int, count: int) -> str:
    return (
        f"{count} repeat(s) are missing rollouts for some tasks (e.g. agent='agent', "
        f"_ng_rollout_index={example_rollout}, missing_count={missing}). repeat_level_metrics statistics "
        "were computed from unequal sample sizes across repeats and may not be directly comparable, and "
        "agent_level_metrics may be biased toward whichever tasks happened to complete. Consider obtaining "
        "the missing rollouts before drawing conclusions from these metrics."
    )


def _task_entry(
    rows: list[RowFacts], plans: dict[int, UniformPlan], fields: list[str], integral: set[str]
) -> dict[str, Any]:
    entry: dict[str, Any] = {"_ng_task_index": rows[0].task}
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
    return entry


def _task_entries(
    scored: Iterable[RowFacts], fields: list[str], integral: set[str]
) -> Iterator[dict[str, Any]]:
    """The ``group_level_metrics`` objects (§3.4), one task at a time (rows in key order)."""
    plans: dict[int, UniformPlan] = {}
    rows: list[RowFacts] = []
    for row in scored:
        if rows and row.task != rows[0].task:
            yield _task_entry(rows, plans, fields, integral)
            rows = []
        rows.append(row)
    if rows:
        yield _task_entry(rows, plans, fields, integral)


class TaskEntries(Sequence[dict[str, Any]]):
    """A group's ``group_level_metrics``, made on demand from its scored rows (sorted by key):
    iterating makes one task's object at a time, so the metrics file streams them and a large
    group's objects (a ``rollout_infos`` entry per row) are never all held. Equal to the list
    of the same objects."""

    def __init__(
        self, scored: Iterable[RowFacts], fields: list[str], integral: set[str], tasks: int, rollouts: int
    ) -> None:
        self._scored = scored
        self._fields = fields
        self._integral = integral
        self._tasks = tasks
        self.rollouts = rollouts
        """The scored rows: the objects' ``num_rollouts`` summed, known without making them."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _task_entries(self._scored, self._fields, self._integral)

    def __len__(self) -> int:
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


def _repeat_level(gathered: Survey, warnings: list[str]) -> list[dict[str, Any]]:
    counts = Counter(gathered.rollouts)  # rows per rollout index: each of a distinct task
    if len(counts) < 2:
        return []
    blocks = repeat_blocks(gathered)
    out: list[dict[str, Any]] = []
    for rollout in sorted(counts):
        entry: dict[str, Any] = {
            "_ng_rollout_index": rollout,
            "sample_count": counts[rollout],
            "missing_count": gathered.tasks - counts[rollout],
        }
        for _, columns, notes in sorted(blocks.get(rollout, []), key=lambda block: block[0]):
            entry.update(columns)
            warnings.extend(notes)
        out.append(entry)
    short = [entry for entry in out if entry["missing_count"] > 0]
    if short:
        warnings.append(
            _missing_warning(short[0]["_ng_rollout_index"], short[0]["missing_count"], len(short))
        )
    return out


def group_metrics(
    rows: Iterable[RowFacts],
    label: str = "agent",
    perf: dict[str, Any] | None = None,
    pass_majority: ScoreSpec | None = None,
) -> GroupMetrics:
    """Compute the default metrics of one group (aggregate.md §3, and §4 when ``pass_majority``).

    ``rows`` may be read more than once (a list, or a store read again on each iteration); in
    key order, no row need be held: the group's statistics come from columns of its numbers,
    and its task objects are made when ``group_level_metrics`` is iterated.
    Raises :class:`DuplicateRolloutError` when two rows share a (task, rollout) key.
    """
    result = GroupMetrics(perf_summary=perf)
    ordered, masked, rollouts = _in_key_order(rows, label)
    if not rollouts:
        result.perf_summary = None
        return result
    scored: Iterable[RowFacts] = _Scored(ordered) if masked else ordered
    gathered = survey(scored)
    coverage: dict[str, int] = {}
    if masked:
        coverage = {
            "coverage/measured_rollouts": gathered.rows,
            "coverage/masked_rollouts": masked,
            "coverage/measured_tasks": gathered.tasks,
            "coverage/fully_masked_tasks": _distinct_tasks(ordered) - gathered.tasks,
        }
    if not gathered.rows:
        result.agent_metrics = dict(coverage)
        result.key_metrics = dict(coverage)
        return result

    warnings: list[str] = []
    fields, integral = gathered.fields, gathered.integral
    agent = (
        column_statistics(gathered) if gathered.rows >= 8 else set_statistics(list(scored), fields, integral)
    )
    result.repeat_level_metrics = _repeat_level(gathered, warnings)
    tasks, scored_rows = gathered.tasks, gathered.rows
    del gathered  # its columns: the group's numbers
    agent.update(across_repeats(result.repeat_level_metrics, warnings))
    agent.update(coverage)
    if pass_majority is not None:
        agent.update(pass_at_k(list(scored), with_answers=pass_majority.answer_key is not None))
    agent["num_repeats"] = len(rollouts)
    result.agent_metrics = agent
    result.key_metrics = key_metrics(agent, coverage)
    result.group_level_metrics = TaskEntries(scored, fields, integral, tasks, scored_rows)
    result.warnings = list(dict.fromkeys(warnings))
    return result
