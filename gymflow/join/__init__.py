"""Evidence join: model-call capture + agent observations -> ``ng_trajectory`` and ``ng_perf``.

Offline equivalent of NeMo Gym 0.7.0's rollout collection (``spec/evidence.md``)::

    from gymflow.join import CaptureStore, join_row
    joined = join_row(row, CaptureStore("run/model-calls"))

:func:`join_rollouts` joins a whole rollouts file (or a byte range of it) and writes the result.
"""

from gymflow.join.capture import CaptureRead, CaptureSource, CaptureStore, FileRead, MemoryCapture
from gymflow.join.identity import RowKeyError, capture_key, projection_identity
from gymflow.join.perf import compute_perf
from gymflow.join.projection import project
from gymflow.join.row import RowError, RowOutcome, join_row, join_row_outcome

__all__ = [
    "CaptureRead",
    "CaptureSource",
    "CaptureStore",
    "FileRead",
    "MemoryCapture",
    "RowError",
    "RowKeyError",
    "RowOutcome",
    "capture_key",
    "compute_perf",
    "join_row",
    "join_row_outcome",
    "project",
    "projection_identity",
]
