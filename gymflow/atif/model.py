"""Typed, immutable models of the accepted ATIF v1.7 profile (reverify.md §3.5).

Every declared field is present (``None`` when absent in the file); ``extra`` mappings are kept
as parsed JSON. :mod:`gymflow.atif.profile` builds these from a parsed document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

SCHEMA_VERSION = "ATIF-v1.7"

StepSource = Literal["system", "user", "agent"]
MediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
JSONObject = dict[str, Any]


@dataclass(frozen=True)
class ImageSource:
    media_type: MediaType
    path: str


@dataclass(frozen=True)
class ContentPart:
    type: Literal["text", "image"]
    text: str | None
    source: ImageSource | None


Content = str | tuple[ContentPart, ...]


@dataclass(frozen=True)
class Agent:
    name: str
    version: str
    model_name: str | None
    tool_definitions: tuple[JSONObject, ...] | None
    extra: JSONObject | None


@dataclass(frozen=True)
class ToolCall:
    tool_call_id: str
    function_name: str
    arguments: JSONObject
    extra: JSONObject | None


@dataclass(frozen=True)
class ObservationResult:
    source_call_id: str | None
    content: Content | None
    subagent_trajectory_ref: tuple[JSONObject, ...] | None
    extra: JSONObject | None


@dataclass(frozen=True)
class Observation:
    results: tuple[ObservationResult, ...]


@dataclass(frozen=True)
class StepMetrics:
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None
    prompt_token_ids: tuple[int, ...] | None
    completion_token_ids: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    extra: JSONObject | None


@dataclass(frozen=True)
class FinalMetrics:
    total_prompt_tokens: int | None
    total_completion_tokens: int | None
    total_cached_tokens: int | None
    total_cost_usd: float | None
    total_steps: int | None
    extra: JSONObject | None


@dataclass(frozen=True)
class Step:
    step_id: int
    source: StepSource
    message: Content
    timestamp: str | None
    model_name: str | None
    reasoning_effort: str | float | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...] | None
    observation: Observation | None
    metrics: StepMetrics | None
    llm_call_count: int | None
    is_copied_context: bool | None
    extra: JSONObject | None


@dataclass(frozen=True)
class Trajectory:
    schema_version: str
    session_id: str | None
    trajectory_id: str | None
    agent: Agent
    steps: tuple[Step, ...]
    notes: str | None
    final_metrics: FinalMetrics | None
    continued_trajectory_ref: str | None
    subagent_trajectories: tuple[JSONObject, ...] | None
    extra: JSONObject | None

    @property
    def agent_steps(self) -> list[Step]:
        return [step for step in self.steps if step.source == "agent"]
