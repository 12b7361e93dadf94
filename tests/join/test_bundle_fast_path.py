"""``dump_bundle`` is ``AgentObservationBundle.model_validate(raw).model_dump()``: the msgspec fast
path accepts only what pydantic accepts, with equal dumps, and anything else raises pydantic's error.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from gymflow.evidence import AgentObservationBundle
from gymflow.evidence.observations import _fast_dump, dump_bundle
from tests.value_paths import with_value_at

_PROBES: list[Any] = [
    None, True, False, 0, 1, -1, 1.0, 1.5, -0.5, 2**70, "", "s", "1", "completed", "unknown", "agent",
    "harness", "agent_invocation", "tool_call", "sandbox", "context_compaction", [], [{}], {},
    {"model_call_id": "c1"}, {"type": "responses_api_models", "name": "n", "x": 1},
]  # fmt: skip

_REF = {"model_call_id": "c1", "model_ref": {"type": "responses_api_models", "name": "p"}, "response_id": "r"}


def _bundle() -> dict[str, Any]:
    """A bundle with every field of every record kind set."""
    return {
        "source": "agent",
        "records": [
            {
                "kind": "agent_invocation",
                "invocation_id": "root",
                "parent_invocation_id": None,
                "spawned_by_tool_call_id": "t0",
                "status": "completed",
                "duration_ms": 1.5,
                "error_type": "E",
                "model_calls": [dict(_REF)],
                "conversation": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "t1", "output": "x"},
                ],
            },
            {"kind": "agent_invocation", "invocation_id": "sub", "parent_invocation_id": "root"},
            {
                "kind": "tool_call",
                "invocation_id": "root",
                "tool_call_id": "t1",
                "sandbox_id": "s",
                "tool_name": "search",
                "started_at": 1.0,
                "completed_at": 2,
                "duration_ms": 1000,
                "timing_source": "harness",
                "status": "completed",
                "error_type": None,
            },
            {
                "kind": "context_compaction",
                "invocation_id": "root",
                "observed_at": 3.0,
                "trigger": "auto",
                "tokens_before": 10,
                "tokens_after": 5,
                "outcome": "completed",
                "summary": "s",
                "first_kept_item_id": "i",
                "before_model_call": dict(_REF),
                "model_calls": [{"model_call_id": "c2"}],
                "after_model_call": {"model_call_id": "c3"},
            },
            {
                "kind": "sandbox",
                "role": "agent",
                "provider": "p",
                "sandbox_id": "s",
                "outcome": "completed",
                "exit_code": 0,
                "wall_time_s": 1,
                "cpu_time_s": 0.5,
                "peak_memory_mib": 3.0,
                "resource_usage_source": "cgroup",
                "error_type": None,
            },
        ],
        "gaps": [{"code": "g", "invocation_id": "root", "detail": "d"}],
    }


def _outcome(function: Any, raw: Any) -> tuple[str, Any]:
    try:
        return "ok", orjson.dumps(function(raw))
    except Exception as exc:  # noqa: BLE001 - compared, type and message
        return type(exc).__name__, str(exc)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.append((*path, key))
        found += _paths(item, (*path, key))
    return found


def test_the_fast_path_takes_a_complete_bundle_and_dumps_what_pydantic_dumps() -> None:
    bundle = _bundle()
    expected = AgentObservationBundle.model_validate(bundle).model_dump()
    assert _fast_dump(bundle) == expected
    assert orjson.dumps(_fast_dump(bundle)) == orjson.dumps(expected)
    assert _fast_dump({"source": "a"}) == AgentObservationBundle.model_validate({"source": "a"}).model_dump()


def test_every_value_the_fast_path_takes_pydantic_takes_with_an_equal_dump() -> None:
    sample = _bundle()
    paths = _paths(sample)
    assert len(paths) > 60
    accepted = set()
    for path in paths:
        for probe in _PROBES:
            raw = with_value_at(sample, path, probe)
            try:
                fast = orjson.dumps(_fast_dump(raw))
            except Exception:  # noqa: BLE001 - declined: the exact path decides
                assert _outcome(dump_bundle, raw) == _outcome(
                    lambda r: AgentObservationBundle.model_validate(r).model_dump(), raw
                )
                continue
            accepted.add(path)
            try:
                exact = AgentObservationBundle.model_validate(raw).model_dump()
            except ValidationError:
                pytest.fail(f"the fast path accepts {probe!r} at {path}; pydantic does not")
            assert fast == orjson.dumps(exact), (path, probe)
    assert len(accepted) > len(paths) // 2


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b["records"].append({"kind": "agent_invocation", "invocation_id": "root"}),
        lambda b: b["records"][0].update(parent_invocation_id="sub"),
        lambda b: b["records"][2].update(started_at=5.0),
        lambda b: b["records"][3]["model_calls"].append({}),
        lambda b: b["records"][4].pop("kind"),
        lambda b: b["records"].append({"kind": "other"}),
        lambda b: b["records"][0]["conversation"].append({"type": "nonsense"}),
        lambda b: b.update(extra=1),
        lambda b: b.pop("source"),
        lambda b: b.update(records={}),
    ],
)
def test_a_bundle_the_model_rejects_raises_its_error_unchanged(change: Any) -> None:
    raw = _bundle()
    change(raw)
    expected = _outcome(lambda r: AgentObservationBundle.model_validate(r).model_dump(), raw)
    assert expected[0] != "ok"
    assert _outcome(dump_bundle, raw) == expected
