"""Trajectory shapes the projection cannot represent, checked before the source hash (§3.6, §3.9.1).

Only the shapes §3.9 point 1 lists are checked here; the rest are found while projecting
(:mod:`gymflow.atif.projection`), after the hash, ``extra.nemo_gym.source`` and materialized-row
checks, as in the reference.
"""

from __future__ import annotations

import math
from typing import Any

from gymflow.atif.errors import AtifError
from gymflow.atif.model import Content, Step, Trajectory


def text_parts(content: Content, where: str) -> list[str]:
    """The texts of ``content``: a string is one part (none when empty); a part list must not be empty."""
    if isinstance(content, str):
        return [content] if content else []
    if not content:
        raise AtifError(f"{where} contains an empty content-part list")
    texts: list[str] = []
    for index, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise AtifError(f"{where} part {index} is not losslessly projectable text")
        texts.append(part.text)
    return texts


def reject_non_finite(value: Any, where: str = "ATIF trajectory") -> None:
    """Reject ``inf``/``nan`` anywhere in ``value`` (reachable only for in-memory documents)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise AtifError(f"{where} contains non-finite JSON number {value!r}")
    if isinstance(value, dict):
        for key, nested in value.items():
            reject_non_finite(nested, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, nested in enumerate(value):
            reject_non_finite(nested, f"{where}[{index}]")


def _is_multimodal(content: Content | None) -> bool:
    return not isinstance(content, str) and content is not None and any(p.type != "text" for p in content)


def _has_multimodal_content(trajectory: Trajectory) -> bool:
    for step in trajectory.steps:
        if _is_multimodal(step.message):
            return True
        for result in step.observation.results if step.observation else ():
            if _is_multimodal(result.content):
                return True
    return False


def _check_step(step: Step, saw_agent: bool) -> None:
    metrics = step.metrics
    if metrics is not None and (
        metrics.prompt_token_ids is not None
        or metrics.completion_token_ids is not None
        or metrics.logprobs is not None
    ):
        raise AtifError(
            f"step {step.step_id} contains training token metadata that the initial reverify "
            "adapter does not support"
        )
    if step.source == "agent":
        if step.tool_calls and text_parts(step.message, f"step {step.step_id} message"):
            raise AtifError(
                f"agent step {step.step_id} contains both message text and tool calls; "
                "ATIF does not preserve their provider output-item ordering"
            )
        if step.llm_call_count is not None and step.llm_call_count > 1:
            raise AtifError(
                f"agent step {step.step_id} aggregates {step.llm_call_count} LLM calls and cannot be "
                "projected into one ordered Responses sequence"
            )
    elif saw_agent:
        raise AtifError(
            f"non-agent step {step.step_id} appears after agent output and would change the "
            "scored conversation"
        )
    if step.source != "agent" and step.observation is not None:
        raise AtifError(
            f"non-agent step {step.step_id} contains an observation that cannot be projected into a response"
        )
    for index, result in enumerate(step.observation.results if step.observation else ()):
        if result.subagent_trajectory_ref:
            raise AtifError(f"step {step.step_id} observation {index} references a subagent trajectory")


def check_supported(trajectory: Trajectory, document: Any) -> None:
    """Raise :class:`AtifError` for the first unsupported shape of §3.9 point 1 in ``trajectory``
    (``document`` is the parsed JSON it was built from, searched for non-finite numbers)."""
    reject_non_finite(document)
    if trajectory.continued_trajectory_ref is not None:
        raise AtifError("continued ATIF trajectories are not supported by the initial reverify adapter")
    if trajectory.subagent_trajectories:
        raise AtifError("embedded subagent trajectories are not supported by the initial reverify adapter")
    if _has_multimodal_content(trajectory):
        raise AtifError("multimodal ATIF content cannot be projected losslessly for reverification")
    copied = [step.step_id for step in trajectory.steps if step.is_copied_context]
    if copied:
        raise AtifError(f"copied continuation context is not supported; copied step IDs: {copied}")
    saw_agent = False
    for step in trajectory.steps:
        _check_step(step, saw_agent)
        saw_agent = saw_agent or step.source == "agent"
