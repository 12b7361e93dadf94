"""The steps of ``eval aggregate`` (select, hash, scan, merge, reduce, write) and their texts.

:func:`gymflow.aggregate.run_aggregate` (``_command.py``) is their one sequence. Progress text
goes to an ``echo`` callback; the core never prints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gymflow import provenance, storage
from gymflow.aggregate._merge import write_merged
from gymflow.aggregate._metrics_reading import read_metrics_file
from gymflow.aggregate._metrics_writing import metrics_bytes, write_metrics
from gymflow.aggregate._reduce import Coverage, ReduceSettings, Reduction, key_metrics_lines, reduce_shards
from gymflow.aggregate._scan import ShardScan, parse_line, resolve_group, scan_shard
from gymflow.aggregate._select import failures_path, materialized_path, metrics_path
from gymflow.aggregate._server import ServerSettings, server_entries
from gymflow.aggregate._sidecars import ShardSidecars, read_sidecars
from gymflow.aggregate._spill import pack_run, shard_rows, spiller
from gymflow.collector import paused_gc
from gymflow.frozen import FrozenDict, freeze
from gymflow.run_context import RunContext

__all__ = [
    "COMMAND",
    "AggregateOptions",
    "AggregateOutcome",
    "ShardPart",
    "apply_server_metrics",
    "banner_lines",
    "cache_key",
    "read_cached",
    "input_digests",
    "is_up_to_date",
    "loaded_line",
    "merge_job",
    "reduce_parts",
    "write_merged_file",
    "metrics_bytes",
    "prehash",
    "report_run",
    "up_to_date_line",
    "scan_part",
    "write_metrics_file",
    "write_record",
]

logger = logging.getLogger(__name__)
COMMAND = "eval aggregate"

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class AggregateOptions:
    """Everything one aggregate run needs, already validated (the CLI builds it from flags/config).

    Immutable through and through: the mappings it is given are frozen copies
    (:func:`gymflow.frozen.freeze`), which still pickle into process-pool workers.
    """

    input_glob: str
    output: str
    merge_shards: bool = True
    settings: ReduceSettings = field(default_factory=ReduceSettings)
    agent_environments: Mapping[str, str] = field(default_factory=FrozenDict)
    config_files: tuple[str, ...] = ()
    # The health step after aggregation (aggregate.md §1.8), run by gymflow.pipeline, not here.
    health_check: bool = True
    health_check_workers: int | None = None
    health_check_ignored: tuple[str, ...] = ()
    use_cache: bool = True
    server_metrics: bool = False
    """Ask each group's resources server (``server_config``) instead of computing locally."""
    server_config: Mapping[str, Any] = field(default_factory=FrozenDict)
    server: ServerSettings = field(default_factory=ServerSettings)
    workers: int | None = None
    """Processes reading local shards in the direct path (default 1); no effect on outputs."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_environments", freeze(self.agent_environments))
        object.__setattr__(self, "server_config", freeze(self.server_config))

    @property
    def metrics_path(self) -> str:
        return metrics_path(self.output)

    @property
    def record_path(self) -> str:
        return provenance.record_path(self.output)

    def parameters(self) -> dict[str, Any]:
        """Settings that can change an output byte (the cache key's parameters)."""
        pass_majority = self.settings.pass_majority
        return {
            "merge_shards": self.merge_shards,
            "count_failure_classes_as_zero": list(self.settings.count_failure_classes_as_zero),
            "count_missing_rollouts_as_zero": self.settings.count_missing_rollouts_as_zero,
            "pass_majority": None
            if pass_majority is None
            else {"score_field": pass_majority.score_field, "answer_key": pass_majority.answer_key},
            "agent_environments": dict(sorted(self.agent_environments.items())),
            "server_metrics": self.server_metrics,
        }


@dataclass
class ShardPart:
    """The per-shard result: the shard's scan and its sidecars."""

    scan: ShardScan
    sidecars: ShardSidecars


@dataclass
class AggregateOutcome:
    shards: list[str]
    output: str
    merged: bool
    metrics_path: str
    record_path: str
    up_to_date: bool
    entries: list[dict[str, Any]] = field(default_factory=list)
    coverage: Coverage | None = None
    rollouts: list[int] | None = None
    """The rollouts each entry covers, when the entries were read back without their groups (an
    up-to-date run); see :func:`covered`."""


def scan_part(
    shard: str, index: int, options: AggregateOptions, spool_dir: str | None, spill_dir: str | None = None
) -> ShardPart:
    """Read one shard (hash, parse, facts) and its sidecars. Its rows become sorted runs: files
    in ``spill_dir`` (local scratch that outlives the part), else the runs' bytes, which the part
    carries (a cached scan's result holds them)."""
    with paused_gc():
        settings = options.settings
        track = bool(settings.count_failure_classes_as_zero or settings.count_missing_rollouts_as_zero)
        spill = pack_run if spill_dir is None else spiller(spill_dir)
        scan = scan_shard(
            shard, index, settings.pass_majority, options.agent_environments, spool_dir, track, spill
        )
        # The shard's keys, for its failures sidecar (rows it has are not failures).
        keys = (
            {(row.facts.task, row.facts.rollout) for row in shard_rows(scan)}
            if storage.isfile(failures_path(shard))
            else ()
        )
    return ShardPart(scan, read_sidecars(shard, keys, options.agent_environments))


def input_digests(
    parts: Sequence[ShardPart], options: AggregateOptions
) -> list[tuple[str, provenance.FileDigest]]:
    """(role, digest) of every file read: shards, their sidecars, config files."""
    out: list[tuple[str, provenance.FileDigest]] = []
    for part in parts:
        index = part.scan.index
        out.append(
            (
                f"shard:{index}",
                provenance.FileDigest(storage.to_uri(part.scan.url), part.scan.sha256, part.scan.nbytes),
            )
        )
        for role, sidecar in (
            ("failures", part.sidecars.failures_file),
            ("materialized", part.sidecars.materialized_file),
        ):
            if sidecar is not None:
                out.append(
                    (
                        f"{role}:{index}",
                        provenance.FileDigest(storage.to_uri(sidecar.url), sidecar.sha256, sidecar.nbytes),
                    )
                )
    for number, path in enumerate(options.config_files):
        out.append((f"config:{number}", provenance.digest(path)))
    return out


def apply_server_metrics(reduction: Reduction, options: AggregateOptions, shards: Sequence[str]) -> None:
    """With ``server_metrics``, replace the local entries by the resources servers' answers."""
    if not options.server_metrics:
        return
    sources = [options.output] if options.merge_shards else list(shards)
    rows: dict[str, list[dict[str, Any]]] = {}
    for source in sources:
        line_number = 0
        for _, line in storage.iter_lines(source):
            line_number += 1
            if line and not line.isspace():
                row = parse_line(source, line_number, line)
                rows.setdefault(resolve_group(row, options.agent_environments).key, []).append(row)
    reduction.entries = server_entries(
        reduction.entries, reduction.groups, rows, options.server_config, options.server
    )


def cache_key(options: AggregateOptions, inputs: Sequence[tuple[str, provenance.FileDigest]]) -> str:
    return provenance.cache_key(COMMAND, options.parameters(), [(role, item.sha256) for role, item in inputs])


def prehash(shards: Sequence[str], options: AggregateOptions) -> list[tuple[str, provenance.FileDigest]]:
    """Digests of the inputs without parsing them: what the up-to-date check compares."""
    out: list[tuple[str, provenance.FileDigest]] = []
    for index, shard in enumerate(shards):
        out.append((f"shard:{index}", provenance.digest(shard)))
        for role, path in (("failures", failures_path(shard)), ("materialized", materialized_path(shard))):
            if storage.isfile(path):
                out.append((f"{role}:{index}", provenance.digest(path)))
    for number, path in enumerate(options.config_files):
        out.append((f"config:{number}", provenance.digest(path)))
    return out


def is_up_to_date(
    shards: Sequence[str],
    options: AggregateOptions,
    digests: Sequence[tuple[str, provenance.FileDigest]] | None = None,
) -> bool:
    """Whether the record at the output already covers these exact inputs and settings
    (``digests``: :func:`prehash` of the shards, when the caller has it already)."""
    if not options.use_cache or not storage.isfile(options.record_path):
        return False
    known = digests if digests is not None else prehash(shards, options)
    return provenance.up_to_date(options.record_path, cache_key(options, known))


def write_metrics_file(reduction: Reduction, options: AggregateOptions) -> provenance.FileDigest:
    """Write the metrics file; its digest."""
    with paused_gc():  # the task objects made while writing form no cycles
        sha256, size = write_metrics(options.metrics_path, reduction.entries)
    return provenance.FileDigest(storage.to_uri(options.metrics_path), sha256, size)


def write_record(
    parts: Sequence[ShardPart],
    options: AggregateOptions,
    ctx: RunContext,
    started_at: str,
    metrics: provenance.FileDigest,
    merged: provenance.FileDigest | None,
) -> None:
    """Write the provenance record listing every output (last, once they are all written): the
    merged file (``merged``, when the shards were merged) and the metrics file."""
    outputs = [metrics] if merged is None else [merged, metrics]
    inputs = input_digests(parts, options)
    record = provenance.build_record(
        command=COMMAND,
        cache_key=cache_key(options, inputs),
        inputs=[item for _, item in inputs],
        outputs=outputs,
        parameters={**options.parameters(), "input_glob": options.input_glob, "output": options.output},
        orchestrator=ctx.orchestrator,
        config=ctx.config,
        started_at=started_at,
        finished_at=provenance.timestamp(),
    )
    provenance.write_record(options.record_path, record)


def up_to_date_line(options: AggregateOptions) -> str:
    return f"Aggregate outputs are up to date (provenance record {options.record_path}); nothing recomputed"


def loaded_line(parts: Sequence[ShardPart]) -> str:
    count = sum(part.scan.count for part in parts)
    return f"Loaded {count} rollout record(s) from {len(parts)} shard(s)"


def banner_lines(options: AggregateOptions, coverage: Coverage | None) -> list[str]:
    """The closing block of §1.7."""
    lines = [
        "Finished rollout aggregation! View results at:",
        f"Merged rollouts: {options.output if options.merge_shards else '<not merged>'}",
        f"Aggregate metrics: {options.metrics_path}",
    ]
    if coverage is None:
        return lines
    if coverage.missing:
        classes = ", ".join(f"{count} {name}" for name, count in coverage.dropped.items())
        lines.append(
            f"Rollouts missing from the score: {coverage.missing} of {coverage.expected} materialized "
            f"({classes} routed this run; see the shards' _failures.jsonl sidecars)"
        )
        lines.append(f"Metrics cover: {coverage.scored} of {coverage.expected} rollouts")
    if coverage.imputed:
        lines.append(
            f"Scored as zero because they left no row: {coverage.imputed} of {coverage.expected} rollouts"
        )
    return lines


def reduce_parts(parts: Sequence[ShardPart], options: AggregateOptions) -> Reduction:
    """Every group's metrics, from the shards' rows (held or in sorted runs)."""
    with paused_gc():
        return reduce_shards(
            [part.scan for part in parts], [part.sidecars for part in parts], options.settings
        )


def merge_job(parts: Sequence[ShardPart], output: str) -> tuple[list[ShardScan], str]:
    """What writing the merged file needs of the parts: each shard's rows and where its bytes are
    (not its groups, perf or key sets, which need not travel to a worker process)."""
    scans = [replace(part.scan, perf={}, row_keys={}, groups={}) for part in parts]
    return scans, output


def write_merged_file(job: tuple[list[ShardScan], str]) -> provenance.FileDigest:
    """Write the merged file of :func:`merge_job`'s scans; its digest."""
    scans, output = job
    # The collector stays paused: the rows re-serialized would have it traverse the rows held.
    with paused_gc():
        return write_merged(scans, output)


def report_run(
    reduction: Reduction, options: AggregateOptions, outcome: AggregateOutcome, echo: Echo
) -> None:
    """After the outputs are written: the reduce step's text, key metrics, banner (§1.6-§1.7)."""
    for line in reduction.lines:
        echo(line)
    for warning in reduction.warnings:  # each distinct text once per group (§3.9)
        logger.warning(warning)
    for entry in reduction.entries:
        for line in key_metrics_lines(entry):
            echo(line)
    for line in banner_lines(options, reduction.coverage):
        echo(line)
    outcome.entries = reduction.entries
    outcome.coverage = reduction.coverage


def read_cached(outcome: AggregateOutcome) -> None:
    """The entries (without their groups) and the rollouts they cover, of the metrics file an
    up-to-date run found: what its summary and artifacts show, read in bounded memory."""
    found = read_metrics_file(outcome.metrics_path, groups=0)
    if found is not None:
        outcome.entries, outcome.rollouts = found.entries, found.rollouts
