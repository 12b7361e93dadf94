"""The ``ng_agent_observations`` contract (evidence spec §5) as pydantic models.

What an agent reports about one rollout: its invocations (shared with the trajectory), tool-call
timing, context compactions and sandboxes, plus gaps. As for the trajectory, fields are in 0.7.0's
order and pydantic's lax mode is 0.7.0's coercion table; the join validates a row's bundle once
with :class:`AgentObservationBundle` and works on its ``model_dump()``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gymflow.evidence.trajectory import (
    AgentInvocation,
    Count,
    ModelCallRef,
    NonNegative,
    ObservationGap,
    ToolCallObservation,
    _Strict,
)

__all__ = [
    "AgentObservationBundle",
    "AgentObservationRecord",
    "ContextCompactionObservation",
    "SandboxObservation",
]


class ContextCompactionObservation(_Strict):
    """One context compaction of an invocation and the model calls around and inside it."""

    kind: Literal["context_compaction"] = "context_compaction"
    invocation_id: str
    observed_at: float | None = None
    trigger: str | None = None
    tokens_before: Count | None = None
    tokens_after: Count | None = None
    outcome: Literal["completed", "failed", "aborted", "unknown"] = "unknown"
    summary: str | None = None
    first_kept_item_id: str | None = None
    before_model_call: ModelCallRef | None = None
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    after_model_call: ModelCallRef | None = None


class SandboxObservation(_Strict):
    """A sandbox's outcome and measured usage (never its configured limits)."""

    kind: Literal["sandbox"] = "sandbox"
    role: Literal["agent", "verifier", "environment"]
    provider: str | None = None
    sandbox_id: str | None = None
    outcome: Literal["completed", "failed", "timeout", "oom", "sandbox_error", "cancelled", "unknown"] = (
        "unknown"
    )
    exit_code: int | None = None
    wall_time_s: NonNegative | None = None
    cpu_time_s: NonNegative | None = None
    peak_memory_mib: NonNegative | None = None
    resource_usage_source: str | None = None
    error_type: str | None = None


AgentObservationRecord = Annotated[
    AgentInvocation | ToolCallObservation | ContextCompactionObservation | SandboxObservation,
    Field(discriminator="kind"),
]
"""A bundle record, chosen by its ``kind`` (which must be present)."""


class AgentObservationBundle(_Strict):
    """``ng_agent_observations``: one agent's records and gaps for one rollout (order carries no meaning)."""

    source: str
    records: list[AgentObservationRecord] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _invocation_tree(self) -> AgentObservationBundle:
        parents: dict[str, str | None] = {}
        for record in self.records:
            if isinstance(record, AgentInvocation):
                if record.invocation_id in parents:
                    raise ValueError(f"duplicate invocation_id {record.invocation_id!r}")
                parents[record.invocation_id] = record.parent_invocation_id
        acyclic: set[str] = set()
        for start in parents:
            path: set[str] = set()
            current: str | None = start
            while current is not None and current in parents and current not in acyclic:
                if current in path:
                    raise ValueError(f"parent_invocation_id cycle through {current!r}")
                path.add(current)
                current = parents[current]
            acyclic |= path
        return self
