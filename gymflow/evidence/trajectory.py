"""The ``ng_trajectory`` contract (health spec §2.4, evidence spec §5) as pydantic models.

The one definition of the trajectory: fields in 0.7.0's order, lax types, defaults and the
record-level rules. The health checks validate with these models; the join validates what it
reads with them and dumps with ``model_dump()``; the rules the join must apply to values it built
itself are module functions the validators call too (:func:`identifies_a_call`,
:func:`check_tool_timing`, :func:`check_trajectory_identity`). ``tests/test_trajectory_contract.py``
pins coerced values and dumps byte for byte.

pydantic's lax mode is the reference's own coercion table (``"500"`` is a status code, ``"yes"``
a boolean, ``"1e3"`` not an integer), so validating with pydantic reproduces it exactly. Every
object rejects unknown keys except :class:`ModelServerRef`, which ignores and drops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gymflow.evidence.conversation import conversation_items
from gymflow.evidence.lax import ValidationError as LaxValidationError
from gymflow.evidence.lax import fail

MAX_FREE_FORM_DEPTH = 255
"""Deepest free-form value the reference can serialise; deeper ones make a trajectory unreadable."""

NonNegative = Annotated[float, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def identifies_a_call(model_call_id: str | None, model_ref: object, response_id: str | None) -> bool:
    """A model-call reference is valid iff it has a call id, or a server and a response id."""
    return bool(model_call_id) or (model_ref is not None and bool(response_id))


def check_tool_timing(started_at: float | None, completed_at: float | None) -> None:
    """A tool call must not complete before it starts (when both times are known)."""
    if started_at is not None and completed_at is not None and completed_at < started_at:
        fail("tool_call", "completed_at precedes started_at")


def check_trajectory_identity(
    task_id: str,
    rollout_id: str,
    invocation_ids: Iterable[str],
    model_call_ids: Iterable[str | None],
    turns: Iterable[tuple[str, str, str, int]],
) -> None:
    """The record-level rules of ``TrajectoryRecord``, in 0.7.0's order.

    ``turns`` holds ``(invocation_id, task_id, rollout_id, turn_no)`` per turn. Raises
    :class:`~gymflow.evidence.lax.ValidationError` (a ``ValueError``: inside a model validator
    pydantic reports it as its own ``ValidationError``).
    """
    invocations = list(invocation_ids)
    if len(set(invocations)) != len(invocations):
        fail("ng_trajectory", "invocation_id values must be unique")
    calls = [call_id for call_id in model_call_ids if call_id]
    if len(set(calls)) != len(calls):
        fail("ng_trajectory", "model_call_id values must be unique")
    seen: set[tuple[str, int]] = set()
    for invocation_id, turn_task, turn_rollout, turn_no in turns:
        if turn_task != task_id or turn_rollout != rollout_id:
            fail("ng_trajectory", "every turn must belong to the trajectory's task and rollout")
        key = (invocation_id, turn_no)
        if key in seen:
            fail("ng_trajectory", f"(invocation_id, turn_no) must be unique: {key!r}")
        seen.add(key)


class ModelServerRef(BaseModel):
    """Which model server answered; only the policy-model type is accepted."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["responses_api_models"]
    name: str


class ModelCallRef(_Strict):
    """A reference from a turn or invocation to a captured call."""

    model_call_id: str | None = None
    model_ref: ModelServerRef | None = None
    response_id: str | None = None

    @model_validator(mode="after")
    def _identifies_a_call(self) -> ModelCallRef:
        if not identifies_a_call(self.model_call_id, self.model_ref, self.response_id):
            raise ValueError("a model-call reference needs model_call_id, or model_ref and response_id")
        return self


class ResponseMetadata(_Strict):
    response_id: str | None = None
    model_ref: ModelServerRef | None = None
    model: str | None = None
    dialect: str | None = None
    status_code: int | None = None
    response_status: str | None = None
    finish_reason: str | None = None
    upstream_attempted: bool | None = None
    response_source: Literal["upstream", "local"] | None = None
    upstream_status_code: int | None = None
    local_response_reason: str | None = None
    error_category: str | None = None
    latency_ttft_ms: NonNegative | None = None


class TokenStats(_Strict):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    reasoning_tokens: Count | None = None
    total_tokens: Count | None = None
    cached_tokens: Count | None = None


class TrajectoryModelCall(_Strict):
    model_call_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: NonNegative | None = None
    request: Any = None
    response: Any = None
    response_metadata: ResponseMetadata = Field(default_factory=ResponseMetadata)
    token_stats: TokenStats = Field(default_factory=TokenStats)


class TrajectoryTurn(_Strict):
    invocation_id: str
    task_id: str
    rollout_id: str
    turn_no: Annotated[int, Field(ge=1)]
    timestamp: float
    question: Any = None
    answer: Any = None
    reasoning_content: Any = None
    resolved: bool | None = None
    step_count: Count
    model_calls: list[ModelCallRef] = Field(default_factory=list)


class AgentInvocation(_Strict):
    kind: Literal["agent_invocation"] = "agent_invocation"
    invocation_id: str
    parent_invocation_id: str | None = None
    spawned_by_tool_call_id: str | None = None
    status: Literal["completed", "failed", "incomplete", "unknown"] = "unknown"
    duration_ms: NonNegative | None = None
    error_type: str | None = None
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    conversation: list[Any] = Field(default_factory=list)

    @field_validator("conversation")
    @classmethod
    def _input_items(cls, items: list[Any]) -> list[Any]:
        """Each item must be a Responses input item as 0.7.0 accepts it; kept as 0.7.0 dumps it."""
        try:
            return conversation_items(items)
        except LaxValidationError as exc:
            raise ValueError(str(exc)) from None


class ToolCallObservation(_Strict):
    """Timing of one tool call as the agent observed it (an ``ng_agent_observations`` record)."""

    kind: Literal["tool_call"] = "tool_call"
    invocation_id: str
    tool_call_id: str
    sandbox_id: str | None = None
    tool_name: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: NonNegative | None = None
    timing_source: Literal["executor", "artifact", "harness"] | None = None
    status: Literal["completed", "failed", "timeout", "cancelled", "incomplete", "unknown"] = "unknown"
    error_type: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ToolCallObservation:
        check_tool_timing(self.started_at, self.completed_at)
        return self


class TrajectoryToolCall(ToolCallObservation):
    """A tool call of the trajectory: the observation plus the output the model saw."""

    output: Any = None


class ObservationGap(_Strict):
    code: str
    invocation_id: str | None = None
    detail: str | None = None


class TrajectoryRecord(_Strict):
    """The canonical trajectory of one rollout (``ng_trajectory``)."""

    schema_version: Literal["1.0"] = "1.0"
    task_id: str
    rollout_id: str
    invocations: list[AgentInvocation] = Field(default_factory=list)
    turns: list[TrajectoryTurn] = Field(default_factory=list)
    model_calls: list[TrajectoryModelCall] = Field(default_factory=list)
    tool_calls: list[TrajectoryToolCall] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TrajectoryRecord:
        check_trajectory_identity(
            self.task_id,
            self.rollout_id,
            (invocation.invocation_id for invocation in self.invocations),
            (call.model_call_id for call in self.model_calls),
            ((t.invocation_id, t.task_id, t.rollout_id, t.turn_no) for t in self.turns),
        )
        return self


class TrajectoryUnreadable(Exception):
    """``ng_trajectory`` is present but not a valid trajectory; ``error`` is the reference's name."""

    def __init__(self, error: Literal["ValidationError", "ValueError", "TypeError"], message: str) -> None:
        super().__init__(message)
        self.error = error


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels (every container or scalar is one)."""
    if limit <= 0:
        return True
    if isinstance(value, dict):
        return any(_depth_exceeds(item, limit - 1) for item in value.values())
    if isinstance(value, list):
        return any(_depth_exceeds(item, limit - 1) for item in value)
    return False


def _too_deep(value: Any) -> bool:
    # orjson's serialiser refuses the same depths or shallower ones (it counts an empty innermost
    # container as one more level), and does so in C: only values it refuses are walked exactly.
    try:
        orjson.dumps(value)
    except TypeError:
        return _depth_exceeds(value, MAX_FREE_FORM_DEPTH)
    return False


def _free_form_values(record: TrajectoryRecord) -> list[Any]:
    values: list[Any] = []
    for turn in record.turns:
        values += (turn.question, turn.answer, turn.reasoning_content)
    for call in record.model_calls:
        values += (call.request, call.response)
    values += (tool.output for tool in record.tool_calls)
    for invocation in record.invocations:
        values += invocation.conversation
    return values


def validate_trajectory(raw: Any, may_nest_deeply: bool = True) -> TrajectoryRecord:
    """Validate a parsed ``ng_trajectory`` value; raise :class:`TrajectoryUnreadable` if invalid.

    ``may_nest_deeply=False`` skips the depth walk; callers pass it when the source text holds
    fewer than :data:`MAX_FREE_FORM_DEPTH` opening brackets, so no value can nest that deep.
    """
    try:
        record = TrajectoryRecord.model_validate(raw)
    except ValidationError as exc:
        raise TrajectoryUnreadable("ValidationError", str(exc)) from None
    except TypeError as exc:  # routing a conversation item, as in 0.7.0 (it escapes pydantic)
        raise TrajectoryUnreadable("TypeError", str(exc)) from None
    if not may_nest_deeply:
        return record
    if free_form_too_deep(record):
        raise TrajectoryUnreadable("ValueError", "a free-form value is nested too deeply")
    return record


def free_form_too_deep(record: TrajectoryRecord) -> bool:
    """Whether a free-form value of a validated record nests deeper than the reference can
    serialise: it serialises the record after validating it, and its serialiser gives up on
    values nested deeper than :data:`MAX_FREE_FORM_DEPTH` levels with a ValueError."""
    return any(isinstance(value, (dict, list)) and _too_deep(value) for value in _free_form_values(record))


def conversation_too_deep(record: TrajectoryRecord) -> bool:
    """:func:`free_form_too_deep` over the conversations' items alone, for a reader that knows the
    text it read nests less deeply than the limit: validation rewrites conversations, so theirs is
    the one depth still to measure (the other free-form values are as read). Reads nothing else
    of the record, so it accepts a Struct whose other free-form fields are still text."""
    return any(
        isinstance(item, (dict, list)) and _too_deep(item)
        for invocation in record.invocations
        for item in invocation.conversation
    )
