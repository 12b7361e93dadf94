"""One contract, two commands: ``gymflow.evidence``'s pydantic models are the only definition of
``ng_trajectory`` and ``ng_agent_observations``. The health checks validate with
:func:`~gymflow.evidence.validate_trajectory`; the join validates a row's producer trajectory and
observation bundle with the same models and builds the rest itself. These tests pin, byte for
byte, the coerced values and dumps both commands produce for the spec's cases (health.md §2.4,
evidence.md §5) and for generated trajectories, and that everything the join builds is already
in the models' dump form (so the join need not validate it again)."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import orjson
import pytest

from bench.corpus import generate_records
from bench.join_corpus import iter_run
from gymflow.evidence import (
    AgentObservationBundle,
    TrajectoryRecord,
    TrajectoryUnreadable,
    validate_trajectory,
)
from gymflow.evidence.structs import convert_trajectory
from gymflow.join import join_row
from tests.join.helpers import jsonl, memory_store

pytestmark = pytest.mark.usefixtures("memfs")  # captures are read from memory://

Obj = dict[str, Any]
POLICY = {"type": "responses_api_models", "name": "policy"}
REJECT = "!ValidationError"


def _trajectory(**change: Any) -> Obj:
    """health.md's default record: one invocation, one turn, one call (field order scrambled on purpose)."""
    value: Obj = {
        "rollout_id": "t-0",
        "task_id": "t",
        "invocations": [{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "c1"}]}],
        "turns": [
            {
                "task_id": "t",
                "invocation_id": "inv-0",
                "rollout_id": "t-0",
                "turn_no": 1,
                "timestamp": 1.0,
                "answer": "ok",
                "step_count": 1,
                "model_calls": [{"model_call_id": "c1"}],
            }
        ],
        "model_calls": [
            {
                "response": {"output_text": "ok"},
                "model_call_id": "c1",
                "response_metadata": {"status_code": 200, "model_ref": POLICY, "response_id": "r1"},
                "token_stats": {"completion_tokens": 2, "prompt_tokens": 3},
            }
        ],
    }
    value.update(change)
    return value


DEFAULT_DUMP = (
    b'{"schema_version":"1.0","task_id":"t","rollout_id":"t-0","invocations":[{"kind":"agent_invocation",'
    b'"invocation_id":"inv-0","parent_invocation_id":null,"spawned_by_tool_call_id":null,"status":"unknown",'
    b'"duration_ms":null,"error_type":null,"model_calls":[{"model_call_id":"c1","model_ref":null,'
    b'"response_id":null}],"conversation":[]}],"turns":[{"invocation_id":"inv-0","task_id":"t",'
    b'"rollout_id":"t-0","turn_no":1,"timestamp":1.0,"question":null,"answer":"ok","reasoning_content":null,'
    b'"resolved":null,"step_count":1,"model_calls":[{"model_call_id":"c1","model_ref":null,'
    b'"response_id":null}]}],"model_calls":[{"model_call_id":"c1","started_at":null,"completed_at":null,'
    b'"duration_ms":null,"request":null,"response":{"output_text":"ok"},"response_metadata":{"response_id":'
    b'"r1","model_ref":{"type":"responses_api_models","name":"policy"},"model":null,"dialect":null,'
    b'"status_code":200,"response_status":null,"finish_reason":null,"upstream_attempted":null,'
    b'"response_source":null,"upstream_status_code":null,"local_response_reason":null,"error_category":null,'
    b'"latency_ttft_ms":null},"token_stats":{"prompt_tokens":3,"completion_tokens":2,"reasoning_tokens":null,'
    b'"total_tokens":null,"cached_tokens":null}}],"tool_calls":[],"gaps":[]}'
)
"""0.7.0's dump of the default record: every field, nulls included, in the models' field order."""


def _health(value: Any) -> bytes:
    """The health checks' view: the validated record's dump, or ``!`` and the error name."""
    try:
        record = validate_trajectory(copy.deepcopy(value))
    except TrajectoryUnreadable as exc:
        return f"!{exc.error}".encode()
    return orjson.dumps(record.model_dump(mode="json"))


def _join(value: Any) -> bytes:
    """The join's view of the same value as a row's producer trajectory: its parts in the output
    trajectory (turns re-sorted, ids of the row, gaps after the producer's), or ``!`` and the name
    the join reports in ``producer_trajectory_invalid``."""
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "ng_trajectory": copy.deepcopy(value)}
    out = join_row(row, None, perf=False)["ng_trajectory"]
    first = out["gaps"][0] if out["gaps"] else {}
    if first.get("code") == "producer_trajectory_invalid":
        return f"!{first['detail']}".encode()
    produced = {"schema_version": "1.0", "task_id": value["task_id"], "rollout_id": value["rollout_id"]}
    for name in ("invocations", "turns", "model_calls", "tool_calls"):
        produced[name] = out[name]
    turns = [{**t, "task_id": value["task_id"], "rollout_id": value["rollout_id"]} for t in out["turns"]]
    produced["turns"] = turns
    produced["gaps"] = [g for g in out["gaps"] if g in _producer_gaps(value)]
    return orjson.dumps(produced)


def _producer_gaps(value: Obj) -> list[Obj]:
    return [
        {"code": g["code"], "invocation_id": g.get("invocation_id"), "detail": g.get("detail")}
        for g in value.get("gaps", [])
    ]


def _sorted_turns(dump: bytes) -> bytes:
    """The join sorts producer turns by (timestamp, invocation_id, turn_no) and drops repeated gaps."""
    if dump.startswith(b"!"):
        return dump
    record = orjson.loads(dump)
    record["turns"].sort(key=lambda t: (t["timestamp"], t["invocation_id"], t["turn_no"]))
    seen: list[Obj] = []
    record["gaps"] = [g for g in record["gaps"] if g not in seen and not seen.append(g)]  # type: ignore[func-returns-value]
    return orjson.dumps(record)


def _both(value: Any) -> bytes:
    """The dump both commands agree on, byte for byte."""
    health = _health(value)
    assert _sorted_turns(health) == _join(value), value
    return health


def test_default_record_dumps_every_field_in_field_order() -> None:
    assert _both(_trajectory()) == DEFAULT_DUMP


def _at(dump: bytes, path: str) -> Any:
    node: Any = orjson.loads(dump)
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _with(path: str, value: Any) -> Obj:
    record = _trajectory()
    *parents, last = path.split(".")
    node: Any = record
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return record


META = "model_calls.0.response_metadata"
TOKENS = "model_calls.0.token_stats"
LAX: list[tuple[str, Any, Any]] = [
    # integer fields: ints, integral floats, booleans, integer strings; never "1e3" or 2.5
    (f"{META}.status_code", "500", 500),
    (f"{META}.status_code", " 3 ", 3),
    (f"{META}.status_code", "+3", 3),
    (f"{META}.status_code", "03", 3),
    (f"{META}.status_code", "1_000", 1000),
    (f"{META}.status_code", "3.0", 3),
    (f"{META}.status_code", 200.0, 200),
    (f"{META}.status_code", True, 1),
    (f"{META}.status_code", "1e3", REJECT),
    (f"{META}.status_code", 200.5, REJECT),
    (f"{META}.status_code", 2.0**63, REJECT),
    (f"{TOKENS}.completion_tokens", "0", 0),
    (f"{TOKENS}.completion_tokens", -1, REJECT),
    ("turns.0.turn_no", 1.0, 1),
    ("turns.0.turn_no", 1.5, REJECT),
    ("turns.0.turn_no", 0, REJECT),
    ("turns.0.step_count", True, 1),
    # number fields: numbers, booleans, numeric strings
    ("turns.0.timestamp", "12.5", 12.5),
    ("turns.0.timestamp", 3, 3.0),
    ("turns.0.timestamp", False, 0.0),
    ("turns.0.timestamp", "x", REJECT),
    ("model_calls.0.duration_ms", -1, REJECT),
    (f"{META}.latency_ttft_ms", "7", 7.0),
    # boolean fields: true/false, 0/1 and the case-insensitive words
    *((f"{META}.upstream_attempted", word, True) for word in ("true", "YES", "on", "t", "y", "1", 1)),
    *((f"{META}.upstream_attempted", word, False) for word in ("false", "No", "off", "f", "n", "0", 0)),
    (f"{META}.upstream_attempted", "maybe", REJECT),
    (f"{META}.upstream_attempted", 2, REJECT),
    ("turns.0.resolved", "yes", True),
    # string fields: only strings
    ("task_id", 5, REJECT),
    (f"{META}.model", 5, REJECT),
    (f"{META}.model", "m", "m"),
    # literal fields: the exact strings only
    (f"{META}.response_source", "cache", REJECT),
    (f"{META}.response_source", "Local", REJECT),
    (f"{META}.response_source", "local", "local"),
    ("invocations.0.status", "done", REJECT),
    ("schema_version", "2.0", REJECT),
    # server references: only the policy type; extra keys dropped
    (f"{META}.model_ref", {"type": "resources_servers", "name": "j"}, REJECT),
    (f"{META}.model_ref", {**POLICY, "x": 1}, POLICY),
    # objects: unknown keys rejected, null rejected where an object is required
    ("turns.0.surprise", 1, REJECT),
    (META, None, REJECT),
    (TOKENS, None, REJECT),
]


@pytest.mark.parametrize(("path", "given", "expected"), LAX, ids=[f"{p}={g!r}" for p, g, _ in LAX])
def test_lax_coercion_table(path: str, given: Any, expected: Any) -> None:
    dump = _both(_with(path, given))
    if expected == REJECT:
        assert dump == REJECT.encode()
    else:
        value = _at(dump, path)
        assert value == expected and type(value) is type(expected)


RECORD_RULES: list[tuple[str, Obj, str | None]] = [
    ("response-only reference", _with("turns.0.model_calls", [{"response_id": "r1"}]), REJECT),
    (
        "server and response reference",
        _with("turns.0.model_calls", [{"model_ref": POLICY, "response_id": "r1"}]),
        None,
    ),
    ("empty call id", _with("turns.0.model_calls", [{"model_call_id": ""}]), REJECT),
    ("foreign turn", _with("turns.0.rollout_id", "other"), REJECT),
    ("twin turns", _trajectory(turns=_trajectory()["turns"] * 2), REJECT),
    ("twin call ids", _trajectory(model_calls=_trajectory()["model_calls"] * 2), REJECT),
    ("twin empty call ids", _trajectory(model_calls=[{"model_call_id": ""}, {"model_call_id": ""}]), None),
    ("twin invocations", _trajectory(invocations=_trajectory()["invocations"] * 2), REJECT),
    (
        "tool call order",
        _trajectory(
            tool_calls=[{"invocation_id": "i", "tool_call_id": "t", "started_at": 2, "completed_at": 1}]
        ),
        REJECT,
    ),
    ("gap without code", _trajectory(gaps=[{"detail": "x"}]), REJECT),
    ("non-object item", _with("invocations.0.conversation", ["hi"]), REJECT),
    ("unknown item type", _with("invocations.0.conversation", [{"type": "bogus"}]), REJECT),
    ("null item type", _with("invocations.0.conversation", [{"type": None, "role": "user"}]), REJECT),
    ("unhashable role", _with("invocations.0.conversation", [{"role": [], "content": "hi"}]), "!TypeError"),
    ("not an object", _trajectory(turns="oops"), REJECT),
]


@pytest.mark.parametrize(("name", "value", "error"), RECORD_RULES, ids=[name for name, _, _ in RECORD_RULES])
def test_record_rules(name: str, value: Obj, error: str | None) -> None:
    dump = _both(value)
    assert (dump if dump.startswith(b"!") else None) == (error.encode() if error else None)


def test_defaults_and_conversation_dumps() -> None:
    value = _with("invocations.0.conversation", [{"role": "user", "content": "hi", "foo": 1}])
    value["tool_calls"] = [{"invocation_id": "inv-0", "tool_call_id": "t1", "started_at": "1"}]
    dump = orjson.loads(_both(value))
    assert dump["invocations"][0]["conversation"] == [
        {"content": "hi", "role": "user", "type": "message", "phase": None}
    ]
    assert orjson.dumps(dump["tool_calls"]) == (
        b'[{"kind":"tool_call","invocation_id":"inv-0","tool_call_id":"t1","sandbox_id":null,"tool_name":null,'
        b'"started_at":1.0,"completed_at":null,"duration_ms":null,"timing_source":null,"status":"unknown",'
        b'"error_type":null,"output":null}]'
    )


def _bundle_view(bundle: Any) -> bytes:
    """The join's validated bundle (written back by the capture merge), or the error name."""
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "ng_agent_observations": copy.deepcopy(bundle)}
    out = join_row(row, memory_store({"0-0.capture.jsonl": b""}), perf=False)
    for gap in out["ng_trajectory"]["gaps"]:
        if gap["code"] == "agent_observations_invalid":
            return f"!{gap['detail']}".encode()
    return orjson.dumps(out["ng_agent_observations"])


BUNDLE_DUMP = (
    b'{"source":"a","records":[{"kind":"agent_invocation","invocation_id":"root","parent_invocation_id":null,'
    b'"spawned_by_tool_call_id":null,"status":"completed","duration_ms":2.0,"error_type":null,"model_calls":[],'
    b'"conversation":[]},{"kind":"tool_call","invocation_id":"root","tool_call_id":"t","sandbox_id":null,'
    b'"tool_name":null,"started_at":null,"completed_at":null,"duration_ms":null,"timing_source":"harness",'
    b'"status":"unknown","error_type":null},{"kind":"context_compaction","invocation_id":"root",'
    b'"observed_at":5.0,"trigger":null,"tokens_before":10,"tokens_after":null,"outcome":"unknown","summary":null,'
    b'"first_kept_item_id":null,"before_model_call":null,"model_calls":[],"after_model_call":null},'
    b'{"kind":"sandbox","role":"agent","provider":null,"sandbox_id":null,"outcome":"oom","exit_code":137,'
    b'"wall_time_s":1.5,"cpu_time_s":null,"peak_memory_mib":null,"resource_usage_source":null,"error_type":null}],'
    b'"gaps":[{"code":"g","invocation_id":null,"detail":null},{"code":"model_call_ownership_unavailable",'
    b'"invocation_id":null,"detail":"capture:unknown:call_index=0"}]}'
)

_RECORDS: list[Obj] = [
    {"kind": "agent_invocation", "invocation_id": "root", "status": "completed", "duration_ms": "2"},
    {"kind": "tool_call", "invocation_id": "root", "tool_call_id": "t", "timing_source": "harness"},
    {"kind": "context_compaction", "invocation_id": "root", "observed_at": 5, "tokens_before": "10"},
    {"kind": "sandbox", "role": "agent", "outcome": "oom", "exit_code": 137.0, "wall_time_s": "1.5"},
]


def _observations(*records: Obj, gaps: list[Obj] | None = None) -> Obj:
    return {"source": "a", "records": list(records), "gaps": [{"code": "g"}] if gaps is None else gaps}


def test_bundle_dump_every_kind() -> None:
    # one unowned capture line makes the merge add its ownership gap
    row = {"_ng_task_index": 0, "_ng_rollout_index": 0, "ng_agent_observations": _observations(*_RECORDS)}
    out = join_row(row, memory_store({"0-0.capture.jsonl": jsonl({"model_call_id": None})}), perf=False)
    assert orjson.dumps(out["ng_agent_observations"]) == BUNDLE_DUMP
    expected = orjson.loads(BUNDLE_DUMP)
    expected["gaps"] = expected["gaps"][:1]
    assert AgentObservationBundle.model_validate(_observations(*_RECORDS)).model_dump() == expected


BUNDLE_RULES: list[tuple[str, Obj]] = [
    ("missing kind", _observations({"invocation_id": "root"})),
    ("turn kind", _observations({"kind": "turn", "invocation_id": "root"})),
    ("twin invocations", _observations(_RECORDS[0], _RECORDS[0])),
    (
        "parent cycle",
        _observations(
            {"kind": "agent_invocation", "invocation_id": "a", "parent_invocation_id": "b"},
            {"kind": "agent_invocation", "invocation_id": "b", "parent_invocation_id": "a"},
        ),
    ),
    ("sandbox without role", _observations({"kind": "sandbox"})),
    ("negative tokens", _observations({**_RECORDS[2], "tokens_after": -1})),
    ("extra key", _observations({**_RECORDS[1], "output": "x"})),
    ("no source", {"records": []}),
    ("bad gap", _observations(gaps=[{"code": 3}])),
]


@pytest.mark.parametrize(("name", "bundle"), BUNDLE_RULES, ids=[name for name, _ in BUNDLE_RULES])
def test_bundle_rules(name: str, bundle: Obj) -> None:
    assert _bundle_view(bundle) == REJECT.encode()


def test_missing_parent_is_allowed() -> None:
    bundle = _observations({"kind": "agent_invocation", "invocation_id": "a", "parent_invocation_id": "gone"})
    assert not _bundle_view(bundle).startswith(b"!")


def _generated_trajectories(count: int, seed: int, avg_bytes: int) -> list[Obj]:
    values = []
    for line in generate_records(count, seed=seed, avg_bytes=avg_bytes):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        value = row.get("ng_trajectory") if isinstance(row, dict) else None
        if isinstance(value, dict):
            values.append(value)
    return values


def test_generated_trajectories_dump_alike() -> None:
    values = _generated_trajectories(200, seed=3, avg_bytes=3000)
    assert len(values) > 100
    accepted = sum(not _both(value).startswith(b"!") for value in values)
    assert accepted > 100


def test_the_joins_fast_path_dumps_what_the_model_dumps() -> None:
    """The join reads producer trajectories through the msgspec Structs when they accept them:
    their builtins are the model's dump, byte for byte."""
    rng = random.Random(3)
    values = _generated_trajectories(150, seed=9, avg_bytes=2000)
    values += [_mutate(value, rng) for value in values]
    fast = 0
    for value in values:
        record = convert_trajectory(copy.deepcopy(value))
        if record is not None:
            fast += 1
            exact = TrajectoryRecord.model_validate(copy.deepcopy(value)).model_dump()
            assert orjson.dumps(msgspec.to_builtins(record)) == orjson.dumps(exact)
    assert fast > 150


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
    {"type": 3},
    {"type": "web_search_call", "id": "w"},
    {"role": [], "content": "hi"},
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


def _mutate(value: Obj, rng: random.Random) -> Obj:
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
        paths = [p for p in _paths(value) if p[0] not in ("task_id", "rollout_id")]
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


def test_mutated_trajectories_dump_alike() -> None:
    rng = random.Random(7)
    bases = _generated_trajectories(120, seed=5, avg_bytes=2000)
    assert len(bases) > 50
    outcomes: dict[str, int] = {}
    for _ in range(1200):
        dump = _both(_mutate(rng.choice(bases), rng))
        key = dump.decode() if dump.startswith(b"!") else "accepted"
        outcomes[key] = outcomes.get(key, 0) + 1
    assert outcomes["accepted"] > 100 and outcomes[REJECT] > 100, outcomes


def _roundtrip(model: Callable[[Any], Any], value: Any) -> bytes:
    return orjson.dumps(model(value).model_dump())


def test_what_the_join_builds_is_already_the_models_dump() -> None:
    """Every trajectory and bundle the join writes is a fixed point of its model: validating the
    output again changes no byte (so the join's own constructions need no second validation)."""
    rows = 0
    for row, lines, key, variant in iter_run(60, seed=11, calls=4, call_bytes=400, variants=True):
        files = {} if variant in ("no_capture_file", "no_result") else {f"{key}.capture.jsonl": jsonl(*lines)}
        out = join_row(row, memory_store(files))
        trajectory = out.get("ng_trajectory")
        if isinstance(trajectory, dict):
            assert _roundtrip(TrajectoryRecord.model_validate, trajectory) == orjson.dumps(trajectory)
            rows += 1
        bundle = out.get("ng_agent_observations")
        if isinstance(bundle, dict) and "ng_model_call_capture" in out:
            assert _roundtrip(AgentObservationBundle.model_validate, bundle) == orjson.dumps(bundle)
        # joining the output again (its trajectory is now a producer trajectory) changes nothing
        assert orjson.dumps(join_row(out, None)) == orjson.dumps(out)
    assert rows >= 55
