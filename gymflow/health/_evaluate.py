"""Evaluating one record: parsing, identity, the gating ladder and per-row statistics (spec §2-§3).

A worker evaluates a line knowing only its position inside its byte range; the runner later fixes
what depends on the lines before it (ordinal, physical line number) in :meth:`RowResult.place`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gymflow.health import _checks  # noqa: F401  (registers the trajectory checks)
from gymflow.health._observed import Evidence
from gymflow.health._reading import RecordRead, read_record
from gymflow.health._registry import ROLLOUT_CHECK_IDS, TRAJECTORY_CHECKS, TrajectoryCheck, finding
from gymflow.health._vocabulary import CheckId, Finding, Identity

IDENTITY_FIELDS = ("_ng_task_index", "_ng_rollout_index", "stage_index")
_TWO_POW_63 = 2**63


class _InvalidIdentity(Exception):
    pass


def _identity_value(value: Any) -> Identity:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, str)):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < _TWO_POW_63:
        return int(value)
    raise _InvalidIdentity


@dataclass(slots=True)
class RunStats:
    """``run.stats`` and ``run.artifacts.captures``: additive, so each byte range sums its own and
    the runner adds the ranges up (rows keep no statistics of their own)."""

    captures: int = 0
    failed_statuses: Counter[str] = field(default_factory=Counter)
    rollouts_affected: int = 0
    ended_on_error: int = 0
    replayed: int = 0
    replayed_rollouts: int = 0
    prompt: int = 0
    completion: int = 0
    capture_prompt: int = 0
    capture_completion: int = 0

    def add(self, other: RunStats) -> None:
        self.captures += other.captures
        self.failed_statuses.update(other.failed_statuses)
        self.rollouts_affected += other.rollouts_affected
        self.ended_on_error += other.ended_on_error
        self.replayed += other.replayed
        self.replayed_rollouts += other.replayed_rollouts
        self.prompt += other.prompt
        self.completion += other.completion
        self.capture_prompt += other.capture_prompt
        self.capture_completion += other.capture_completion


@dataclass(slots=True)
class RowResult:
    """Everything the runner needs of one non-blank line; small and picklable."""

    line_number: int
    ordinal: int
    task: Identity | None
    rollout: Identity
    stage: Identity | None
    rollout_id: str | None
    rollout_text: str
    findings: list[Finding]
    unobserved: tuple[CheckId, ...]
    unreadable: dict[str, Any] | None = None
    policy_complete: bool = False
    successful_calls: int = 0

    def place(self, source_index: int, source_file: str, line_offset: int, ordinal_offset: int) -> None:
        """Fix the line number and ordinal once the lines before this range are counted."""
        self.line_number += line_offset
        self.ordinal += ordinal_offset
        if self.unreadable is not None:
            self.task = f"__unreadable_record__:input-{source_index}:line-{self.line_number}"
            self.rollout_id = f"{self.task}-0"
            for item in self.findings:
                if item["check"] == "record_unreadable":
                    item["locator"] = {"source_file": source_file, "line": self.line_number}
        elif self.task is None:
            self.task = self.ordinal
            if self.rollout_id is None:
                self.rollout_id = f"{self.ordinal}-{self.rollout_text}"


def _unreadable_row(
    line_number: int, ordinal: int, detail: dict[str, Any], ignored: frozenset[str]
) -> RowResult:
    findings: list[Finding] = []
    if "record_unreadable" not in ignored:
        findings.append({"check": "record_unreadable", "locator": None, "detail": detail})
    unobserved = _shared(tuple(c for c in ROLLOUT_CHECK_IDS if c != "record_unreadable" and c not in ignored))
    return RowResult(line_number, ordinal, None, 0, None, None, "0", findings, unobserved, detail)


_SHARED_UNOBSERVED: dict[tuple[CheckId, ...], tuple[CheckId, ...]] = {}


def _shared(unobserved: tuple[CheckId, ...]) -> tuple[CheckId, ...]:
    """One tuple object per distinct ``unobserved`` list: rows hold a reference, not a copy."""
    return _SHARED_UNOBSERVED.setdefault(unobserved, unobserved)


def _call_identity(call: Any) -> str | None:
    meta = call.response_metadata
    if call.model_call_id:
        return f"call:{call.model_call_id}"
    if meta.response_id:
        if meta.model_ref is not None:
            return f"response:{meta.model_ref.type}:{meta.model_ref.name}:{meta.response_id}"
        return f"response::{meta.response_id}"
    return None


def _collect_stats(stats: RunStats, evidence: Evidence) -> None:
    calls = evidence.calls
    if not calls:
        return
    stats.captures += 1
    failed = 0
    for call, call_failed in zip(calls, evidence.failed, strict=True):
        if call_failed:
            failed += 1
            status = call.response_metadata.status_code
            stats.failed_statuses["unknown" if status is None else str(status)] += 1
        tokens = call.token_stats
        stats.capture_prompt += tokens.prompt_tokens or 0
        stats.capture_completion += tokens.completion_tokens or 0
    if failed:
        stats.rollouts_affected += 1
        stats.ended_on_error += bool(evidence.failed_chains())
    if len(calls) > 1:
        identities = [identity for identity in map(_call_identity, calls) if identity is not None]
        replayed = len(identities) - len(set(identities))  # each identity's copies beyond the first
        stats.replayed += replayed
        stats.replayed_rollouts += replayed > 0


def read_identity(record: Mapping[str, Any]) -> tuple[dict[str, Identity | None], list[str]]:
    """A record's task, rollout and stage indices (None where absent), and the names of those
    that are not indices (the row is then unreadable, spec §9 D1)."""
    identity: dict[str, Identity | None] = {}
    invalid: list[str] = []
    for name in IDENTITY_FIELDS:
        if name not in record or (name == "stage_index" and record[name] is None):
            identity[name] = None
            continue
        try:
            identity[name] = _identity_value(record[name])
        except _InvalidIdentity:
            invalid.append(name)
    return identity, invalid


def evaluate_line(
    line: bytes, line_number: int, ordinal: int, ignored: frozenset[str], stats: RunStats
) -> RowResult:
    """Evaluate one non-blank line, adding its statistics to ``stats``; ``line_number`` and
    ``ordinal`` may be range-local (see :meth:`RowResult.place`)."""
    read = read_record(line)
    if not isinstance(read, RecordRead):
        return _unreadable_row(line_number, ordinal, read, ignored)
    record = read.fields
    identity, invalid = read_identity(record)
    if invalid:  # gymflow (spec §9 D1): one bad identity costs one row, not the run
        detail = {"reason": "rollout identity is unreadable", "error": "ValidationError", "fields": invalid}
        return _unreadable_row(line_number, ordinal, detail, ignored)

    raw_task = record.get("_ng_task_index", None)
    raw_rollout = record.get("_ng_rollout_index", 0)
    rollout_id: Any = record.get("_ng_rollout_id") or read.trajectory_rollout_id
    rollout_value = identity["_ng_rollout_index"]
    row = RowResult(
        line_number=line_number,
        ordinal=ordinal,
        task=identity["_ng_task_index"],
        rollout=0 if rollout_value is None else rollout_value,
        stage=identity["stage_index"],
        rollout_id=str(rollout_id) if rollout_id else None,
        rollout_text=str(raw_rollout),
        findings=[],
        unobserved=(),
    )
    if row.rollout_id is None and "_ng_task_index" in record:
        row.rollout_id = f"{raw_task}-{raw_rollout}"

    usage = read.usage
    stats.prompt += usage[0] or 0
    stats.completion += usage[1] or 0

    trajectory = read.trajectory
    if trajectory is not None and any(gap.code == "trajectory_projection_failed" for gap in trajectory.gaps):
        trajectory = None
    evidence = Evidence(trajectory, usage) if trajectory is not None else None
    if evidence is not None:
        _collect_stats(stats, evidence)
        view = evidence.turn_view
        row.policy_complete = view.complete and evidence.scope_complete
        row.successful_calls = sum(evidence.successful[p] for p in view.bound)

    checks = _checks_to_run(ignored)
    if read.trajectory_error is not None and "record_unreadable" not in ignored:
        detail = {"reason": "canonical trajectory is unreadable", "error": read.trajectory_error}
        row.findings.append(finding("record_unreadable", detail))
    if evidence is None:
        row.unobserved = _shared(tuple(check_id for check_id, _ in checks))
        return row
    unobserved: list[CheckId] = []
    for check_id, check in checks:
        if not check.observable(evidence):
            unobserved.append(check_id)
            continue
        try:
            row.findings.extend(check.evaluate(evidence))
        except Exception as exc:  # noqa: BLE001 - a defective check must not stop the run
            unobserved.append(check_id)
            if "check_execution_error" not in ignored:
                detail = {
                    "reason": "check raised an unexpected exception",
                    "failed_check": check_id,
                    "error": type(exc).__name__,
                }
                row.findings.append(finding("check_execution_error", detail))
    row.unobserved = _shared(tuple(unobserved))
    return row


@cache
def _checks_to_run(ignored: frozenset[str]) -> tuple[tuple[CheckId, TrajectoryCheck], ...]:
    """The trajectory checks not ignored, in registry order. The other rollout checks are decided
    elsewhere: ``record_unreadable`` above, ``check_execution_error`` where a check fails and
    ``rollout_duplicate_identity`` when the rows are merged."""
    return tuple(
        (check_id, TRAJECTORY_CHECKS[check_id])
        for check_id in ROLLOUT_CHECK_IDS
        if check_id in TRAJECTORY_CHECKS and check_id not in ignored
    )
