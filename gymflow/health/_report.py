"""From sorted runs of rows to the two report files (spec §6-§7): duplicates, verdicts, tasks,
summary.

Runs once, in the parent, as a streaming merge of the runs (:mod:`gymflow.health._runs`): rows
arrive in report order, so rows sharing an identity and rollouts of one task are adjacent. The
verdict lines go to a local file as they are merged; what stays in memory is the summary
(counters, and one entry per task, which the summary holds anyway). The bytes do not depend on how
the rows were evaluated.
"""

from __future__ import annotations

import json
import os
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson

from gymflow import scratch, storage
from gymflow.health._evaluate import RowResult, RunStats
from gymflow.health._registry import ROLLOUT_CHECK_IDS, TASK_CHECK_IDS
from gymflow.health._runs import Entry, Placement, merge_entries, sort_rows, with_duplicates
from gymflow.health._vocabulary import (
    CHECK_IDS,
    CheckId,
    CoverageState,
    Identity,
    QualitySummary,
    TaskSummary,
    Verdict,
)
from gymflow.provenance import FileDigest

_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, weakref_slot=True)
class HealthReport:
    """The outcome of one health run: the summary object and bytes, and the verdict lines in a
    local file that lives as long as this object."""

    summary: QualitySummary
    summary_bytes: bytes
    verdicts_path: str

    def verdict_lines(self) -> Iterator[bytes]:
        """``rollout_verdicts.jsonl`` in chunks of lines (never held whole in memory)."""
        with open(self.verdicts_path, "rb") as handle:
            while chunk := handle.read(_CHUNK_BYTES):
                yield chunk

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


_Repeat = tuple[Verdict, bool, int]
"""Per rollout of a task: its verdict over all copies, whether every copy's policy view is
complete, and the most successful calls of a copy."""


def _task_entry(
    repeats: Sequence[_Repeat], ignored: frozenset[str]
) -> tuple[TaskSummary, dict[CheckId, CoverageState]]:
    """A task's counts and flags, and each task check's coverage state."""
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


class _Reducer:
    """The summary, fed rows in report order one identity group at a time."""

    def __init__(self, ignored: tuple[CheckId, ...]) -> None:
        self.ignored = ignored
        self.ignored_set = frozenset(ignored)
        self.records = 0
        self.verdicts: Counter[Verdict] = Counter()
        self.unobserved: Counter[tuple[CheckId, ...]] = Counter()
        self.issues: dict[CheckId, int] = dict.fromkeys(CHECK_IDS, 0)
        self.tasks: dict[Identity, tuple[TaskSummary, dict[CheckId, CoverageState]]] = {}
        self._shared: dict[str, tuple[TaskSummary, dict[CheckId, CoverageState]]] = {}
        """One object per distinct task entry: most tasks of a run have one of a few entries, so
        a million tasks cost their keys, not a million dicts (nothing changes an entry)."""
        self._task: Identity | None = None
        self._repeats: list[_Repeat] = []
        self._rollout: tuple[Identity, set[Verdict], bool, int] | None = None

    def add(self, item: Entry) -> None:
        self.records += 1
        self.verdicts[item.verdict] += 1
        self.unobserved[item.unobserved] += 1
        issues = self.issues
        for check in item.checks:
            issues[check] += 1
        if item.task != self._task:  # an int task never equals a str one
            self._close_task()
            self._task = item.task
        current = self._rollout
        if current is not None and current[0] == item.rollout:
            current[1].add(item.verdict)
            self._rollout = (
                current[0],
                current[1],
                current[2] and item.policy_complete,
                max(current[3], item.successful_calls),
            )
        else:
            self._close_rollout()
            self._rollout = (item.rollout, {item.verdict}, item.policy_complete, item.successful_calls)

    def _close_rollout(self) -> None:
        if self._rollout is not None:
            _, verdicts, complete, successful = self._rollout
            self._repeats.append(
                (verdicts.pop() if len(verdicts) == 1 else "unobserved", complete, successful)
            )
            self._rollout = None

    def _close_task(self) -> None:
        self._close_rollout()
        if self._repeats:
            assert self._task is not None
            entry = _task_entry(self._repeats, self.ignored_set)
            key = repr(entry)
            self.tasks[self._task] = self._shared.setdefault(key, entry)
            self._repeats = []

    def summary(self, stats: RunStats) -> QualitySummary:
        self._close_task()
        ignored_set = self.ignored_set
        coverage: dict[CheckId, dict[CoverageState, int]] = {
            check: {"evaluated": 0, "unobserved": 0, "ignored": 0} for check in CHECK_IDS
        }
        for unobserved, count in self.unobserved.items():
            missing = set(unobserved)
            for check in ROLLOUT_CHECK_IDS:
                state: CoverageState = (
                    "ignored" if check in ignored_set else "unobserved" if check in missing else "evaluated"
                )
                coverage[check][state] += count
        int_tasks = sorted((t for t in self.tasks if isinstance(t, int)), key=str)
        str_tasks = sorted(t for t in self.tasks if isinstance(t, str))
        tasks: dict[str, TaskSummary] = {}
        for task in int_tasks + str_tasks:
            entry, task_coverage = self.tasks[task]
            for check in TASK_CHECK_IDS:
                coverage[check][task_coverage[check]] += 1
            for flag in entry["flags"]:
                self.issues[flag] += 1
            tasks[str(task)] = entry  # an int and a str task with the same text share one key
        return {
            "run": {
                "ignored_checks": sorted(self.ignored),
                "artifacts": {"records": self.records, "captures": stats.captures, "coverage": coverage},
                "verdicts": {
                    "healthy": self.verdicts["healthy"],
                    "unhealthy": self.verdicts["unhealthy"],
                    "unobserved": self.verdicts["unobserved"],
                },
                "issues": self.issues,
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


def merge_runs(
    runs: Iterable[Iterator[Entry]], ignored: tuple[CheckId, ...], stats: RunStats
) -> HealthReport:
    """Merge sorted runs (earlier runs first among equal keys) into the report."""
    reducer = _Reducer(ignored)
    mark_duplicates = "rollout_duplicate_identity" not in reducer.ignored_set
    fd, path = scratch.scratch_file("verdicts", ".jsonl")
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as out:
            group: list[Entry] = []  # entries sharing one identity: almost always one
            for item in chain(merge_entries(runs), [None]):
                if group and (item is None or item.key != group[0].key):
                    if len(group) > 1 and mark_duplicates:
                        group = [with_duplicates(member, len(group)) for member in group]
                    for member in group:
                        reducer.add(member)
                        out.write(member.line)
                        out.write("\n")
                    group = []
                if item is not None:
                    group.append(item)
    except BaseException:
        os.unlink(path)
        raise
    summary = reducer.summary(stats)
    report = HealthReport(summary, summary_bytes(summary), path)
    weakref.finalize(report, scratch.discard, path)
    return report


def summary_bytes(summary: QualitySummary) -> bytes:
    """``quality_summary.json``: 2-space indented JSON, non-ASCII as UTF-8. orjson writes it in C
    (the json module's indented encoder is Python code that holds every piece of a large summary
    in a list before joining them); the json module takes what orjson refuses (an integer beyond
    64 bits), with the same bytes otherwise."""
    try:
        return orjson.dumps(summary, option=orjson.OPT_INDENT_2)
    except TypeError:
        return json.dumps(summary, indent=2, ensure_ascii=False).encode()


def build_report(rows: list[RowResult], ignored: tuple[CheckId, ...], stats: RunStats) -> HealthReport:
    """The report of rows held in memory (in input order, range-local numbering of one input)."""
    run = sort_rows(rows, Placement(0, "", 0, 0))
    return merge_runs([run.entries()], ignored, stats)


def write_reports_digested(report: HealthReport, report_dir: str) -> tuple[FileDigest, FileDigest]:
    """Write both report files atomically; returns the digests of the bytes written (summary,
    verdicts), hashed while writing: a record built from them never lists another run's bytes."""
    summary_url = storage.join(report_dir, "quality_summary.json")
    verdicts_url = storage.join(report_dir, "rollout_verdicts.jsonl")
    verdicts = FileDigest(
        storage.to_uri(verdicts_url), *storage.write_atomic_lines(verdicts_url, report.verdict_lines())
    )
    summary = FileDigest(
        storage.to_uri(summary_url), *storage.write_atomic(summary_url, report.summary_bytes)
    )
    return summary, verdicts
