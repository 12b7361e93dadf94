"""The ``ng_trajectory`` contract has two validators: pydantic models (``gymflow.evidence``, used
by the health checks) and hand-written lax functions (``gymflow.join.trajectory_schema``, used by
the join to dump models fast). They must accept and reject the same values."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bench.corpus import generate_records
from gymflow.evidence import TrajectoryUnreadable, validate_trajectory
from gymflow.evidence.lax import ValidationError as LaxValidationError
from gymflow.join.trajectory_schema import trajectory as join_trajectory
from tests.health.builders import JUDGE, call, trajectory, turn


def _variant(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    value = trajectory(invocations=[{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "c1"}]}])
    change(value)
    return value


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(target: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = target
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


CASES: list[tuple[str, Any]] = [
    ("default", trajectory()),
    ("string status and tokens", trajectory(calls=[call(status="500", completion="0")])),
    ("float turn number", _variant(_set("turns.0.turn_no", 1.0))),
    ("fractional turn number", _variant(_set("turns.0.turn_no", 1.5))),
    ("zero turn number", _variant(_set("turns.0.turn_no", 0))),
    ("bool step count", _variant(_set("turns.0.step_count", True))),
    ("string timestamp", _variant(_set("turns.0.timestamp", "12.5"))),
    ("numeric task id", _variant(_set("task_id", 5))),
    ("extra turn key", _variant(_set("turns.0.surprise", 1))),
    (
        "judge-typed server",
        _variant(
            _set("model_calls.0.response_metadata.model_ref", {"type": "resources_servers", "name": "j"})
        ),
    ),
    ("server extra key", _variant(_set("model_calls.0.response_metadata.model_ref", {**JUDGE, "x": 1}))),
    ("null metadata", _variant(_set("model_calls.0.response_metadata", None))),
    ("negative tokens", _variant(_set("model_calls.0.token_stats.prompt_tokens", -1))),
    ("negative duration", _variant(_set("model_calls.0.duration_ms", -1))),
    ("unknown source", _variant(_set("model_calls.0.response_metadata.response_source", "cache"))),
    ("string bool", _variant(_set("model_calls.0.response_metadata.upstream_attempted", "yes"))),
    ("bad bool", _variant(_set("model_calls.0.response_metadata.upstream_attempted", "maybe"))),
    ("response-only ref", _variant(_set("turns.0.model_calls", [{"response_id": "r1"}]))),
    ("foreign turn", trajectory(turns=[turn(rollout_id="other")])),
    ("twin call ids", trajectory(calls=[call(), call(response_id="r2")])),
    ("twin turns", trajectory(turns=[turn(), turn()])),
    ("schema 2.0", _variant(_set("schema_version", "2.0"))),
    ("invocation status", _variant(_set("invocations.0.status", "done"))),
    (
        "message item",
        _variant(_set("invocations.0.conversation", [{"type": "message", "role": "user", "content": "hi"}])),
    ),
    (
        "bad role",
        _variant(_set("invocations.0.conversation", [{"type": "message", "role": "robot", "content": "hi"}])),
    ),
    ("non-object item", _variant(_set("invocations.0.conversation", ["hi"]))),
    *(
        (f"item type {kind!r}", _variant(_set("invocations.0.conversation", [{"type": kind, "foo": 1}])))
        for kind in ("", None, 3, True, {}, [], "bogus", "easy_message")
    ),
    ("untyped item", _variant(_set("invocations.0.conversation", [{"foo": 1}]))),
    ("untyped unknown role", _variant(_set("invocations.0.conversation", [{"role": "robot"}]))),
    (
        "tool call order",
        _variant(
            _set(
                "tool_calls",
                [{"invocation_id": "inv-0", "tool_call_id": "t", "started_at": 2, "completed_at": 1}],
            )
        ),
    ),
    ("gap without code", _variant(_set("gaps", [{"detail": "x"}]))),
    ("not an object", "oops"),
]


def _accepts(validate: Callable[[Any], Any], value: Any) -> bool:
    try:
        validate(copy.deepcopy(value))
    except (TrajectoryUnreadable, LaxValidationError):
        return False
    return True


VALID = {
    "default",
    "string status and tokens",
    "float turn number",
    "bool step count",
    "string timestamp",
    "server extra key",
    "string bool",
    "message item",
    "untyped item",
    "untyped unknown role",
}
"""The cases health spec §2.4 accepts (lax coercion); every other case is unreadable."""


@pytest.mark.parametrize(("name", "value"), CASES, ids=[name for name, _ in CASES])
def test_both_validators_agree(name: str, value: Any) -> None:
    assert _accepts(validate_trajectory, value) is (name in VALID)
    assert _accepts(join_trajectory, value) is (name in VALID)


def test_both_validators_accept_generated_trajectories() -> None:
    for line in generate_records(300, seed=3, avg_bytes=3000):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        value = row.get("ng_trajectory") if isinstance(row, dict) else None
        if isinstance(value, dict):
            assert _accepts(validate_trajectory, value) == _accepts(join_trajectory, value)
