"""Aggregate metrics over the rollouts a health check calls healthy (issue 20 item 3).

``eval post`` writes, beside the merged rollouts' metrics file, the same metrics computed over
only the rows whose verdict in ``rollout_verdicts.jsonl`` is ``healthy`` (no finding, no check
left unobserved): ``<metrics stem>.healthy.json``, e.g. ``rollouts_aggregate_metrics.healthy.json``.
This module sits above :mod:`gymflow.aggregate` and :mod:`gymflow.health` and composes their
steps; it computes nothing itself. The healthy rows are streamed into local scratch files, in
order, one per part of the rollouts' bytes, which are read exactly as ``eval aggregate`` reads
shards (each in a worker process where the executor has them), then reduced as one shard of
consecutive pieces (the same scan, reduce and server-metrics steps, the same metrics bytes), so
the file equals ``eval aggregate``'s metrics of a shard holding only those rows.

Rows and verdicts are matched by the key the health check sorts its report by (task, rollout,
stage): among rows sharing a key, the n-th row of the rollouts is the n-th verdict of that key
(the report keeps input order among equal keys). The rows' keys are sorted beside the report
(spilled to scratch files beyond a few hundred thousand rows) and one flag per line is held, never
rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, NoReturn

import orjson

from gymflow import lineage, provenance, scratch, storage
from gymflow.aggregate import (
    AggregateOptions,
    Reduction,
    ShardPart,
    apply_server_metrics,
    covered,
    read_metrics_file,
    reduce_parts,
    scan_part,
    write_metrics,
)
from gymflow.errors import InputError
from gymflow.executor import Executor, LocalExecutor, Step
from gymflow.health import SortKey, is_blank, row_key, verdict_key
from gymflow.parallel import default_workers
from gymflow.run_context import RunContext
from gymflow.spill import sorted_spilled

__all__ = [
    "COMMAND",
    "HEALTHY",
    "HealthyOptions",
    "HealthyOutcome",
    "healthy_metrics_path",
    "reward_lines",
    "run_healthy_metrics",
]

COMMAND = "eval post healthy-metrics"
HEALTHY = "healthy"
"""The one verdict counted: ``unhealthy`` rows have findings, ``unobserved`` ones could not be
checked in full; neither is counted."""


def healthy_metrics_path(metrics_path: str) -> str:
    """``…/rollouts_aggregate_metrics.json`` -> ``…/rollouts_aggregate_metrics.healthy.json``."""
    return metrics_path.removesuffix(".json") + ".healthy.json"


@dataclass(frozen=True)
class HealthyOptions:
    """One healthy-metrics run: the merged rollouts the main metrics were computed from, the
    verdicts of a health check of them (or of their join, row for row), and the aggregate
    settings of the main metrics (grouping, pass@k, server metrics)."""

    rollouts: str
    verdicts: str
    aggregate: AggregateOptions
    use_cache: bool = True
    healthy_rows: bytes | None = field(default=None, repr=False, compare=False)
    """The health check's own flags of ``rollouts``' rows (:attr:`gymflow.health.HealthOutcome.
    healthy_rows`), when it has just checked that file: then the verdicts need not be paired with
    the rows again. Derived from the inputs: not part of the cache key."""

    @property
    def output(self) -> str:
        return healthy_metrics_path(self.aggregate.metrics_path)

    @property
    def record_path(self) -> str:
        return provenance.record_path(self.output)

    @property
    def scoring(self) -> AggregateOptions:
        """The aggregate options the healthy rows are scored with: one local shard, no merge."""
        return replace(self.aggregate, input_glob="", output="", merge_shards=False, health_check=False)

    def parameters(self) -> dict[str, Any]:
        """Settings that can change an output byte (the cache key's parameters)."""
        return {"aggregate": self.scoring.parameters(), "verdict": HEALTHY}


@dataclass
class HealthyOutcome:
    output: str
    record_path: str
    up_to_date: bool
    entries: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[int] | None = None
    """The rollouts each entry covers, when the entries were read back without their groups (up
    to date); see :func:`gymflow.aggregate.covered`."""
    rows: int = 0
    """Rows of the rollouts (0 when up to date: not read)."""
    healthy: int = 0
    """Of which healthy (0 when up to date)."""


Digests = tuple[tuple[str, provenance.FileDigest], ...]


def _inputs(options: HealthyOptions) -> Digests:
    files = [("rollouts", options.rollouts), ("verdicts", options.verdicts)]
    files += [(f"config:{n}", path) for n, path in enumerate(options.aggregate.config_files)]
    return tuple((role, provenance.digest(path)) for role, path in files)


def cache_key(options: HealthyOptions, inputs: Digests) -> str:
    return provenance.cache_key(COMMAND, options.parameters(), [(r, d.sha256) for r, d in inputs])


def _verdicts(url: str) -> Iterator[tuple[SortKey, bool]]:
    """Each verdict's key and whether it is ``healthy``, in report order (which is checked)."""
    line_number = 0
    previous: SortKey | None = None
    for _, line in storage.iter_lines(url):
        line_number += 1
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
            key = verdict_key(row)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise InputError(f"{url} line {line_number}: not a rollout verdict") from None
        if previous is not None and key < previous:
            raise InputError(
                f"{url} line {line_number}: not in report order (by task, rollout, stage); "
                "health-check these rollouts again"
            )
        previous = key
        yield key, row.get("verdict") == HEALTHY


@dataclass
class _Counts:
    rows: int = 0
    healthy: int = 0


def _row_keys(url: str) -> Iterator[tuple[SortKey, int, int]]:
    """The report key, physical line number and row number of each row of ``url``."""
    line_number = rows = 0
    for _, line in storage.iter_lines(url):
        line_number += 1
        key = row_key(line, line_number, rows)
        if key is not None:
            yield key, line_number, rows
            rows += 1


def _paired_flags(options: HealthyOptions, directory: str) -> bytearray:
    """A flag per row of the rollouts (by its number): 1 where its verdict is healthy.

    The rows' keys are sorted (spilled to ``directory`` beyond a few hundred thousand, so memory
    stays flat) and walked beside the verdicts, which are in report order: among rows sharing a
    key, the n-th in the rollouts meets the n-th verdict of that key."""
    flags = bytearray()
    verdicts = _verdicts(options.verdicts)
    for key, line_number, number in sorted_spilled(_row_keys(options.rollouts), directory):
        judged = next(verdicts, None)
        if judged is None or judged[0] > key:
            missing = f"has no verdict for line {line_number} of {options.rollouts}"
            _refuse(verdicts, f"{options.verdicts} {missing}")
        if judged[0] < key:
            break
        if judged[1]:
            if len(flags) <= number:
                flags.extend(bytes(number + 1 - len(flags)))
            flags[number] = 1
    else:
        if next(verdicts, None) is None:
            return flags
    _refuse(verdicts, f"{options.verdicts} judges rows that {options.rollouts} does not hold")


def _refuse(verdicts: Iterator[tuple[SortKey, bool]], problem: str) -> NoReturn:
    """Raise ``problem``, unless the rest of the verdicts is out of report order: then that (the
    rows and the verdicts cannot be paired, whatever else is wrong)."""
    for _ in verdicts:
        pass
    raise InputError(f"{problem}; health-check these rollouts again")


def _healthy_lines(options: HealthyOptions, counts: _Counts, directory: str) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of each line of the rollouts whose verdict is healthy, in order,
    counting rows and healthy rows into ``counts``: by the health check's own flags of the rows
    when it has just checked them, else by pairing its verdicts with the rows."""
    given = options.healthy_rows
    healthy = given if given is not None else _paired_flags(options, directory)
    for offset, line in storage.iter_lines(options.rollouts):
        if is_blank(line):
            continue
        number = counts.rows
        counts.rows += 1
        if number < len(healthy) and healthy[number]:
            counts.healthy += 1
            yield offset, line if line.endswith(b"\n") else line + b"\n"
    if len(healthy) > counts.rows:
        url = options.rollouts
        raise InputError(f"{url} holds fewer rows than its health check judged; health-check it again")


PIECE_MIN_BYTES = 32 * 2**20
"""Rollouts bytes per piece at least: a piece scanned in a worker process of its own pays for
handing its rows' facts back."""


@dataclass(frozen=True)
class _Picked:
    pieces: tuple[str, ...]
    """Scratch files holding the healthy lines, in order: consecutive runs of them, one per part
    of the rollouts' bytes (at least one file, maybe empty)."""
    rows: int
    healthy: int


def _pick(job: tuple[HealthyOptions, str, int]) -> _Picked:
    """Write the healthy lines into up to ``count`` pieces in ``directory``."""
    options, directory, count = job
    counts = _Counts()
    size = storage.size(options.rollouts)
    pieces: list[str] = []
    handle: BinaryIO | None = None
    current = -1
    try:
        for offset, line in _healthy_lines(options, counts, directory):
            part = offset * count // size  # a line starts before the end: part < count
            if handle is None or part > current:
                if handle is not None:
                    handle.close()
                pieces.append(os.path.join(directory, f"healthy-{len(pieces):03d}.jsonl"))
                handle = open(pieces[-1], "wb", buffering=2**20)  # noqa: SIM115 - closed below
                current = part
            handle.write(line)
    finally:
        if handle is not None:
            handle.close()
    if not pieces:  # no healthy row: one empty shard, scored as eval aggregate scores one
        pieces.append(os.path.join(directory, "healthy-000.jsonl"))
        open(pieces[0], "wb").close()
    return _Picked(tuple(pieces), counts.rows, counts.healthy)


def _scan_piece(job: tuple[str, int, AggregateOptions, str]) -> ShardPart:
    """One piece, read as ``eval aggregate`` reads a shard; its rows go to sorted runs in the
    scratch directory."""
    piece, index, scoring, directory = job
    return scan_part(piece, index, scoring, None, directory)


def _score(job: tuple[Sequence[ShardPart], Sequence[str], AggregateOptions]) -> Reduction:
    """The pieces' metrics: one shard's, as the pieces are its consecutive runs of rows (every
    rule of the reduce orders rows by piece, then line)."""
    parts, pieces, scoring = job
    reduction = reduce_parts(parts, scoring)
    apply_server_metrics(reduction, scoring, pieces)
    return reduction


_WriteJob = tuple[HealthyOptions, Reduction, Digests, RunContext, str]


def _write(job: _WriteJob) -> None:
    """The metrics file, then (last) its provenance record."""
    options, reduction, inputs, ctx, started_at = job
    sha256, size = write_metrics(options.output, reduction.entries)  # streamed, as eval aggregate's
    output = provenance.FileDigest(storage.to_uri(options.output), sha256, size)
    record = provenance.build_record(
        command=COMMAND,
        cache_key=cache_key(options, inputs),
        inputs=[item for _, item in inputs],
        outputs=[output],
        parameters={**options.parameters(), "rollouts": options.rollouts, "verdicts": options.verdicts},
        orchestrator=ctx.orchestrator,
        config=ctx.config,
        started_at=started_at,
        finished_at=provenance.timestamp(),
    )
    provenance.write_record(options.record_path, record)


HASH_INPUTS: Step[HealthyOptions, Digests] = Step("hash-inputs", _inputs, io=True)
PICK_HEALTHY: Step[tuple[HealthyOptions, str, int], _Picked] = Step("pick-healthy-rollouts", _pick, io=True)
"""Reads storage (the rollouts and verdicts); a transient failure is retried."""
SCAN_PIECE: Step[tuple[str, int, AggregateOptions, str], ShardPart] = Step(
    "scan-healthy-piece", _scan_piece, cpu=True, tracked=False
)
SCORE_HEALTHY: Step[tuple[Sequence[ShardPart], Sequence[str], AggregateOptions], Reduction] = Step(
    "score-healthy-rollouts", _score, io=True
)
"""With server metrics, asks the resources servers: a transient failure is retried."""
WRITE_HEALTHY: Step[_WriteJob, None] = Step("write-healthy-metrics", _write, io=True)


def run_healthy_metrics(
    options: HealthyOptions, ctx: RunContext | None = None, executor: Executor | None = None
) -> HealthyOutcome:
    """Write the metrics of the healthy rows of ``options.rollouts`` and their provenance record
    (nothing when the record shows the same inputs and settings and the file is intact)."""
    ctx = ctx or RunContext()
    with lineage.run(COMMAND, ctx), ctx.active(), ctx.lock(options.output, COMMAND):
        pieces = _pieces(options)
        if executor is not None:
            return _run(options, ctx, executor, pieces)
        with LocalExecutor(ctx, pieces, "scoring healthy rollouts") as local:
            return _run(options, ctx, local, pieces)


def _pieces(options: HealthyOptions) -> int:
    """Pieces the healthy rows are scanned in, each in a worker process where the executor has
    them: one per worker (``--workers``, else one per CPU up to 8), each from at least
    :data:`PIECE_MIN_BYTES` of the rollouts."""
    workers = options.aggregate.workers or default_workers()
    return max(1, min(workers, storage.size(options.rollouts) // PIECE_MIN_BYTES))


def _run(options: HealthyOptions, ctx: RunContext, executor: Executor, pieces: int) -> HealthyOutcome:
    started_at = provenance.timestamp()
    outcome = HealthyOutcome(options.output, options.record_path, False)
    located = replace(
        options, rollouts=executor.locate(options.rollouts), verdicts=executor.locate(options.verdicts)
    )
    inputs = executor.call(HASH_INPUTS, located)
    if options.use_cache and provenance.up_to_date(options.record_path, cache_key(options, inputs)):
        outcome.up_to_date = True
        found = read_metrics_file(options.output, groups=0)
        if found is not None:
            outcome.entries, outcome.rollouts = found.entries, found.rollouts
        return outcome
    with scratch.temporary_dir("healthy") as directory:
        picked = executor.call(PICK_HEALTHY, (located, directory, pieces))
        scoring = options.scoring
        jobs = [(piece, index, scoring, directory) for index, piece in enumerate(picked.pieces)]
        parts = executor.map(SCAN_PIECE, jobs)
        reduction = executor.call(SCORE_HEALTHY, (parts, picked.pieces, scoring))
    write = WRITE_HEALTHY.writing([options.output, options.record_path], [digest.uri for _, digest in inputs])
    executor.call(write, (options, reduction, inputs, ctx, started_at))
    outcome.entries = reduction.entries
    outcome.rows, outcome.healthy = picked.rows, picked.healthy
    return outcome


def reward_lines(
    everything: Sequence[Mapping[str, Any]],
    healthy: Sequence[Mapping[str, Any]],
    metric: str = "mean/reward",
    *,
    rollouts: tuple[Sequence[int] | None, Sequence[int] | None] = (None, None),
) -> list[str]:
    """One line per group of the main metrics: its ``metric`` over all rollouts beside the same
    over the healthy ones, each with the rollouts it covers (``rollouts``: those of each side's
    entries when they were read back without their groups)."""
    healthy_rollouts = covered(healthy, rollouts[1])
    by_label = {
        entry["agent_ref"]["name"]: (entry, n) for entry, n in zip(healthy, healthy_rollouts, strict=True)
    }
    lines = []
    for entry, count in zip(everything, covered(everything, rollouts[0]), strict=True):
        label = entry["agent_ref"]["name"]
        if metric not in entry.get("agent_metrics", {}):
            continue
        line = f"{metric} of {label}: all {entry['agent_metrics'][metric]} ({count} rollouts)"
        other, other_count = by_label.get(label, ({}, 0))
        value = other.get("agent_metrics", {}).get(metric, "n/a")
        lines.append(f"{line}, healthy {value} ({other_count} rollouts)")
    return lines
