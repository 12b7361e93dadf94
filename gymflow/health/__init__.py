"""Rollout health checks (spec ``health.md``): is each rollout's evidence complete and consistent?

Checks are small pure functions in a registry keyed by stable ids; byte ranges of the
input are evaluated (serially or in a process pool) into sorted runs of rows, which are merged
into two reports.
"""

from gymflow.health._command import (
    COMMAND,
    HealthOptions,
    HealthOutcome,
    cache_key,
    cached_outcome,
    record_outputs,
    run_health,
)
from gymflow.health._ranges import (
    ByteRange,
    HealthPlan,
    RangeResult,
    evaluate_range,
    finish,
    plan,
    report_dir_for,
)
from gymflow.health._reading import is_blank
from gymflow.health._registry import ROLLOUT_CHECK_IDS, TASK_CHECK_IDS, normalize_ignored
from gymflow.health._report import HealthReport, build_report
from gymflow.health._runs import SortKey, row_key, verdict_key
from gymflow.health._vocabulary import (
    CHECK_IDS,
    CheckId,
    CoverageState,
    Finding,
    QualitySummary,
    TaskSummary,
    Verdict,
    VerdictRow,
)

__all__ = [
    "COMMAND",
    "CHECK_IDS",
    "ROLLOUT_CHECK_IDS",
    "TASK_CHECK_IDS",
    "ByteRange",
    "CheckId",
    "CoverageState",
    "Finding",
    "HealthOptions",
    "HealthOutcome",
    "HealthPlan",
    "HealthReport",
    "QualitySummary",
    "RangeResult",
    "SortKey",
    "TaskSummary",
    "Verdict",
    "VerdictRow",
    "build_report",
    "cache_key",
    "cached_outcome",
    "evaluate_range",
    "finish",
    "is_blank",
    "normalize_ignored",
    "plan",
    "record_outputs",
    "report_dir_for",
    "row_key",
    "run_health",
    "verdict_key",
]
