"""Evidence join: model-call capture + agent observations -> ``ng_trajectory`` and ``ng_perf``.

Offline equivalent of NeMo Gym 0.7.0's rollout collection (``spec/evidence.md``)::

    from gymflow.join import CaptureStore, join_row
    joined = join_row(row, CaptureStore("run/model-calls"))

:func:`run_join` joins a whole rollouts file without an orchestrator; the Prefect flow composes
:func:`plan_ranges`, :func:`join_range`, :func:`concatenate_parts` and :func:`finish`.
"""

from gymflow.join._call_records import PAYLOAD_KEYS
from gymflow.join._capture_store import CaptureRead, CaptureSource, CaptureStore, FileRead
from gymflow.join._command import run_join
from gymflow.join._file_join import (
    cache_key,
    concatenate_parts,
    current_key,
    finish,
    join_lines,
    join_range,
    missing_capture_warning,
    part_urls,
    plan_ranges,
    remove_parts,
)
from gymflow.join._identity import RowKeyError, capture_key, projection_identity
from gymflow.join._perf import compute_perf
from gymflow.join._projection import project
from gymflow.join._row import RowError, RowOutcome, join_row, join_row_outcome
from gymflow.join._settings import COMMAND, JoinResult, JoinSettings, default_output, resolve_settings
from gymflow.join._stats import JoinStats, summary_paragraph

__all__ = [
    "COMMAND",
    "PAYLOAD_KEYS",
    "CaptureRead",
    "CaptureSource",
    "CaptureStore",
    "FileRead",
    "JoinResult",
    "JoinSettings",
    "JoinStats",
    "RowError",
    "RowKeyError",
    "RowOutcome",
    "cache_key",
    "capture_key",
    "compute_perf",
    "concatenate_parts",
    "current_key",
    "default_output",
    "finish",
    "join_lines",
    "join_range",
    "join_row",
    "join_row_outcome",
    "missing_capture_warning",
    "part_urls",
    "plan_ranges",
    "project",
    "projection_identity",
    "remove_parts",
    "resolve_settings",
    "run_join",
    "summary_paragraph",
]
