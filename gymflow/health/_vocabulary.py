"""The closed sets of the health reports, as types: check ids, verdicts, coverage states, and the
finding every rollout check emits. Registry order is the order of :data:`CheckId`'s values."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, TypeGuard, get_args

__all__ = ["CHECK_IDS", "CheckId", "CoverageState", "Finding", "Verdict", "is_check_id"]

CheckId = Literal[
    "check_execution_error",
    "record_unreadable",
    "rollout_duplicate_identity",
    "rollout_missing_agent_turns",
    "rollout_ended_on_failed_model_call",
    "agent_turn_hollow",
    "model_call_zero_completion_tokens",
    "model_call_missing_token_counts",
    "trajectory_capture_mismatch",
    "model_call_failed",
    "rollout_token_count_mismatch",
    "model_call_runaway_generation",
    "task_consistently_unhealthy",
    "task_no_successful_model_calls",
]
"""The 14 stable check ids, in registry order: 12 rollout checks, then the 2 task checks."""

CHECK_IDS: tuple[CheckId, ...] = get_args(CheckId)

Verdict = Literal["healthy", "unhealthy", "unobserved"]
"""A row's verdict: ``unhealthy`` (a finding) > ``unobserved`` (a check lacked evidence) > ``healthy``."""

CoverageState = Literal["evaluated", "unobserved", "ignored"]
"""What became of one check for one row or task."""


class Finding(TypedDict):
    """One piece of evidence from a rollout check, written into its row as is (keys in this order;
    ``locator`` only when the check has one)."""

    check: CheckId
    locator: NotRequired[dict[str, Any] | None]
    detail: dict[str, Any]


def is_check_id(value: str) -> TypeGuard[CheckId]:
    return value in CHECK_IDS
