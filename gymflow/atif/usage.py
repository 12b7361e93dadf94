"""The ``usage`` of a projected response, from step and final token metrics (reverify.md §3.7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymflow.atif.errors import AtifError
from gymflow.atif.model import Step, Trajectory

_DETAILS = ("output_tokens_details", "completion_tokens_details")


def _count_in(namespace: Mapping[str, Any], name: str, step_id: int) -> int | None:
    value = namespace.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise AtifError(f"step {step_id} ATIF {name} metadata is not a non-negative integer")
    return value


def _step_details(step: Step) -> tuple[int | None, int | None]:
    """This step's (reasoning tokens, reported total tokens) from ``metrics.extra``, checked."""
    extra: Mapping[str, Any] = {}
    if step.metrics is not None and isinstance(step.metrics.extra, Mapping):
        extra = step.metrics.extra
    nested: list[int] = []
    for name in _DETAILS:
        details = extra.get(name)
        if details is None:
            continue
        if not isinstance(details, Mapping):
            raise AtifError(f"step {step.step_id} metrics.extra.{name} is not an object")
        value = _count_in(details, "reasoning_tokens", step.step_id)
        if value is not None:
            nested.append(value)
    if len(set(nested)) > 1:
        raise AtifError(
            f"step {step.step_id} ATIF reasoning_tokens metadata conflicts between nested token-detail fields"
        )
    top = _count_in(extra, "reasoning_tokens", step.step_id)
    if nested and top is not None and nested[0] != top:
        raise AtifError(
            f"step {step.step_id} ATIF reasoning_tokens metadata conflicts between "
            "metrics.extra.reasoning_tokens and a nested token-detail field"
        )
    reasoning = nested[0] if nested else top
    total = _count_in(extra, "total_tokens", step.step_id)
    metrics = step.metrics
    if metrics is not None:
        known = (metrics.prompt_tokens or 0) + (metrics.completion_tokens or 0)
        if total is not None and total < known:
            raise AtifError(
                f"step {step.step_id} ATIF total_tokens metadata is smaller than "
                "prompt_tokens + completion_tokens"
            )
        if (
            reasoning is not None
            and metrics.completion_tokens is not None
            and reasoning > metrics.completion_tokens
        ):
            raise AtifError(f"step {step.step_id} ATIF reasoning_tokens metadata exceeds completion_tokens")
    return reasoning, total


def _sum_if_all(values: list[int | None]) -> int | None:
    """The sum when every value is known (and there is at least one), else None."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _has_counts(step: Step) -> bool:
    metrics = step.metrics
    if metrics is None:
        return False
    if metrics.prompt_tokens is not None or metrics.completion_tokens is not None:
        return True
    if metrics.cached_tokens is not None:
        return True
    extra = metrics.extra if isinstance(metrics.extra, Mapping) else {}
    if extra.get("reasoning_tokens") is not None or extra.get("total_tokens") is not None:
        return True
    return any(
        isinstance(extra.get(name), Mapping) and extra[name].get("reasoning_tokens") is not None
        for name in _DETAILS
    )


def _usage_object(
    prompt: int, completion: int, cached: int | None, reasoning: int | None, total: int | None
) -> dict[str, Any]:
    if total is not None and total < prompt + completion:
        raise AtifError("ATIF total_tokens metadata is smaller than prompt_tokens + completion_tokens")
    if reasoning is not None and reasoning > completion:
        raise AtifError("ATIF reasoning_tokens metadata exceeds total completion tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total if total is not None else prompt + completion,
    }


def project_usage(trajectory: Trajectory) -> dict[str, Any] | None:
    """The response ``usage`` object, ``None`` when the trajectory reports no token counts."""
    model_steps = [s for s in trajectory.agent_steps if s.llm_call_count != 0]
    for step in model_steps:
        m = step.metrics
        if m is not None and m.prompt_tokens is not None and m.cached_tokens is not None:
            if m.cached_tokens > m.prompt_tokens:
                raise AtifError(
                    f"step {step.step_id} cached_tokens exceeds prompt_tokens; cached tokens must be a subset"
                )
    has_step_usage = any(_has_counts(s) for s in model_steps)
    complete = bool(model_steps) and all(
        s.metrics is not None
        and s.metrics.prompt_tokens is not None
        and s.metrics.completion_tokens is not None
        for s in model_steps
    )
    details = [_step_details(s) for s in model_steps]
    reasoning = _sum_if_all([r for r, _ in details])
    reported_total = _sum_if_all([t for _, t in details])
    if has_step_usage and not complete:
        raise AtifError(
            "ATIF contains partial per-model-step token metrics; every model step must provide "
            "both prompt_tokens and completion_tokens"
        )
    final = trajectory.final_metrics
    if final is None:
        if has_step_usage:
            raise AtifError("ATIF contains per-step token metrics without final_metrics")
        return None
    prompt, completion, cached = (
        final.total_prompt_tokens,
        final.total_completion_tokens,
        final.total_cached_tokens,
    )
    if prompt is not None and cached is not None and cached > prompt:
        raise AtifError(
            "ATIF final total_cached_tokens exceeds total_prompt_tokens; cached tokens must be a subset"
        )
    if prompt is None and completion is None:
        if has_step_usage:
            raise AtifError("ATIF final_metrics omits token totals despite per-step token metrics")
        if cached is not None:
            raise AtifError(
                "ATIF final_metrics cannot represent total_cached_tokens without prompt and "
                "completion token totals"
            )
        return None
    if prompt is None or completion is None:
        raise AtifError("ATIF final_metrics must provide both prompt and completion token totals")
    if not has_step_usage:
        return _usage_object(prompt, completion, cached, reasoning, reported_total)
    metrics = [s.metrics for s in model_steps if s.metrics is not None]
    step_prompt = sum(m.prompt_tokens or 0 for m in metrics)
    step_completion = sum(m.completion_tokens or 0 for m in metrics)
    if step_prompt != prompt or step_completion != completion:
        raise AtifError("ATIF final token totals do not match the complete per-model-step metrics")
    cached_values = [m.cached_tokens for m in metrics]
    reporting = sum(v is not None for v in cached_values)
    step_cached: int | None
    if reporting == len(cached_values):
        step_cached = sum(v for v in cached_values if v is not None)
        if cached is not None and step_cached != cached:
            raise AtifError("ATIF final cached-token total does not match the per-model-step metrics")
    elif reporting == 0:
        step_cached = cached
    else:
        step_cached = None
    return _usage_object(step_prompt, step_completion, step_cached, reasoning, reported_total)
