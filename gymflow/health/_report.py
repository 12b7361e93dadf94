"""From evaluated rows to the two report files (spec §6-§7): duplicates, verdicts, tasks, summary.

Runs once, in the parent, over rows in input order; the bytes it produces do not depend on how
the rows were evaluated.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gymflow.health._evaluate import RowResult, RunStats
from gymflow.health._registry import ROLLOUT_CHECK_IDS, TASK_CHECK_IDS
from gymflow.health._vocabulary import (
    CHECK_IDS,
    CheckId,
    CoverageState,
    Identity,
    QualitySummary,
    TaskSummary,
    Verdict,
    VerdictRow,
)


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The outcome of one health run: the summary object and both files' bytes."""

    summary: QualitySummary
    summary_bytes: bytes
    rows: list[RowResult]
    """The rows in report order."""
    verdicts: list[Verdict]

    def verdict_lines(self) -> Iterator[bytes]:
        """``rollout_verdicts.jsonl`` in chunks of lines (never held whole in memory)."""
        encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        batch: list[str] = []
        for row, verdict in zip(self.rows, self.verdicts, strict=True):
            out: VerdictRow = {
                "_ng_task_index": row.task,
                "_ng_rollout_index": row.rollout,
                "rollout_id": row.rollout_id,
                "verdict": verdict,
                "findings": row.findings,
                "unobserved": row.unobserved,
            }
            if row.stage is not None:
                out["stage_index"] = row.stage
            batch.append(encode(out))
            if len(batch) == 1024:
                yield ("\n".join(batch) + "\n").encode()
                batch = []
        if batch:
            yield ("\n".join(batch) + "\n").encode()

    def console_line(self) -> str:
        return console_line(self.summary)


def console_line(summary: Mapping[str, Any]) -> str:
    """``Rollout health: N checked, ...`` (spec §7.3), from a summary alone."""
    run = summary["run"]
    counts = run["verdicts"]
    line = (
        f"Rollout health: {run['artifacts']['records']} checked, {counts['healthy']} healthy, "
        f"{counts['unhealthy']} unhealthy, {counts['unobserved']} unobserved"
    )
    if run["ignored_checks"]:
        line += f" (ignored: {', '.join(run['ignored_checks'])})"
    return line


def _order(value: Identity | None) -> tuple[int, int | str]:
    if isinstance(value, int):
        return (0, value)
    return (1, "None" if value is None else value)


def _verdict(row: RowResult) -> Verdict:
    if row.findings:
        return "unhealthy"
    return "unobserved" if row.unobserved else "healthy"


def _mark_duplicates(rows: Sequence[RowResult]) -> None:
    groups: dict[tuple[Any, ...], list[RowResult]] = defaultdict(list)
    for row in rows:
        groups[(_order(row.stage), _order(row.task), _order(row.rollout))].append(row)
    for members in groups.values():
        if len(members) > 1:
            for row in members:
                row.findings.append(
                    {"check": "rollout_duplicate_identity", "detail": {"duplicate_count": len(members)}}
                )


def _task_entry(
    copies_by_rollout: dict[Identity, list[tuple[RowResult, Verdict]]], ignored: frozenset[str]
) -> tuple[TaskSummary, dict[CheckId, CoverageState]]:
    """A task's counts and flags, and each task check's coverage state."""
    repeats: list[tuple[Verdict, bool, int]] = []
    for copies in copies_by_rollout.values():
        verdicts = {verdict for _, verdict in copies}
        repeats.append(
            (
                verdicts.pop() if len(verdicts) == 1 else "unobserved",
                all(row.policy_complete for row, _ in copies),
                max(row.successful_calls for row, _ in copies),
            )
        )
    coverage: dict[CheckId, CoverageState] = {}
    flags: list[CheckId] = []
    if "task_consistently_unhealthy" in ignored:
        coverage["task_consistently_unhealthy"] = "ignored"
    else:
        computable = [verdict for verdict, _, _ in repeats if verdict != "unobserved"]
        coverage["task_consistently_unhealthy"] = "evaluated" if len(computable) >= 2 else "unobserved"
        if len(computable) >= 2 and all(verdict == "unhealthy" for verdict in computable):
            flags.append("task_consistently_unhealthy")
    if "task_no_successful_model_calls" in ignored:
        coverage["task_no_successful_model_calls"] = "ignored"
    elif all(complete for _, complete, _ in repeats):
        coverage["task_no_successful_model_calls"] = "evaluated"
        if not any(successful for _, _, successful in repeats):
            flags.append("task_no_successful_model_calls")
    else:
        coverage["task_no_successful_model_calls"] = "unobserved"
    counts = Counter(verdict for verdict, _, _ in repeats)
    entry: TaskSummary = {
        "repeats": len(repeats),
        "healthy": counts["healthy"],
        "unhealthy": counts["unhealthy"],
        "unobserved": counts["unobserved"],
        "flags": flags,
    }
    return entry, coverage


def build_report(rows: list[RowResult], ignored: tuple[CheckId, ...], stats: RunStats) -> HealthReport:
    """Reduce rows (in input order, already placed) to the summary and report bytes."""
    ignored_set = frozenset(ignored)
    if "rollout_duplicate_identity" not in ignored_set:
        _mark_duplicates(rows)
    verdicts = [_verdict(row) for row in rows]

    coverage: dict[CheckId, dict[CoverageState, int]] = {
        check: {"evaluated": 0, "unobserved": 0, "ignored": 0} for check in CHECK_IDS
    }
    issues: dict[CheckId, int] = dict.fromkeys(CHECK_IDS, 0)
    for row in rows:
        unobserved = set(row.unobserved)
        for check in ROLLOUT_CHECK_IDS:
            state: CoverageState = (
                "ignored" if check in ignored_set else "unobserved" if check in unobserved else "evaluated"
            )
            coverage[check][state] += 1
        for item in row.findings:
            issues[item["check"]] += 1

    by_task: dict[Identity, dict[Identity, list[tuple[RowResult, Verdict]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row, verdict in zip(rows, verdicts, strict=True):
        assert row.task is not None
        by_task[row.task][row.rollout].append((row, verdict))
    int_tasks = sorted((t for t in by_task if isinstance(t, int)), key=str)
    str_tasks = sorted(t for t in by_task if isinstance(t, str))
    tasks: dict[str, TaskSummary] = {}
    for task in int_tasks + str_tasks:
        entry, task_coverage = _task_entry(by_task[task], ignored_set)
        for check in TASK_CHECK_IDS:
            coverage[check][task_coverage[check]] += 1
        for flag in entry["flags"]:
            issues[flag] += 1
        tasks[str(task)] = entry  # an int and a str task with the same text share one key

    summary: QualitySummary = {
        "run": {
            "ignored_checks": sorted(ignored),
            "artifacts": {
                "records": len(rows),
                "captures": stats.captures,
                "coverage": coverage,
            },
            "verdicts": {
                "healthy": verdicts.count("healthy"),
                "unhealthy": verdicts.count("unhealthy"),
                "unobserved": verdicts.count("unobserved"),
            },
            "issues": issues,
            "stats": {
                "model_call_errors": {
                    "total": sum(stats.failed_statuses.values()),
                    "by_status": dict(sorted(stats.failed_statuses.items())),
                    "rollouts_affected": stats.rollouts_affected,
                    "ended_on_error": stats.ended_on_error,
                },
                "duplicated_calls": {"replayed": stats.replayed, "rollouts": stats.replayed_rollouts},
                "tokens": {
                    "prompt": stats.prompt,
                    "completion": stats.completion,
                    "capture_prompt": stats.capture_prompt,
                    "capture_completion": stats.capture_completion,
                },
            },
        },
        "tasks": tasks,
    }

    order = sorted(
        range(len(rows)), key=lambda i: (_order(rows[i].task), _order(rows[i].rollout), _order(rows[i].stage))
    )
    summary_text = json.dumps(summary, indent=2, ensure_ascii=False)
    return HealthReport(
        summary, summary_text.encode(), [rows[i] for i in order], [verdicts[i] for i in order]
    )
