"""Shard merge and aggregate metrics (spec ``aggregate.md``), local or on any fsspec storage.

Metrics are pure functions over :class:`RowFacts` (the numbers a row contributes);
:func:`run_aggregate` is the whole ``eval aggregate`` command in-process.
"""

from gymflow.aggregate._command import run_aggregate
from gymflow.aggregate._merge import write_merged
from gymflow.aggregate._metrics import DuplicateRolloutError, GroupMetrics, group_metrics, key_metrics
from gymflow.aggregate._metrics_reading import (
    GROUP_ROWS,
    MetricsFile,
    covered,
    read_metrics_file,
    rollouts_covered,
)
from gymflow.aggregate._metrics_writing import write_metrics
from gymflow.aggregate._passk import highest_k_metrics, pass_at_k
from gymflow.aggregate._reduce import Coverage, ReduceSettings, Reduction, assign_labels, reduce_shards
from gymflow.aggregate._rows import RowFacts, ScoreSpec, extract
from gymflow.aggregate._run import (
    COMMAND,
    AggregateOptions,
    AggregateOutcome,
    ShardPart,
    apply_server_metrics,
    banner_lines,
    is_up_to_date,
    loaded_line,
    metrics_bytes,
    prehash,
    reduce_parts,
    report_run,
    scan_part,
    up_to_date_line,
    write_metrics_file,
    write_record,
)
from gymflow.aggregate._scan import ShardScan, scan_shard
from gymflow.aggregate._select import metrics_path, select_shards, split_patterns
from gymflow.aggregate._server import ServerMetricsError, ServerSettings

__all__ = [
    "COMMAND",
    "GROUP_ROWS",
    "MetricsFile",
    "read_metrics_file",
    "rollouts_covered",
    "covered",
    "AggregateOptions",
    "AggregateOutcome",
    "Coverage",
    "DuplicateRolloutError",
    "GroupMetrics",
    "ReduceSettings",
    "Reduction",
    "RowFacts",
    "ScoreSpec",
    "ShardPart",
    "ShardScan",
    "assign_labels",
    "ServerMetricsError",
    "ServerSettings",
    "apply_server_metrics",
    "banner_lines",
    "extract",
    "group_metrics",
    "highest_k_metrics",
    "is_up_to_date",
    "key_metrics",
    "loaded_line",
    "reduce_parts",
    "metrics_bytes",
    "write_metrics",
    "prehash",
    "report_run",
    "metrics_path",
    "pass_at_k",
    "reduce_shards",
    "run_aggregate",
    "scan_part",
    "scan_shard",
    "select_shards",
    "split_patterns",
    "up_to_date_line",
    "write_merged",
    "write_metrics_file",
    "write_record",
]
