"""The per-row pipeline: capture merge, projection, perf (evidence.md §1, §7 "Attach", §9).

:func:`join_row` never changes its argument: it works on a shallow copy and copies any nested
object before changing it. Output keys keep the input's order; new keys are appended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from gymflow.errors import InputError
from gymflow.join._call_records import PAYLOAD_KEYS
from gymflow.join._capture_merge import is_no_result_row, merge_capture
from gymflow.join._capture_store import CaptureSource
from gymflow.join._identity import RowKeyError, projection_identity
from gymflow.join._perf import compute_perf
from gymflow.join._projection import project

__all__ = ["EVIDENCE_KEYS", "RowError", "RowOutcome", "join_row", "join_row_outcome"]

Obj = dict[str, Any]

EVIDENCE_KEYS: Final = ("ng_model_call_capture", "ng_agent_observations", "ng_trajectory")
FAILED: Final = "trajectory_projection_failed"


class RowError(InputError):
    """A row cannot be joined (malformed rollout id); it is written unchanged and counted."""


@dataclass(frozen=True)
class RowOutcome:
    """One joined row and what happened to it."""

    row: Obj
    merged: bool = False
    projected: bool = False
    projection_failed: bool = False
    error: str | None = None


def _failure_detail(exc: BaseException) -> str:
    # A malformed explicit id fails the projection with ValueError in 0.7.0.
    return "ValueError" if isinstance(exc, RowKeyError) else type(exc).__name__


def _append_failure(holder: Obj, key: str, row: Obj, gap: Obj) -> bool:
    """Append ``gap`` to ``row[key]["gaps"]`` (copying what it changes); False if gaps is not a list."""
    gaps = holder.get("gaps", [])
    if not isinstance(gaps, list):
        return False
    # [G] never a second identical failure gap (0.7.0 appends one per pass); a dumped copy of the
    # gap carries "invocation_id": null and is the same gap.
    same = (gap["code"], None, gap["detail"])
    if not any(
        isinstance(g, dict) and (g.get("code"), g.get("invocation_id"), g.get("detail")) == same for g in gaps
    ):
        row[key] = {**holder, "gaps": [*gaps, gap]}
    return True


def _record_failure(row: Obj, exc: BaseException) -> None:
    row.pop("ng_trajectory", None)
    detail = _failure_detail(exc)
    gap = {"code": FAILED, "detail": detail}
    capture = row.get("ng_model_call_capture")
    observations = row.get("ng_agent_observations")
    if isinstance(capture, dict):
        if _append_failure(capture, "ng_model_call_capture", row, gap):
            return
    elif isinstance(observations, dict):
        if _append_failure(observations, "ng_agent_observations", row, gap):
            return
    try:
        task_id, rollout_id = projection_identity(row)
    except Exception:  # noqa: BLE001 - 0.7.0 skips the minimal trajectory silently
        return
    row["ng_trajectory"] = {
        "schema_version": "1.0",
        "task_id": task_id,
        "rollout_id": rollout_id,
        "invocations": [],
        "turns": [],
        "model_calls": [],
        "tool_calls": [],
        "gaps": [{"code": FAILED, "invocation_id": None, "detail": detail}],
    }


def _strip_payloads(row: Obj, owned: bool) -> None:
    capture = row.get("ng_model_call_capture")
    if not isinstance(capture, dict):
        return
    calls = capture.get("calls")
    if not isinstance(calls, list):
        return
    if owned:
        for call in calls:
            if isinstance(call, dict):
                for key in PAYLOAD_KEYS:
                    call.pop(key, None)
        return
    stripped = [
        {k: v for k, v in call.items() if k not in PAYLOAD_KEYS} if isinstance(call, dict) else call
        for call in calls
    ]
    row["ng_model_call_capture"] = {**capture, "calls": stripped}


def join_row_outcome(row: Obj, capture: CaptureSource | None, *, perf: bool = True) -> RowOutcome:
    """Join one row: merge its capture (when ``capture`` is given), project, compute perf."""
    out = dict(row)
    merged = False
    if capture is not None and not is_no_result_row(out):
        try:
            merged = merge_capture(out, capture)
        except RowKeyError as exc:
            return RowOutcome(row=row, error=str(exc))
    projected = failed = False
    if any(key in out for key in EVIDENCE_KEYS):
        bundle = out.get("ng_agent_observations") if merged else None
        joined_bundle = (
            bundle if isinstance(bundle, dict) and bundle is not row.get("ng_agent_observations") else None
        )
        try:
            trajectory = project(out, joined_bundle, owned_calls=merged)
        except Exception as exc:  # noqa: BLE001 - any failure is recorded as a gap, never raised
            failed = True
            _record_failure(out, exc)
        else:
            projected = True
            out["ng_trajectory"] = trajectory
            _strip_payloads(out, owned=merged)
    if perf:
        trajectory_value = out.get("ng_trajectory") if projected else None
        value = None
        if isinstance(trajectory_value, dict):
            try:
                value = compute_perf(trajectory_value, out.get("ng_perf"))
            except Exception:  # noqa: BLE001 - any failure: no ng_perf, row otherwise unaffected
                value = None
        if value is None:
            out.pop("ng_perf", None)
        else:
            out["ng_perf"] = value
    return RowOutcome(row=out, merged=merged, projected=projected, projection_failed=failed)


def join_row(row: Obj, capture: CaptureSource | None, *, perf: bool = True) -> Obj:
    """The joined copy of ``row``. Raises :class:`RowError` for a malformed rollout id.

    ``capture`` is the CaptureStore to read (None: ``--no-capture``); ``perf=False`` leaves
    ``ng_perf`` untouched (0.7.0 ``observability_enabled: false``).
    """
    outcome = join_row_outcome(row, capture, perf=perf)
    if outcome.error is not None:
        raise RowError(outcome.error)
    return outcome.row
