"""The rollouts of a run as one index, built by streaming its reports once.

One entry per row of ``rollout_verdicts.jsonl`` (every checked record has one, health.md §7.2):
its identity, verdict and the checks that found something, the reward of the record it judges
and, when the run was re-verified, the reward ``/verify`` gave it now. Each entry keeps only the
byte offsets of its verdict line and its rollout line, so a page of the table is a slice of
columns in memory and one rollout's findings and trajectory are two range reads: 160,000 rollouts
cost a few seconds to index once and milliseconds per page.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gymflow import storage

__all__ = ["Filters", "Page", "RolloutIndex", "RolloutRow", "build_index"]

_Key = str
"""The identity (task, rollout, stage) of a row, as the ``repr`` of the values msgspec decodes:
what pairs a verdict with its record and a record with its re-verified row (values of any JSON
type, integers beyond 64 bits exact, so text, not tuples)."""


@dataclass(frozen=True)
class Filters:
    """What the rollouts table shows: every row, or those of one verdict, check and/or task."""

    verdict: str | None = None
    check: str | None = None
    task: str | None = None

    def active(self) -> dict[str, str]:
        return {k: v for k, v in (("verdict", self.verdict), ("check", self.check), ("task", self.task)) if v}


@dataclass(frozen=True)
class RolloutRow:
    """One row of the rollouts table (``number`` is its position in ``rollout_verdicts.jsonl``)."""

    number: int
    task: str
    rollout: str
    stage: str | None
    verdict: str
    checks: tuple[str, ...]
    reward: Any
    reverified: Any
    """The re-verified reward; :data:`NOT_REVERIFIED` when the run has no re-verified row for it."""


NOT_REVERIFIED: Any = None


@dataclass(frozen=True)
class Page:
    rows: list[RolloutRow]
    total: int
    """Rows matching the filters (all pages)."""
    number: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))


def _label(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _key(task: Any, rollout: Any, stage: Any) -> _Key:
    return repr((task, rollout, stage))


class _Identity(msgspec.Struct):
    """The fields of a rollout row the index keeps; msgspec skips the rest without building it."""

    task: Any = msgspec.field(default=None, name="_ng_task_index")
    rollout: Any = msgspec.field(default=None, name="_ng_rollout_index")
    stage: Any = msgspec.field(default=None, name="stage_index")
    reward: Any = None


_IDENTITY = msgspec.json.Decoder(_Identity)
_DECODE = msgspec.json.Decoder()


def _identity(line: bytes) -> tuple[_Key, Any] | None:
    """(identity key, reward) of a rollout row, None for a line that is not a JSON object."""
    try:
        row = _IDENTITY.decode(line)
    except msgspec.MsgspecError:
        return None
    return _key(row.task, row.rollout, row.stage), row.reward


@dataclass
class RolloutIndex:
    """Column store of a run's rollouts; see the module docstring."""

    verdicts_url: str
    tasks: list[str] = field(default_factory=list)
    rollouts: list[str] = field(default_factory=list)
    stages: list[str | None] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    checks: list[tuple[str, ...]] = field(default_factory=list)
    rewards: list[Any] = field(default_factory=list)
    reverified: list[Any] = field(default_factory=list)
    verdict_spans: list[tuple[int, int]] = field(default_factory=list)
    record_spans: list[tuple[int, int, int] | None] = field(default_factory=list)
    """(file number in ``sources``, start, end) of each row's record, None when not found."""
    sources: list[str] = field(default_factory=list)
    by_verdict: dict[str, list[int]] = field(default_factory=dict)
    by_check: dict[str, list[int]] = field(default_factory=dict)
    by_task: dict[str, list[int]] = field(default_factory=dict)
    has_reverify: bool = False
    total: int = 0
    """Rows of ``rollout_verdicts.jsonl``: :func:`build_index` with a ``limit`` holds only the first."""

    def __len__(self) -> int:
        return len(self.tasks)

    def row(self, number: int) -> RolloutRow:
        return RolloutRow(
            number,
            self.tasks[number],
            self.rollouts[number],
            self.stages[number],
            self.verdicts[number],
            self.checks[number],
            self.rewards[number],
            self.reverified[number],
        )

    def matching(self, filters: Filters) -> Sequence[int]:
        """Row numbers matching ``filters``, in file order (the smallest posting list, narrowed)."""
        lists = [
            index.get(value, [])
            for index, value in (
                (self.by_verdict, filters.verdict),
                (self.by_check, filters.check),
                (self.by_task, filters.task),
            )
            if value
        ]
        if not lists:
            return range(len(self))
        lists.sort(key=len)
        if len(lists) == 1:
            return lists[0]
        others = [set(each) for each in lists[1:]]
        return [n for n in lists[0] if all(n in other for other in others)]

    def page(self, filters: Filters, number: int, size: int) -> Page:
        """Page ``number`` (0-based, clamped to the last) of the rows matching ``filters``."""
        rows = self.matching(filters)
        last = max(0, -(-len(rows) // size) - 1)
        number = min(max(number, 0), last)
        chosen = rows[number * size : (number + 1) * size]
        return Page([self.row(n) for n in chosen], len(rows), number, size)

    def verdict_row(self, number: int) -> dict[str, Any]:
        """The whole ``rollout_verdicts.jsonl`` row (findings with their details)."""
        start, end = self.verdict_spans[number]
        value = _DECODE.decode(storage.read_range(self.verdicts_url, start, end))
        return value if isinstance(value, dict) else {}

    def record(self, number: int) -> dict[str, Any] | None:
        """The rollout record ``number`` judges (None when the rollouts file does not hold it)."""
        span = self.record_spans[number]
        if span is None:
            return None
        source, start, end = span
        try:
            value = _DECODE.decode(storage.read_range(self.sources[source], start, end))
        except msgspec.DecodeError:
            return None
        return value if isinstance(value, dict) else None

    def changed(self) -> Iterator[RolloutRow]:
        """Rows whose re-verified reward differs from the reward they had."""
        for n in range(len(self)):
            after = self.reverified[n]
            if after is not NOT_REVERIFIED and after != self.rewards[n]:
                yield self.row(n)


def _record_spans(
    sources: Sequence[str], wanted: Mapping[_Key, int] | None = None
) -> dict[_Key, deque[tuple[int, int, int, Any]]]:
    """Every record of ``sources`` by identity, in file order: (file, start, end, reward). With
    ``wanted``, only the first records of each identity it counts, as many as it counts (those
    the index pairs with its rows), and the reading stops once they are all found."""
    spans: dict[_Key, deque[tuple[int, int, int, Any]]] = defaultdict(deque)
    missing = None if wanted is None else dict(wanted)
    left = 0 if wanted is None else sum(wanted.values())
    if missing is not None and not left:
        return spans
    for number, url in enumerate(sources):
        for offset, line in storage.iter_lines(url):
            if not line.strip():
                continue
            found = _identity(line)
            if found is None:
                continue
            key = found[0]
            if missing is not None:
                need = missing.get(key, 0)
                if not need:
                    continue
                missing[key] = need - 1
                left -= 1
            spans[key].append((number, offset, offset + len(line), found[1]))
            if missing is not None and not left:
                return spans
    return spans


def _reverified_rewards(url: str | None) -> dict[_Key, Any]:
    out: dict[_Key, Any] = {}
    if url is None or not storage.isfile(url):
        return out
    for _, line in storage.iter_lines(url):
        found = _identity(line) if line.strip() else None
        if found is not None:
            out[found[0]] = found[1]
    return out


def _checks_of(findings: Iterable[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(f.get("check")) for f in findings if isinstance(f, dict)))


def _verdict_lines(verdicts_url: str) -> Iterator[tuple[int, bytes]]:
    for offset, line in storage.iter_lines(verdicts_url):
        if line.strip():
            yield offset, line


def _identity_of(line: bytes) -> _Key:
    row = _DECODE.decode(line)
    return _key(row.get("_ng_task_index"), row.get("_ng_rollout_index"), row.get("stage_index"))


def build_index(
    verdicts_url: str, sources: Sequence[str], reverified_url: str | None = None, *, limit: int | None = None
) -> RolloutIndex:
    """Index ``rollout_verdicts.jsonl`` against the rollouts files it judged (``sources``, in the
    order health-check read them) and the re-verified rollouts, if any.

    A verdict row is paired with the first unpaired record of the same identity: verdict rows are
    sorted stably by identity (health.md §7.2), so duplicates pair in input order.

    With ``limit``, only the first ``limit`` rows are held (and only their records looked up), so
    memory stays flat however large the run; ``total`` still counts every row. A re-verified run is
    indexed whole: what changed is counted over every row.
    """
    index = RolloutIndex(verdicts_url, sources=list(sources))
    index.has_reverify = reverified_url is not None and storage.isfile(reverified_url)
    lines: Iterable[tuple[int, bytes]]
    if limit is None or index.has_reverify:
        lines, spans = _verdict_lines(verdicts_url), _record_spans(sources)
    else:
        every = _verdict_lines(verdicts_url)
        held = list(itertools.islice(every, limit))
        index.total = len(held) + sum(1 for _ in every)
        lines, spans = held, _record_spans(sources, Counter(_identity_of(line) for _, line in held))
    after = _reverified_rewards(reverified_url)
    by_verdict: dict[str, list[int]] = defaultdict(list)
    by_check: dict[str, list[int]] = defaultdict(list)
    by_task: dict[str, list[int]] = defaultdict(list)
    for number, (offset, line) in enumerate(lines):
        row = _DECODE.decode(line)
        task, rollout, stage = row.get("_ng_task_index"), row.get("_ng_rollout_index"), row.get("stage_index")
        key = _key(task, rollout, stage)
        found = spans.get(key)
        span = found.popleft() if found else None
        index.tasks.append(_label(task))
        index.rollouts.append(_label(rollout))
        index.stages.append(None if stage is None else _label(stage))
        verdict = str(row.get("verdict"))
        index.verdicts.append(verdict)
        checks = _checks_of(row.get("findings") or ())
        index.checks.append(checks)
        index.rewards.append(span[3] if span else None)
        index.reverified.append(after.get(key, NOT_REVERIFIED))
        index.verdict_spans.append((offset, offset + len(line)))
        index.record_spans.append(span[:3] if span else None)
        by_verdict[verdict].append(number)
        by_task[index.tasks[-1]].append(number)
        for check in checks:
            by_check[check].append(number)
    index.by_verdict, index.by_check, index.by_task = dict(by_verdict), dict(by_check), dict(by_task)
    index.total = max(index.total, len(index))
    return index
