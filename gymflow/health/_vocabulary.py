"""The vocabulary of the health reports, as types: the closed sets (check ids, verdicts, coverage
states), the finding every rollout check emits, and the shapes of both report files. Registry
order is the order of :data:`CheckId`'s values."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, TypeGuard, get_args

__all__ = [
    "CHECK_IDS",
    "CheckId",
    "CoverageState",
    "Finding",
    "Identity",
    "QualitySummary",
    "RunSummary",
    "TaskSummary",
    "Verdict",
    "VerdictCounts",
    "VerdictRow",
    "is_check_id",
]

Identity = int | str
"""A task, rollout or stage index as read (an integer, or a string the record used)."""

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


class VerdictRow(TypedDict):
    """One line of ``rollout_verdicts.jsonl`` (keys in this order)."""

    _ng_task_index: Identity | None
    _ng_rollout_index: Identity
    rollout_id: str | None
    verdict: Verdict
    findings: list[Finding]
    unobserved: tuple[CheckId, ...]
    stage_index: NotRequired[Identity]


class VerdictCounts(TypedDict):
    healthy: int
    unhealthy: int
    unobserved: int


class TaskSummary(VerdictCounts):
    """One task of ``quality_summary.json``: repeat count, repeat verdicts, fired task checks."""

    repeats: int
    flags: list[CheckId]


class ArtifactsSummary(TypedDict):
    records: int
    captures: int
    coverage: dict[CheckId, dict[CoverageState, int]]


class ModelCallErrors(TypedDict):
    total: int
    by_status: dict[str, int]
    rollouts_affected: int
    ended_on_error: int


class DuplicatedCalls(TypedDict):
    replayed: int
    rollouts: int


class TokenTotals(TypedDict):
    prompt: int
    completion: int
    capture_prompt: int
    capture_completion: int


class RunStatsSummary(TypedDict):
    model_call_errors: ModelCallErrors
    duplicated_calls: DuplicatedCalls
    tokens: TokenTotals


class RunSummary(TypedDict):
    ignored_checks: list[CheckId]
    artifacts: ArtifactsSummary
    verdicts: VerdictCounts
    issues: dict[CheckId, int]
    stats: RunStatsSummary


class QualitySummary(TypedDict):
    """``quality_summary.json``: the run's counts, coverage and statistics, and every task."""

    run: RunSummary
    tasks: dict[str, TaskSummary]
