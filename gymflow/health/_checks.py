"""The nine rollout checks that read ``ng_trajectory`` (health spec §5, checks 4-12).

Each is a pure function of :class:`Evidence` registered under its stable id with the gate that
decides whether it has the evidence it needs (spec §3, rules 5-9).
"""

from __future__ import annotations

from typing import Any

from gymflow.health._binding import key_locator
from gymflow.health._observed import CONTRADICTION_GAPS, Evidence
from gymflow.health._predicates import (
    call_locator,
    has_tool_call,
    is_length_limited,
    non_empty,
    response_has_content,
)
from gymflow.health._registry import finding, trajectory_check
from gymflow.health._vocabulary import Finding


def _turns_observable(ev: Evidence) -> bool:
    return ev.turns_observed


def _owned_bound(ev: Evidence) -> bool:
    return ev.calls_observed and bool(ev.owned.bound)


def turn_activity(ev: Evidence) -> list[tuple[bool, bool]]:
    """Per turn: (has content or a tool call, has a reference). The tool-call walk runs on every
    turn's answer, even one with text, so a malformed ``type`` raises for both turn checks."""
    activity = []
    for turn in ev.trajectory.turns:
        tool_call = has_tool_call(turn.answer)
        content = tool_call or non_empty(turn.answer) or non_empty(turn.reasoning_content)
        activity.append((content, bool(turn.model_calls)))
    return activity


def _turn_activity(ev: Evidence) -> list[tuple[bool, bool]]:
    """:func:`turn_activity`, computed once per record for both turn checks (failure included)."""
    cached = ev.memo.get("turn_activity")
    if cached is None:
        try:
            cached = turn_activity(ev)
        except Exception as exc:  # noqa: BLE001 - re-raised below, once for each check
            cached = exc
        ev.memo["turn_activity"] = cached
    if isinstance(cached, Exception):
        raise cached
    return cached


@trajectory_check("rollout_missing_agent_turns", _turns_observable)
def missing_agent_turns(ev: Evidence) -> list[Finding]:
    if any(content or referenced for content, referenced in _turn_activity(ev)):
        return []
    return [finding("rollout_missing_agent_turns", {"reason": "no agent turn with model activity"})]


def _calls_captured(ev: Evidence) -> bool:
    return ev.calls_observed and bool(ev.calls)


@trajectory_check("rollout_ended_on_failed_model_call", _calls_captured)
def ended_on_failed_model_call(ev: Evidence) -> list[Finding]:
    findings = []
    for last, positions in ev.failed_chains():
        call = ev.calls[last]
        meta = call.response_metadata
        ref = meta.model_ref
        findings.append(
            finding(
                "rollout_ended_on_failed_model_call",
                {
                    "model_ref": None if ref is None else f"{ref.type}/{ref.name}",
                    "status": meta.status_code,
                    "error_category": meta.error_category,
                    "observed_calls": len(positions),
                    "successful_calls": sum(ev.successful[p] for p in positions),
                },
                {"call_id": call.model_call_id or meta.response_id or str(last)},
            )
        )
    return findings


@trajectory_check("agent_turn_hollow", _turns_observable)
def agent_turn_hollow(ev: Evidence) -> list[Finding]:
    return [
        finding(
            "agent_turn_hollow", {"reason": "agent turn has no message or tool calls"}, {"turn": turn.turn_no}
        )
        for turn, (content, _) in zip(ev.trajectory.turns, _turn_activity(ev), strict=True)
        if not content
    ]


@trajectory_check("model_call_zero_completion_tokens", _owned_bound)
def zero_completion_tokens(ev: Evidence) -> list[Finding]:
    return [
        finding("model_call_zero_completion_tokens", {"completion_tokens": 0}, call_locator(call))
        for _, call in ev.owned_calls()
        if call.token_stats.completion_tokens == 0
    ]


@trajectory_check("model_call_missing_token_counts", _owned_bound)
def missing_token_counts(ev: Evidence) -> list[Finding]:
    findings = []
    for _, call in ev.owned_calls():
        missing = [
            name
            for name, value in (
                ("prompt_tokens", call.token_stats.prompt_tokens),
                ("completion_tokens", call.token_stats.completion_tokens),
            )
            if value is None
        ]
        if missing:
            findings.append(
                finding("model_call_missing_token_counts", {"missing": missing}, call_locator(call))
            )
    return findings


def _mismatch_observable(ev: Evidence) -> bool:
    return ev.calls_observed and (ev.owned.observed or ev.has_contradiction)


@trajectory_check("trajectory_capture_mismatch", _mismatch_observable)
def capture_mismatch(ev: Evidence) -> list[Finding]:
    if not (ev.owned.missing or ev.owned.duplicated or ev.has_contradiction):
        return []
    findings: list[Finding] = []
    binding_seen: set[tuple[str, str]] = set()
    entries: list[tuple[str, str, dict[str, Any]]] = [
        ("missing_captured_call", key_locator(key), {"kind": "missing_captured_call"})
        for key in ev.owned.missing
    ]
    entries += [
        ("duplicated_captured_call", key_locator(key), {"kind": "duplicated_captured_call", "count": count})
        for key, count in ev.owned.duplicated
    ]
    for kind, locator, detail in entries:
        if (kind, locator) not in binding_seen:
            binding_seen.add((kind, locator))
            findings.append(finding("trajectory_capture_mismatch", detail, {"call_id": locator}))
    # gymflow (spec §9 D3): a gap repeating an earlier gap finding is not counted again.
    gap_seen: set[tuple[str, str]] = set()
    for gap in ev.trajectory.gaps:
        kind_of_gap = CONTRADICTION_GAPS.get(gap.code)
        if kind_of_gap is None:
            continue
        locator = gap.detail.rsplit(":", 1)[-1] if gap.detail else "unknown"
        if (kind_of_gap, locator) in binding_seen or (kind_of_gap, locator) in gap_seen:
            continue
        gap_seen.add((kind_of_gap, locator))
        detail = {"kind": kind_of_gap, "observation_gap": gap.code, "invocation_id": gap.invocation_id}
        findings.append(finding("trajectory_capture_mismatch", detail, {"call_id": locator}))
    return findings


@trajectory_check("model_call_failed", _owned_bound)
def model_call_failed(ev: Evidence) -> list[Finding]:
    owned = ev.owned_calls()
    last_position = owned[-1][0] if ev.owned.complete else -1
    return [
        finding(
            "model_call_failed",
            {
                "status": call.response_metadata.status_code,
                "error_category": call.response_metadata.error_category,
                "terminal": position == last_position,
            },
            call_locator(call),
        )
        for position, call in owned
        if ev.failed[position]
    ]


def _token_totals_observable(ev: Evidence) -> bool:
    view = ev.turn_view
    return (
        ev.calls_observed
        and bool(view.bound)
        and ev.scope_complete
        and view.complete
        and ev.usage_present
        and all(
            ev.calls[p].token_stats.prompt_tokens is not None
            and ev.calls[p].token_stats.completion_tokens is not None
            for p in view.bound
        )
    )


@trajectory_check("rollout_token_count_mismatch", _token_totals_observable)
def token_count_mismatch(ev: Evidence) -> list[Finding]:
    bound = [ev.calls[p].token_stats for p in ev.turn_view.bound]
    capture_prompt = sum(stats.prompt_tokens or 0 for stats in bound)
    capture_completion = sum(stats.completion_tokens or 0 for stats in bound)
    prompt, completion = ev.usage
    if prompt == capture_prompt and completion == capture_completion:
        return []
    detail = {
        "transcript_prompt": prompt,
        "transcript_completion": completion,
        "capture_prompt": capture_prompt,
        "capture_completion": capture_completion,
    }
    return [finding("rollout_token_count_mismatch", detail)]


def _runaway_observable(ev: Evidence) -> bool:
    return _owned_bound(ev) and not any(
        is_length_limited(call) and call.response is None for _, call in ev.owned_calls()
    )


@trajectory_check("model_call_runaway_generation", _runaway_observable)
def runaway_generation(ev: Evidence) -> list[Finding]:
    return [
        finding(
            "model_call_runaway_generation",
            {"finish_reason": call.response_metadata.finish_reason},
            call_locator(call),
        )
        for _, call in ev.owned_calls()
        if is_length_limited(call) and not response_has_content(call.response)
    ]
