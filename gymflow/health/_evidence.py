"""What one readable record offers the checks: its trajectory, gap flags, bindings and usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gymflow.evidence import TrajectoryModelCall, TrajectoryRecord
from gymflow.evidence.references import CallIndex
from gymflow.health._binding import BindingView, bind, index_calls, owned_references, turn_references

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
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return (
        _usage_side(usage, "input_tokens", "prompt_tokens"),
        _usage_side(usage, "output_tokens", "completion_tokens"),
    )


@dataclass
class Evidence:
    """The evidence of one readable record whose trajectory is observed (spec §3)."""

    trajectory: TrajectoryRecord
    usage: tuple[int | None, int | None]
    memo: dict[str, Any] = field(default_factory=dict)
    """Results that several checks share, computed once."""

    @cached_property
    def gap_codes(self) -> frozenset[str]:
        return frozenset(gap.code for gap in self.trajectory.gaps)

    @property
    def calls(self) -> list[TrajectoryModelCall]:
        return self.trajectory.model_calls

    @property
    def turns_observed(self) -> bool:
        return "turns_unavailable" not in self.gap_codes

    @property
    def calls_observed(self) -> bool:
        return not (self.gap_codes & _MODEL_CALL_GAPS)

    @property
    def scope_complete(self) -> bool:
        return "turn_model_call_scope_incomplete" not in self.gap_codes

    @property
    def has_contradiction(self) -> bool:
        return any(code in CONTRADICTION_GAPS for code in self.gap_codes)

    @cached_property
    def call_index(self) -> CallIndex:
        return index_calls(self.calls)

    @cached_property
    def owned(self) -> BindingView:
        return bind(owned_references(self.trajectory), self.call_index)

    @cached_property
    def turn_view(self) -> BindingView:
        return bind(turn_references(self.trajectory), self.call_index)

    def owned_calls(self) -> list[tuple[int, TrajectoryModelCall]]:
        return [(position, self.calls[position]) for position in self.owned.bound]

    @property
    def usage_present(self) -> bool:
        return self.usage[0] is not None and self.usage[1] is not None
