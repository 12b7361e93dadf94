"""The ``ng_trajectory`` contract has two validators: pydantic models (``gymflow.evidence``, used
by the health checks) and hand-written lax functions (``gymflow.join.trajectory_schema``, used by
the join to dump models fast). They must accept and reject the same values, coerce them to the
same values and dump them to the same bytes."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from bench.corpus import generate_records
from gymflow.evidence import TrajectoryUnreadable, validate_trajectory
from gymflow.evidence.lax import ValidationError as LaxValidationError
from gymflow.join.trajectory_schema import trajectory as join_trajectory
from tests.health.builders import JUDGE, call, trajectory, turn

_BAD_TYPE_TAGS: tuple[object, ...] = ("", None, 3, True, {}, [], "bogus", "easy_message")


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
        for kind in _BAD_TYPE_TAGS
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
    except (TrajectoryUnreadable, LaxValidationError, TypeError):
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


def _dump(validate: Callable[[Any], Any], value: Any) -> bytes:
    """The validated dump's bytes (``model_dump(mode="json")`` for models), or ``!`` and the error
    name 0.7.0 reports when rejected."""
    try:
        result = validate(copy.deepcopy(value))
    except TrajectoryUnreadable as exc:
        return f"!{exc.error}".encode()
    except (LaxValidationError, TypeError) as exc:
        return f"!{type(exc).__name__}".encode()
    return orjson.dumps(result.model_dump(mode="json") if hasattr(result, "model_dump") else result)


def _assert_same_dumps(value: Any) -> bytes | None:
    health = _dump(validate_trajectory, value)
    join = _dump(join_trajectory, value)
    assert health == join, value
    return None if health.startswith(b"!") else health


@pytest.mark.parametrize(("name", "value"), CASES, ids=[name for name, _ in CASES])
def test_both_validators_dump_the_same_bytes(name: str, value: Any) -> None:
    dumped = _assert_same_dumps(value)
    assert (dumped is not None) is (name in VALID)


def test_coerced_values_in_the_dump() -> None:
    value = _variant(_set("turns.0.timestamp", "12.5"))
    value["turns"][0]["step_count"] = True
    value["model_calls"][0]["response_metadata"]["status_code"] = "500"
    value["model_calls"][0]["response_metadata"]["upstream_attempted"] = "yes"
    value["model_calls"][0]["response_metadata"]["model_ref"] = {**JUDGE, "extra": 1}
    value["invocations"][0]["conversation"] = [{"role": "user", "content": "hi", "foo": 1}]
    dumped = orjson.loads(_assert_same_dumps(value) or b"null")
    turn_dump, call_dump = dumped["turns"][0], dumped["model_calls"][0]
    assert (turn_dump["timestamp"], turn_dump["step_count"]) == (12.5, 1)
    meta = call_dump["response_metadata"]
    assert (meta["status_code"], meta["upstream_attempted"], meta["model_ref"]) == (500, True, JUDGE)
    assert list(meta)[:3] == ["response_id", "model_ref", "model"]
    assert dumped["invocations"][0]["conversation"] == [
        {"content": "hi", "role": "user", "type": "message", "phase": None}
    ]
    assert list(dumped["invocations"][0]) == [
        "kind",
        "invocation_id",
        "parent_invocation_id",
        "spawned_by_tool_call_id",
        "status",
        "duration_ms",
        "error_type",
        "model_calls",
        "conversation",
    ]


_ITEMS: list[Any] = [
    {"role": "user", "content": "hi"},
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "content": [{"type": "output_text", "text": "x", "annotations": []}],
    },
    {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c", "extra": 1},
    {"call_id": "c", "output": "o"},
    {"id": "r", "summary": [{"type": "summary_text", "text": "s"}]},
    {"foo": 1},
    {"name": "f", "arguments": "{}"},
    {"type": None, "role": "user", "content": "hi"},
    {"type": "", "role": "user", "content": "hi"},
    {"type": 3},
    {"type": "web_search_call", "id": "w"},
    {"role": [], "content": "hi"},
    {"type": "message", "role": "user", "content": [], "status": {}},
]
_SCALARS: list[Any] = [
    None,
    0,
    1,
    -1,
    1.0,
    2.5,
    True,
    False,
    "",
    "1",
    " 3 ",
    "1e3",
    "yes",
    "x",
    [],
    {},
    1e300,
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield (*prefix, index)
            yield from _paths(value, (*prefix, index))


def _mutate(value: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    value = copy.deepcopy(value)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.2:
            invocations = value.setdefault("invocations", [])
            if isinstance(invocations, list) and not invocations:
                invocations.append({"invocation_id": "inv-x"})
            if isinstance(invocations, list) and isinstance(invocations[0], dict):
                conversation = invocations[0].setdefault("conversation", [])
                if isinstance(conversation, list):
                    conversation.append(copy.deepcopy(rng.choice(_ITEMS)))
            continue
        paths = list(_paths(value))
        if not paths:
            break
        *parents, last = rng.choice(paths)
        node: Any = value
        for part in parents:
            node = node[part]
        if roll < 0.3 and isinstance(node, dict):
            del node[last]
        else:
            node[last] = copy.deepcopy(rng.choice(_SCALARS))
    return value


def test_both_validators_dump_mutated_trajectories_alike() -> None:
    rng = random.Random(7)
    bases = [
        value
        for line in generate_records(120, seed=5, avg_bytes=2000)
        if isinstance(row := orjson.loads(line) if line.strip().startswith(b"{") else None, dict)
        and isinstance(value := row.get("ng_trajectory"), dict)
    ]
    assert len(bases) > 50
    outcomes = {"accepted": 0, "rejected": 0}
    for _ in range(1500):
        dumped = _assert_same_dumps(_mutate(rng.choice(bases), rng))
        outcomes["accepted" if dumped is not None else "rejected"] += 1
    assert min(outcomes.values()) > 100, outcomes
