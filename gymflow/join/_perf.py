"""``ng_perf``: per-rollout turn, tool and token figures from the projected trajectory (§9)."""

from __future__ import annotations

from typing import Any, Final

from gymflow.evidence.references import CallIndex, server_key

__all__ = ["compute_perf"]

Obj = dict[str, Any]

_TOKEN_FIELDS: Final = (
    ("prompt_tokens", "prompt_tokens"),
    ("cached_prompt_tokens", "cached_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("reasoning_tokens", "reasoning_tokens"),
)


def compute_perf(trajectory: Obj, previous: Any = None) -> Obj | None:
    """``ng_perf`` of a validated trajectory dump, or None when it has no invocation.

    ``previous`` is the row's existing ``ng_perf``: [G] offline, its numeric ``total_latency_ms``
    stands in for the ``/run`` wall-clock 0.7.0 measures.
    """
    invocations = trajectory["invocations"]
    if not invocations:
        return None
    calls = trajectory["model_calls"]
    index = CallIndex(
        (
            c["model_call_id"],
            server_key(c["response_metadata"]["model_ref"]),
            c["response_metadata"]["response_id"],
        )
        for c in calls
    )
    counted: set[int] = set()
    owned: list[int] = []
    owned_by: dict[str, int] = {}
    for invocation in invocations:
        owner = invocation["invocation_id"]
        for ref in invocation["model_calls"]:
            found = index.find_ref(ref)
            if len(found) == 1 and found[0] not in counted:
                counted.add(found[0])
                owned.append(found[0])
                owned_by[owner] = owned_by.get(owner, 0) + 1
    turns_by: dict[str, int] = {}
    for turn in trajectory["turns"]:
        turns_by[turn["invocation_id"]] = turns_by.get(turn["invocation_id"], 0) + 1
    ids = {invocation["invocation_id"] for invocation in invocations}
    num_turns = sum(
        turns_by.get(i) or owned_by.get(i) or 1 for i in (inv["invocation_id"] for inv in invocations)
    )
    perf: Obj = {
        "num_turns": num_turns,
        "num_tool_calls": sum(1 for tool in trajectory["tool_calls"] if tool["invocation_id"] in ids),
        "token_observability_coverage": min(1.0, len(owned) / num_turns),
    }
    for name, source in _TOKEN_FIELDS:
        values = [
            calls[p]["token_stats"][source] for p in owned if calls[p]["token_stats"][source] is not None
        ]
        if values:
            perf[name] = sum(values)
    latency = previous.get("total_latency_ms") if isinstance(previous, dict) else None
    if type(latency) is int or type(latency) is float:
        perf["total_latency_ms"] = latency
    return perf
