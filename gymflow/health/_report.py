"""From sorted runs of rows to the two report files (spec §6-§7): duplicates, verdicts, tasks,
summary.

Runs once, in the parent, as a streaming merge of the runs (:mod:`gymflow.health._runs`): rows
arrive in report order, so rows sharing an identity and rollouts of one task are adjacent. The
verdict lines go to a local file as they are merged, and the tasks to local files in the summary's
order (:mod:`gymflow.health._tasks`); what stays in memory is counters and the few distinct task
entries. The bytes do not depend on how the rows were evaluated.
"""

from __future__ import annotations

import json
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
from gymflow.health._tasks import TaskSpill
from gymflow.health._vocabulary import (
    CHECK_IDS,
    CheckId,
    CoverageState,
    Identity,
    QualitySummary,
    RunSummary,
    TaskSummary,
    Verdict,
)
from gymflow.provenance import FileDigest

_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, weakref_slot=True)
class HealthReport:
    """The outcome of one health run: the summary's ``run`` object, and both report files' bytes
    in local files that live as long as this object."""

    run: RunSummary
    summary_path: str
    """``quality_summary.json``."""
    verdicts_path: str
    """``rollout_verdicts.jsonl``."""
    healthy_rows: bytes = b""
    """A byte per input row, by its number among the rows of the inputs: 1 where its verdict is
    healthy (the rows after the last healthy one are left out)."""

    @property
    def summary_bytes(self) -> bytes:
        """``quality_summary.json`` whole (the summary of a small run)."""
        with open(self.summary_path, "rb") as handle:
            return handle.read()

    def summary_chunks(self) -> Iterator[bytes]:
        """``quality_summary.json`` in chunks (never held whole in memory)."""
        return _chunks(self.summary_path)

    def verdict_lines(self) -> Iterator[bytes]:
        """``rollout_verdicts.jsonl`` in chunks of lines (never held whole in memory)."""
        return _chunks(self.verdicts_path)

    def console_line(self) -> str:
        return console_line({"run": self.run})


def _chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            yield chunk


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


_Repeat = tuple[Verdict, bool, bool]
"""Per rollout of a task: its verdict over all copies, whether every copy's policy view is
complete, and whether a copy has a successful call."""

_KNOWN_TASKS = 4096
"""Distinct task shapes (their repeats) whose entry a run remembers, so the next task of the
same shape is looked up rather than summed and printed again; a run of more shapes computes the
rest each time, with memory bounded."""


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
        self.tasks = TaskSpill()
        """Each task's key and entry index, spilled in the summary's order."""
        self.entries: list[tuple[TaskSummary, dict[CheckId, CoverageState]]] = []
        """Each distinct task entry once: most tasks of a run have one of a few entries (nothing
        changes an entry)."""
        self._entry_index: dict[str, int] = {}
        self._shapes: dict[tuple[_Repeat, ...], int] = {}
        """The entry index of each task shape (its repeats) met, up to :data:`_KNOWN_TASKS`."""
        self._entry_tasks: Counter[int] = Counter()
        """Tasks of each entry, for the task checks' coverage and flag counts."""
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
                (verdicts.pop() if len(verdicts) == 1 else "unobserved", complete, successful > 0)
            )
            self._rollout = None

    def _close_task(self) -> None:
        self._close_rollout()
        if self._repeats:
            assert self._task is not None
            shape = tuple(self._repeats)
            index = self._shapes.get(shape)
            if index is None:
                entry = _task_entry(shape, self.ignored_set)
                key = repr(entry)
                index = self._entry_index.get(key)
                if index is None:
                    index = self._entry_index[key] = len(self.entries)
                    self.entries.append(entry)
                if len(self._shapes) < _KNOWN_TASKS:
                    self._shapes[shape] = index
            self._entry_tasks[index] += 1
            self.tasks.add(self._task, index)
            self._repeats = []

    def summary(self, stats: RunStats) -> RunSummary:
        """The ``run`` object (the tasks are in :attr:`tasks`)."""
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
        for index, count in self._entry_tasks.items():
            entry, task_coverage = self.entries[index]
            for check in TASK_CHECK_IDS:
                coverage[check][task_coverage[check]] += count
            for flag in entry["flags"]:
                self.issues[flag] += count
        return {
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
        }


def merge_runs(
    runs: Sequence[tuple[Iterator[Entry], int]], ignored: tuple[CheckId, ...], stats: RunStats
) -> HealthReport:
    """Merge sorted runs, each with the ordinal of its range's first row, into the report
    (:func:`~gymflow.health._runs.merge_entries`)."""
    reducer = _Reducer(ignored)
    mark_duplicates = "rollout_duplicate_identity" not in reducer.ignored_set
    healthy = bytearray()
    paths: list[str] = []
    try:
        fd, path = scratch.scratch_file("verdicts", ".jsonl")
        paths.append(path)
        with open(fd, "w", encoding="utf-8", newline="\n") as out:
            group: list[Entry] = []  # entries sharing one identity: almost always one
            ordinals: list[int] = []
            for item, ordinal in chain(merge_entries(runs), [(None, 0)]):
                if group and (item is None or item.key != group[0].key):
                    if len(group) > 1 and mark_duplicates:
                        group = [with_duplicates(member, len(group)) for member in group]
                    for member, at in zip(group, ordinals, strict=True):
                        reducer.add(member)
                        out.write(member.line)
                        out.write("\n")
                        if member.verdict == "healthy":
                            if at >= len(healthy):
                                healthy.extend(bytes(at + 1 - len(healthy)))
                            healthy[at] = 1
                    group, ordinals = [], []
                if item is not None:
                    group.append(item)
                    ordinals.append(ordinal)
        run = reducer.summary(stats)
        fd, path = scratch.scratch_file("summary", ".json")
        paths.append(path)
        entries = [entry for entry, _ in reducer.entries]
        tasks = ((key, entries[index]) for key, index in reducer.tasks.items())
        with open(fd, "wb") as summary:
            summary.writelines(summary_chunks(run, tasks))
    except BaseException:
        for path in paths:
            scratch.discard(path)
        raise
    finally:
        reducer.tasks.close()
    report = HealthReport(run, paths[1], paths[0], bytes(healthy))
    for path in paths:
        weakref.finalize(report, scratch.discard, path)
    return report


_EMPTY_TASKS = b"{}\n}"
"""How the indented summary ends when it has no task."""


def summary_chunks(run: RunSummary, tasks: Iterable[tuple[str, TaskSummary]]) -> Iterator[bytes]:
    """``quality_summary.json`` in chunks, the ``tasks`` streamed in their order: 2-space indented
    JSON, non-ASCII as UTF-8. orjson writes it in C (the json module's indented encoder is Python
    code that holds every piece of a large summary in a list before joining them); the json module
    takes what orjson refuses (an integer beyond 64 bits), with the same bytes otherwise."""
    dumps = _indented_orjson
    try:
        head = dumps({"run": run, "tasks": {}})
    except TypeError:
        dumps = _indented_json
        head = dumps({"run": run, "tasks": {}})
    items = iter(tasks)
    first = next(items, None)
    if first is None:
        yield head
        return
    chunk = bytearray(head[: -len(_EMPTY_TASKS)] + b"{\n")
    entry_bytes: dict[int, bytes] = {}
    separator = b"    "
    for key, entry in chain([first], items):
        encoded = entry_bytes.get(id(entry))
        if encoded is None:
            encoded = entry_bytes[id(entry)] = dumps(entry).replace(b"\n", b"\n    ")
        chunk += separator
        chunk += dumps(key)
        chunk += b": "
        chunk += encoded
        separator = b",\n    "
        if len(chunk) >= _CHUNK_BYTES:
            yield bytes(chunk)
            chunk.clear()
    chunk += b"\n  }\n}"
    yield bytes(chunk)


def _indented_orjson(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2)


def _indented_json(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def summary_bytes(summary: QualitySummary) -> bytes:
    """``quality_summary.json`` of a summary held in memory (:func:`summary_chunks`)."""
    return b"".join(summary_chunks(summary["run"], summary["tasks"].items()))


def build_report(rows: list[RowResult], ignored: tuple[CheckId, ...], stats: RunStats) -> HealthReport:
    """The report of rows held in memory (in input order, range-local numbering of one input)."""
    run = sort_rows(rows, Placement(0, "", 0, 0))
    return merge_runs([(run.entries(), 0)], ignored, stats)


def write_reports_digested(report: HealthReport, report_dir: str) -> tuple[FileDigest, FileDigest]:
    """Write both report files atomically; returns the digests of the bytes written (summary,
    verdicts), hashed while writing: a record built from them never lists another run's bytes."""
    summary_url = storage.join(report_dir, "quality_summary.json")
    verdicts_url = storage.join(report_dir, "rollout_verdicts.jsonl")
    verdicts = FileDigest(
        storage.to_uri(verdicts_url), *storage.write_atomic_lines(verdicts_url, report.verdict_lines())
    )
    summary = FileDigest(
        storage.to_uri(summary_url), *storage.write_atomic_lines(summary_url, report.summary_chunks())
    )
    return summary, verdicts
