"""What one readable record offers the checks: its trajectory, gap flags, bindings and usage."""

from __future__ import annotations

from typing import Any

from gymflow.evidence import TrajectoryModelCall, TrajectoryRecord
from gymflow.health._binding import bind_views
from gymflow.health._predicates import failed_chains, is_failed, is_successful

_MODEL_CALL_GAPS = frozenset(
    {
        "model_calls_unavailable",
        "model_call_capture_incomplete",
        "model_call_capture_records_unreadable",
        "model_call_capture_unreadable",
    }
)
CONTRADICTION_GAPS = {
    "model_call_reference_unmatched": "missing_captured_call",
    "model_call_reference_ambiguous": "duplicated_captured_call",
    "model_call_reference_conflict": "conflicting_call_ownership",
}


def _usage_side(usage: dict[str, Any], primary: str, fallback: str) -> int | None:
    value = usage[primary] if primary in usage else usage.get(fallback)
    if type(value) is int and value >= 0:
        return value
    return None


def transcript_usage(record: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt, completion) from ``response.usage``; ``None`` where a side does not count."""
    response = record.get("response")
    return response_usage(response.get("usage") if isinstance(response, dict) else None)


def response_usage(usage: Any) -> tuple[int | None, int | None]:
    """(prompt, completion) of a ``response.usage`` value; ``None`` where a side does not count."""
    if not isinstance(usage, dict):
        return None, None
    return (
        _usage_side(usage, "input_tokens", "prompt_tokens"),
        _usage_side(usage, "output_tokens", "completion_tokens"),
    )


class Evidence:
    """The evidence of one readable record whose trajectory is observed (spec §3), computed once
    when the record is read: every record's checks use nearly all of it."""

    __slots__ = (
        "_chains",
        "_owned_calls",
        "calls",
        "calls_observed",
        "failed",
        "gap_codes",
        "has_contradiction",
        "memo",
        "owned",
        "scope_complete",
        "successful",
        "trajectory",
        "turn_view",
        "turns_observed",
        "usage",
        "usage_present",
    )

    def __init__(self, trajectory: TrajectoryRecord, usage: tuple[int | None, int | None]) -> None:
        self.trajectory = trajectory
        self.usage = usage
        self.usage_present = usage[0] is not None and usage[1] is not None
        self.calls: list[TrajectoryModelCall] = trajectory.model_calls
        self.failed = [is_failed(call) for call in self.calls]
        """:func:`is_failed` of each captured call."""
        self.successful = [is_successful(call) for call in self.calls]
        """:func:`is_successful` of each captured call."""
        self._chains: list[tuple[int, list[int]]] | None = None
        codes = frozenset(gap.code for gap in trajectory.gaps) if trajectory.gaps else frozenset()
        self.gap_codes = codes
        self.turns_observed = "turns_unavailable" not in codes
        self.calls_observed = not (codes & _MODEL_CALL_GAPS)
        self.scope_complete = "turn_model_call_scope_incomplete" not in codes
        self.has_contradiction = any(code in CONTRADICTION_GAPS for code in codes)
        self.turn_view, self.owned = bind_views(trajectory)
        self._owned_calls = [(position, self.calls[position]) for position in self.owned.bound]
        self.memo: dict[str, Any] = {}
        """Results that several checks share, computed once."""

    def failed_chains(self) -> list[tuple[int, list[int]]]:
        """:func:`failed_chains` of the captured calls, computed once."""
        if self._chains is None:
            self._chains = failed_chains(self.calls, self.failed)
        return self._chains

    def owned_calls(self) -> list[tuple[int, TrajectoryModelCall]]:
        """(position, call) of each bound owned call, ascending (do not change the list)."""
        return self._owned_calls
