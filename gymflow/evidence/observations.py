"""The ``ng_agent_observations`` contract (evidence spec §5) as pydantic models.

What an agent reports about one rollout: its invocations (shared with the trajectory), tool-call
timing, context compactions and sandboxes, plus gaps. As for the trajectory, fields are in 0.7.0's
order and pydantic's lax mode is 0.7.0's coercion table; the join validates a row's bundle once
with :class:`AgentObservationBundle` and works on its ``model_dump()``, which :func:`dump_bundle`
computes through msgspec Structs where they accept the bundle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal, get_args

import msgspec
from pydantic import Field, model_validator

from gymflow.evidence.structs import struct_converters
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
    "check_invocation_tree",
    "dump_bundle",
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


def check_invocation_tree(invocations: Iterable[tuple[str, str | None]]) -> None:
    """``(invocation_id, parent_invocation_id)`` of a bundle's invocations: ids are unique and
    parents form no cycle. Raises ``ValueError``."""
    parents: dict[str, str | None] = {}
    for invocation_id, parent in invocations:
        if invocation_id in parents:
            raise ValueError(f"duplicate invocation_id {invocation_id!r}")
        parents[invocation_id] = parent
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


class AgentObservationBundle(_Strict):
    """``ng_agent_observations``: one agent's records and gaps for one rollout (order carries no meaning)."""

    source: str
    records: list[AgentObservationRecord] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _invocation_tree(self) -> AgentObservationBundle:
        check_invocation_tree(
            (r.invocation_id, r.parent_invocation_id) for r in self.records if isinstance(r, AgentInvocation)
        )
        return self


_RECORD_MODELS: Final = (
    AgentInvocation,
    ToolCallObservation,
    ContextCompactionObservation,
    SandboxObservation,
)
_KINDS: Final = tuple(get_args(model.model_fields["kind"].annotation)[0] for model in _RECORD_MODELS)
_BUNDLE_KEYS: Final = frozenset(AgentObservationBundle.model_fields)
*_record_converters, _gap_converter = struct_converters([*_RECORD_MODELS, ObservationGap])
_CONVERT_RECORD: Final = dict(zip(_KINDS, _record_converters, strict=True))
_INVOCATION: Final = _KINDS[0]


def _fast_dump(raw: Any) -> dict[str, Any]:
    """The bundle's dump through the msgspec Structs; raises where they decline."""
    if type(raw) is not dict or not raw.keys() <= _BUNDLE_KEYS:
        raise TypeError("not a plain bundle")
    source = raw["source"]
    records = raw.get("records", [])
    gaps = raw.get("gaps", [])
    if type(source) is not str or type(records) is not list or type(gaps) is not list:
        raise TypeError("not a plain bundle")
    converted = [_CONVERT_RECORD[record["kind"]](record) for record in records]
    check_invocation_tree(
        (r.invocation_id, r.parent_invocation_id) for r in converted if r.kind == _INVOCATION
    )
    dumped: dict[str, Any] = {
        "source": source,
        "records": msgspec.to_builtins(converted),
        "gaps": msgspec.to_builtins([_gap_converter(gap) for gap in gaps]),
    }
    return dumped


def dump_bundle(raw: Any) -> dict[str, Any]:
    """``AgentObservationBundle.model_validate(raw).model_dump()``: the same values in the same
    order through msgspec Structs when they accept ``raw``, else through the model, which raises
    what 0.7.0 raises."""
    try:
        return _fast_dump(raw)
    except Exception:  # noqa: BLE001 - any doubt goes to the exact path
        return AgentObservationBundle.model_validate(raw).model_dump()
