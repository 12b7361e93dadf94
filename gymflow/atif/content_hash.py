"""The content identity of a trajectory (reverify.md §3.7, §3.9 point 4).

SHA-256 of the canonical JSON of the trajectory as the profile normalizes it (every declared
field present, float fields as floats), with ``trajectory_id`` nulled and every ``extra`` the
projection ignores dropped, so producer metadata cannot change the ids it seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gymflow.atif.model import (
    Content,
    FinalMetrics,
    ObservationResult,
    Step,
    StepMetrics,
    ToolCall,
    Trajectory,
)


def _content(content: Content | None) -> Any:
    if content is None or isinstance(content, str):
        return content
    return [
        {
            "type": part.type,
            "text": part.text,
            "source": None
            if part.source is None
            else {"media_type": part.source.media_type, "path": part.source.path},
        }
        for part in content
    ]


def _listed(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "tool_call_id": call.tool_call_id,
        "function_name": call.function_name,
        "arguments": call.arguments,
    }


def _result(result: ObservationResult) -> dict[str, Any]:
    extra = result.extra
    return {
        "source_call_id": result.source_call_id,
        "content": _content(result.content),
        "subagent_trajectory_ref": _listed(result.subagent_trajectory_ref),
        "extra": {"tool_result": extra["tool_result"]}
        if extra is not None and "tool_result" in extra
        else None,
    }


def _metrics_extra(extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if extra is None:
        return None
    kept: dict[str, Any] = {}
    if extra.get("total_tokens") is not None:
        kept["total_tokens"] = extra["total_tokens"]
    reasoning = extra.get("reasoning_tokens")
    for name in ("output_tokens_details", "completion_tokens_details"):
        details = extra.get(name)
        if reasoning is None and isinstance(details, Mapping):
            reasoning = details.get("reasoning_tokens")
    if reasoning is not None:
        kept["reasoning_tokens"] = reasoning
    return kept or None


def _metrics(metrics: StepMetrics | None) -> dict[str, Any] | None:
    if metrics is None:
        return None
    return {
        "prompt_tokens": metrics.prompt_tokens,
        "completion_tokens": metrics.completion_tokens,
        "cached_tokens": metrics.cached_tokens,
        "cost_usd": metrics.cost_usd,
        "prompt_token_ids": _listed(metrics.prompt_token_ids),
        "completion_token_ids": _listed(metrics.completion_token_ids),
        "logprobs": _listed(metrics.logprobs),
        "extra": _metrics_extra(metrics.extra),
    }


def _final(final: FinalMetrics | None) -> dict[str, Any] | None:
    if final is None:
        return None
    return {
        "total_prompt_tokens": final.total_prompt_tokens,
        "total_completion_tokens": final.total_completion_tokens,
        "total_cached_tokens": final.total_cached_tokens,
        "total_cost_usd": final.total_cost_usd,
        "total_steps": final.total_steps,
    }


def _step(step: Step) -> dict[str, Any]:
    return {
        "step_id": step.step_id,
        "source": step.source,
        "message": _content(step.message),
        "timestamp": step.timestamp,
        "model_name": step.model_name,
        "reasoning_effort": step.reasoning_effort,
        "reasoning_content": step.reasoning_content,
        "tool_calls": None if step.tool_calls is None else [_tool_call(c) for c in step.tool_calls],
        "observation": None
        if step.observation is None
        else {"results": [_result(r) for r in step.observation.results]},
        "metrics": _metrics(step.metrics),
        "llm_call_count": step.llm_call_count,
        "is_copied_context": step.is_copied_context,
    }


def _root_extra(extra: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if extra is None:
        return None
    nemo_gym = extra.get("nemo_gym")
    source = nemo_gym.get("source") if isinstance(nemo_gym, Mapping) else None
    return {"nemo_gym": {"source": source}} if isinstance(source, Mapping) else None


def normalized(trajectory: Trajectory) -> dict[str, Any]:
    """The JSON object whose canonical form :func:`content_sha256` hashes."""
    agent = trajectory.agent
    return {
        "schema_version": trajectory.schema_version,
        "session_id": trajectory.session_id,
        "trajectory_id": None,
        "agent": {
            "name": agent.name,
            "version": agent.version,
            "model_name": agent.model_name,
            "tool_definitions": _listed(agent.tool_definitions),
        },
        "steps": [_step(step) for step in trajectory.steps],
        "notes": trajectory.notes,
        "final_metrics": _final(trajectory.final_metrics),
        "continued_trajectory_ref": trajectory.continued_trajectory_ref,
        "subagent_trajectories": _listed(trajectory.subagent_trajectories),
        "extra": _root_extra(trajectory.extra),
    }


def canonical_dumps(value: Any) -> str:
    """Python's ``json.dumps`` with sorted keys, no spaces and non-ASCII kept (§3.9 point 10)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_sha256(trajectory: Trajectory) -> str:
    """Hex SHA-256 of the normalized trajectory's canonical JSON."""
    return hashlib.sha256(canonical_dumps(normalized(trajectory)).encode()).hexdigest()
