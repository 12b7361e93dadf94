"""Validation of a parsed document against the accepted ATIF v1.7 profile (reverify.md §3.5).

Every object rejects unknown keys and every type is strict (no bool for an int, no string for a
number). The first problem found is raised as :class:`ProfileError`, whose text names the field
path and the reason on one line, e.g. ``steps[0].timestamp: invalid ISO 8601 timestamp: …``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast, get_args

from gymflow.atif.fields import (
    Fields,
    ProfileError,
    at,
    boolean,
    choices,
    cost,
    count,
    json_object,
    listed,
    logprobs,
    number,
    objects,
    string,
    token_ids,
)
from gymflow.atif.model import (
    SCHEMA_VERSION,
    Agent,
    Content,
    ContentPart,
    FinalMetrics,
    ImageSource,
    MediaType,
    Observation,
    ObservationResult,
    Step,
    StepMetrics,
    StepSource,
    ToolCall,
    Trajectory,
)

_MEDIA_TYPES: tuple[str, ...] = get_args(MediaType)
_SOURCES: tuple[str, ...] = get_args(StepSource)
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def _timestamp(value: Any, path: str) -> str:
    text = string(value, path)
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ProfileError(path, f"invalid ISO 8601 timestamp: {exc}") from None
    return text


def _image_source(value: Any, path: str) -> ImageSource:
    fields = Fields(value, path, ("media_type", "path"))
    media_type = fields.need("media_type", string)
    if media_type not in _MEDIA_TYPES:
        raise ProfileError(at(path, "media_type"), f"Input should be {choices(_MEDIA_TYPES)}")
    image_path = fields.need("path", string)
    fields.done()
    return ImageSource(media_type=cast(MediaType, media_type), path=image_path)


def _content_part(value: Any, path: str) -> ContentPart:
    fields = Fields(value, path, ("type", "text", "source"))
    kind = fields.need("type", string)
    if kind not in ("text", "image"):
        raise ProfileError(at(path, "type"), "Input should be 'text' or 'image'")
    text = fields.get("text", string)
    source = fields.get("source", _image_source)
    fields.done()
    if kind == "text":
        if text is None:
            raise ProfileError(path, "text content parts require text")
        if source is not None:
            raise ProfileError(path, "text content parts cannot contain an image source")
        return ContentPart(type="text", text=text, source=None)
    if source is None:
        raise ProfileError(path, "image content parts require source")
    if text is not None:
        raise ProfileError(path, "image content parts cannot contain text")
    return ContentPart(type="image", text=None, source=source)


def _content(value: Any, path: str) -> Content:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return listed(value, path, _content_part)
    raise ProfileError(path, "Input should be a valid string or a list of content parts")


def _agent(value: Any, path: str) -> Agent:
    fields = Fields(value, path, ("name", "version", "model_name", "tool_definitions", "extra"))
    agent = Agent(
        name=fields.need("name", string),
        version=fields.need("version", string),
        model_name=fields.get("model_name", string),
        tool_definitions=fields.get("tool_definitions", objects),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    return agent


def _tool_call(value: Any, path: str) -> ToolCall:
    fields = Fields(value, path, ("tool_call_id", "function_name", "arguments", "extra"))
    call = ToolCall(
        tool_call_id=fields.need("tool_call_id", string),
        function_name=fields.need("function_name", string),
        arguments=fields.need("arguments", json_object),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    return call


def _result(value: Any, path: str) -> ObservationResult:
    fields = Fields(value, path, ("source_call_id", "content", "subagent_trajectory_ref", "extra"))
    result = ObservationResult(
        source_call_id=fields.get("source_call_id", string),
        content=fields.get("content", _content),
        subagent_trajectory_ref=fields.get("subagent_trajectory_ref", objects),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    return result


def _observation(value: Any, path: str) -> Observation:
    fields = Fields(value, path, ("results",))
    results = fields.need("results", lambda v, p: listed(v, p, _result))
    fields.done()
    return Observation(results=results)


def _metrics(value: Any, path: str) -> StepMetrics:
    declared = ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")
    fields = Fields(value, path, (*declared, "prompt_token_ids", "completion_token_ids", "logprobs", "extra"))
    metrics = StepMetrics(
        prompt_tokens=fields.get("prompt_tokens", count),
        completion_tokens=fields.get("completion_tokens", count),
        cached_tokens=fields.get("cached_tokens", count),
        cost_usd=fields.get("cost_usd", cost),
        prompt_token_ids=fields.get("prompt_token_ids", token_ids),
        completion_token_ids=fields.get("completion_token_ids", token_ids),
        logprobs=fields.get("logprobs", logprobs),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    return metrics


def _final_metrics(value: Any, path: str) -> FinalMetrics:
    totals = ("total_prompt_tokens", "total_completion_tokens", "total_cached_tokens")
    fields = Fields(value, path, (*totals, "total_cost_usd", "total_steps", "extra"))
    metrics = FinalMetrics(
        total_prompt_tokens=fields.get("total_prompt_tokens", count),
        total_completion_tokens=fields.get("total_completion_tokens", count),
        total_cached_tokens=fields.get("total_cached_tokens", count),
        total_cost_usd=fields.get("total_cost_usd", cost),
        total_steps=fields.get("total_steps", count),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    return metrics


def _effort(value: Any, path: str) -> str | float:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(path, "Input should be a valid string or number")
    return number(value, path)


def _step_id(value: Any, path: str) -> int:
    if type(value) is not int:
        raise ProfileError(path, "Input should be a valid integer")
    if value < 1:
        raise ProfileError(path, "Input should be greater than or equal to 1")
    return value


def _source(value: Any, path: str) -> StepSource:
    if value not in _SOURCES:
        raise ProfileError(path, f"Input should be {choices(_SOURCES)}")
    return cast(StepSource, value)


def _step(value: Any, path: str) -> Step:
    fields = Fields(
        value,
        path,
        (
            "step_id",
            "source",
            "message",
            "timestamp",
            "model_name",
            "reasoning_effort",
            "reasoning_content",
            "tool_calls",
            "observation",
            "metrics",
            "llm_call_count",
            "is_copied_context",
            "extra",
        ),
    )
    step = Step(
        step_id=fields.need("step_id", _step_id),
        source=fields.need("source", _source),
        message=fields.need("message", _content),
        timestamp=fields.get("timestamp", _timestamp),
        model_name=fields.get("model_name", string),
        reasoning_effort=fields.get("reasoning_effort", _effort),
        reasoning_content=fields.get("reasoning_content", string),
        tool_calls=fields.get("tool_calls", lambda v, p: listed(v, p, _tool_call)),
        observation=fields.get("observation", _observation),
        metrics=fields.get("metrics", _metrics),
        llm_call_count=fields.get("llm_call_count", count),
        is_copied_context=fields.get("is_copied_context", boolean),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    if step.source != "agent":
        for name in _AGENT_ONLY:
            if getattr(step, name) is not None:
                raise ProfileError(path, f"field {name!r} is only valid for agent steps")
    if step.llm_call_count == 0 and (
        step.reasoning_effort is not None or step.reasoning_content is not None or step.metrics is not None
    ):
        raise ProfileError(path, "llm_call_count=0 cannot include reasoning or LLM metrics")
    return step


def _steps(value: Any, path: str) -> tuple[Step, ...]:
    steps = listed(value, path, _step)
    if not steps:
        raise ProfileError(path, "List should have at least 1 item after validation, not 0")
    return steps


def _schema_version(value: Any, path: str) -> str:
    if value != SCHEMA_VERSION or not isinstance(value, str):
        raise ProfileError(path, f"Input should be {SCHEMA_VERSION!r}")
    return value


def parse_trajectory(document: Any) -> Trajectory:
    """The trajectory ``document`` (parsed JSON) describes, or :class:`ProfileError`."""
    fields = Fields(
        document,
        "",
        (
            "schema_version",
            "session_id",
            "trajectory_id",
            "agent",
            "steps",
            "notes",
            "final_metrics",
            "continued_trajectory_ref",
            "subagent_trajectories",
            "extra",
        ),
    )
    trajectory = Trajectory(
        schema_version=fields.need("schema_version", _schema_version),
        session_id=fields.get("session_id", string),
        trajectory_id=fields.get("trajectory_id", string),
        agent=fields.need("agent", _agent),
        steps=fields.need("steps", _steps),
        notes=fields.get("notes", string),
        final_metrics=fields.get("final_metrics", _final_metrics),
        continued_trajectory_ref=fields.get("continued_trajectory_ref", string),
        subagent_trajectories=fields.get("subagent_trajectories", objects),
        extra=fields.get("extra", json_object),
    )
    fields.done()
    for index, step in enumerate(trajectory.steps):
        if step.step_id != index + 1:
            raise ProfileError(
                "", f"steps[{index}].step_id: expected {index + 1} (sequential from 1), got {step.step_id}"
            )
        call_ids = {call.tool_call_id for call in step.tool_calls or ()}
        for result in step.observation.results if step.observation else ():
            if result.source_call_id is not None and result.source_call_id not in call_ids:
                raise ProfileError(
                    "",
                    f"step {step.step_id} observation references unknown tool call {result.source_call_id!r}",
                )
    final = trajectory.final_metrics
    if final is not None and final.total_steps is not None and final.total_steps != len(trajectory.steps):
        raise ProfileError(
            "",
            "final_metrics.total_steps must equal the number of trajectory steps: "
            f"expected {len(trajectory.steps)}, got {final.total_steps}",
        )
    return trajectory
