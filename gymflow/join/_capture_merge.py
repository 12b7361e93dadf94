"""Capture merge: build a row's ``ng_model_call_capture`` and join its observations (§4.4).

The attachment lists every captured call of the rollout in file order with its metrics and read
gaps. When the row carries agent observations, they are validated and their model-call references
are joined against the calls (:mod:`gymflow.join._reference_join`); any failure there leaves the
observations untouched and records ``agent_observation_join_failed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from gymflow.evidence.observations import dump_bundle
from gymflow.join._capture_store import CaptureRead, CaptureSource
from gymflow.join._identity import capture_key
from gymflow.join._reference_join import join_references

__all__ = [
    "NO_RESULT_FAILURES",
    "capture_gaps",
    "capture_metrics",
    "compaction_hook",
    "is_no_result_row",
    "merge_capture",
    "neumaier_sum",
    "payloads_redacted",
]

Obj = dict[str, Any]

NO_RESULT_FAILURES: Final = frozenset(
    {"agent_request_failed", "agent_run_error", "environment_server_failed"}
)
REDACTED_CODE: Final = "multimodal_history_redacted"
METRIC_FIELDS: Final = (
    ("tokens_in", "tokens_in"),
    ("tokens_out", "tokens_out"),
    ("tokens_reasoning", "tokens_reasoning"),
    ("tokens_total", "tokens_total"),
    ("cached_tokens", "cached_tokens"),
    ("latency_total_ms", "latency_total_ms"),
)


def is_no_result_row(row: Obj) -> bool:
    """A row whose agent produced no result: no capture merge for it (§1)."""
    return row.get("_ng_failure_class") in NO_RESULT_FAILURES or bool(row.get("_ng_dispatch_drained"))


def payloads_redacted(row: Obj) -> bool:
    """Whether the row carries ``multimodal_history_redacted`` (then payloads are not attached)."""
    for holder in (row.get("ng_trajectory"), row.get("ng_agent_observations")):
        gaps = holder.get("gaps") if isinstance(holder, dict) else None
        if isinstance(gaps, list):
            for item in gaps:
                if isinstance(item, dict) and item.get("code") == REDACTED_CODE:
                    return True
    return False


def neumaier_sum(values: Iterable[int | float]) -> int | float:
    """``sum(values)`` exactly as CPython 3.12 computes it (integers exact, floats compensated).

    Python 3.11's ``sum`` adds floats naively and ``math.fsum`` rounds differently; 0.7.0 runs on
    3.12, whose result the metrics must reproduce bit for bit.
    """
    iterator = iter(values)
    total: int | float = 0
    for item in iterator:
        if type(item) is int or type(item) is bool:
            total = total + item
            continue
        total = total + item  # the first float: int + float, as CPython's int loop does
        break
    else:
        return total
    if type(total) is not float:  # pragma: no cover - only floats and ints reach here
        return sum(iterator, total)
    result: float = total
    compensation = 0.0
    for item in iterator:
        if type(item) is float:
            t = result + item
            if abs(result) >= abs(item):
                compensation += (result - t) + item
            else:
                compensation += (item - t) + result
            result = t
        elif type(item) is int and -(2**63) <= item < 2**63:
            result += float(item)
        else:  # pragma: no cover - not produced by the join
            if compensation and compensation - compensation == 0.0:
                result += compensation
            rest: int | float = result + item
            return sum(iterator, rest)
    if compensation and compensation - compensation == 0.0:  # non-zero and finite
        result += compensation
    return result


def capture_metrics(calls: list[Obj]) -> Obj:
    metrics: Obj = {}
    for name, source in METRIC_FIELDS:
        values = [call[source] for call in calls if call[source] is not None]
        metrics[name] = neumaier_sum(values) if values else None
    metrics["num_calls"] = len(calls)
    return metrics


def capture_gaps(read: CaptureRead) -> list[Obj]:
    """The read gaps of §4.4, dumped without null keys."""
    if not read.exists:
        return [{"code": "model_call_capture_no_records"}]
    if read.unreadable:
        return [{"code": "model_call_capture_unreadable"}]
    gaps: list[Obj] = []
    if read.invalid:
        gaps.append({"code": "model_call_capture_records_unreadable", "detail": f"count={read.invalid}"})
    if read.incomplete:
        gaps.append({"code": "model_call_capture_incomplete"})
    elif not read.records and not read.invalid:
        gaps.append({"code": "model_call_capture_no_records"})
    return gaps


def compaction_hook(bundle: Obj, records: list[Obj]) -> None:
    """The claude_code compaction hook of §6.1. [G] v1 defines the interface and skips the matching."""
    return None


def merge_capture(row: Obj, source: CaptureSource) -> bool:
    """Attach ``ng_model_call_capture`` to ``row`` (a copy the caller owns) and join its observations.

    Returns False when the row has no capture key (nothing changes). Raises
    :class:`~gymflow.join._identity.RowKeyError` for a malformed key.
    """
    key = capture_key(row)
    if key is None:
        return False
    read = source.read(key, payloads=not payloads_redacted(row))
    calls = read.records
    gaps = capture_gaps(read)
    attachment: Obj = {"rollout_id": key, "metrics": capture_metrics(calls), "calls": calls}
    observations = row.get("ng_agent_observations")
    joined: Obj | None = None
    if observations is not None:
        try:
            joined = dump_bundle(observations)
            if joined["source"] == "claude_code":
                compaction_hook(joined, calls)
            join_references(joined, calls)
        except Exception:  # noqa: BLE001 - 0.7.0 turns any failure here into a gap
            joined = None
            gaps.append({"code": "agent_observation_join_failed"})
    if gaps:
        attachment["gaps"] = gaps
    row["ng_model_call_capture"] = attachment
    if joined is not None:
        row["ng_agent_observations"] = joined
    return True
