"""The fast paths against the exact one, line by line: the typed decoding of the line (msgspec
straight into the trajectory's Structs, behind the C agreement check), the trajectory converted
from ``orjson.loads``'s value (msgspec Structs) and the exact one (orjson and pydantic).

Generated rollouts are mutated (flipped bytes, truncated lines, changed types, lax coercions,
invalid or overlong UTF-8 inside payloads, huge numbers, duplicate keys, deep nesting, broken
record rules); every mutated line must give the same row (verdict, findings, unobserved, task
facts) and the same statistics on both paths, and the reports built from all of them the same
bytes. Where the fast path accepts a trajectory, pydantic must accept it with equal values.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import pytest
from pydantic import ValidationError

from bench import corpus2
from bench.corpus import generate_records
from gymflow.evidence import TrajectoryRecord, structs
from gymflow.health import _reading
from gymflow.health._evaluate import RowResult, RunStats, evaluate_line
from gymflow.health._report import build_report
from tests.health.builders import JUDGE, call, record, trajectory, turn

SEED = 20260
BASES = 160
MUTATIONS_PER_BASE = 25

_VALUES: list[Any] = [
    "500", "yes", "true", "1e3", " 3 ", "", "x", 0, 1, -1, 7, 1.0, 2.5, -0.0, True, False, None,
    [], {}, [1], {"a": 1}, 2**63, 2**64 + 1, 10**30, 1e300, "responses_api_models", "1.0",
]  # fmt: skip
_INVALID_UTF8 = [b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]
_HUGE = [b"1e400", b"-1e400", b"1" * 400, b"18446744073709551616", b"9223372036854775808", b"1e-400"]


def _bases() -> list[dict[str, Any]]:
    """Realistic generated rollouts and the builders' small ones, all parsed."""
    rows: list[Any] = []
    for line in generate_records(BASES - 7, seed=SEED, avg_bytes=2_500):
        try:
            rows.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue  # the generator's own unreadable lines
    rows += [
        record(),
        record(traj=trajectory(calls=[call(status=500), call("c2", "r2", model_ref=JUDGE)])),
        record(traj=trajectory(turns=[turn(answer=[{"type": "function_call"}]), turn(turn_no=2, refs=[])])),
        record(traj=trajectory(gaps=[{"code": "model_call_reference_unmatched", "detail": "call:c9"}])),
        record(
            traj=trajectory(
                invocations=[
                    {
                        "invocation_id": "inv-0",
                        "model_calls": [{"model_call_id": "c1"}],
                        "conversation": [{"role": "user", "content": "hi"}],
                    }
                ]
            )
        ),
        record(traj=trajectory(calls=[call(finish_reason="length", response={"output": []})])),
        # A call cut short by a length limit is the one whose response a check reads: with content,
        # with a null response (unobservable) and without one.
        record(traj=trajectory(calls=[call(finish_reason="length"), _without_response(call("c2", "r2"))])),
        record(traj=trajectory(calls=[{**call(finish_reason="max_tokens"), "response": None}])),
        record(traj=trajectory(calls=[_without_response(call(finish_reason="max_output_tokens"))])),
        record(traj=trajectory(gaps=[{"code": "turns_unavailable"}, {"code": "model_calls_unavailable"}])),
    ]
    return [row for row in rows if isinstance(row, dict)]


def _without_response(model_call: dict[str, Any]) -> dict[str, Any]:
    del model_call["response"]
    return model_call


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _structural(base: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A copy of ``base`` with its trajectory changed at a random place."""
    out = copy.deepcopy(base)
    traj = out.get("ng_trajectory")
    if not isinstance(traj, dict):
        out["ng_trajectory"] = rng.choice(_VALUES)
        return out
    paths = [p for p in _paths(traj) if p]
    path = rng.choice(paths)
    parent: Any = traj
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    kind = rng.randrange(6)
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
    elif kind == 1 and isinstance(parent, dict):
        parent[rng.choice(["extra", "Model_call_id", "kind", "output", "schema_version"])] = rng.choice(
            _VALUES
        )
    elif kind == 2:
        deep: Any = "x"
        for _ in range(rng.choice([250, 254, 255, 256, 300])):
            deep = [deep] if rng.random() < 0.5 else {"k": deep}
        parent[key] = deep
    elif kind == 3 and traj.get("model_calls"):  # break a record-level rule
        calls = traj["model_calls"]
        rule = rng.randrange(3)
        if rule == 0:
            calls.append(copy.deepcopy(calls[0]))
        elif rule == 1 and traj.get("turns"):
            traj["turns"][0]["task_id"] = "other"
        else:
            traj.setdefault("tool_calls", []).append(
                {
                    "invocation_id": "i",
                    "tool_call_id": "t",
                    "started_at": 2.0,
                    "completed_at": rng.choice([1, 2, 3]),
                }
            )
    else:
        parent[key] = copy.deepcopy(rng.choice(_VALUES))
    return out


def _textual(line: bytes, rng: random.Random) -> bytes:
    """``line`` with bytes flipped or cut, bad UTF-8 or a huge number put in, or a key repeated."""
    kind = rng.randrange(5)
    if kind == 0:
        position = rng.randrange(len(line))
        return line[:position] + bytes([line[position] ^ (1 << rng.randrange(8))]) + line[position + 1 :]
    if kind == 1:
        return line[: rng.randrange(1, len(line))]
    if kind == 2:  # inside a string (a payload text, a key or an id)
        quotes = [i for i, byte in enumerate(line) if byte == 0x22]
        position = rng.choice(quotes) + 1
        return line[:position] + rng.choice(_INVALID_UTF8) + line[position:]
    if kind == 3:  # replace a number
        digits = [i for i in range(1, len(line)) if chr(line[i]).isdigit() and line[i - 1 : i] in b":[, "]
        if not digits:
            return line
        start = rng.choice(digits)
        end = start
        while end < len(line) and chr(line[end]) in "0123456789.eE+-":
            end += 1
        return line[:start] + rng.choice(_HUGE) + line[end:]
    keys = [i for i in range(len(line) - 1) if line[i : i + 2] in (b'{"', b', "')]
    if not keys:
        return line
    start = rng.choice(keys) + (1 if line[rng.choice(keys)] == 0x7B else 2)
    end = line.find(b'":', start)
    if end < 0:
        return line
    key = line[start : end + 1]
    value = json.dumps(rng.choice(_VALUES)).encode()
    return line[:start] + key + b":" + value + b"," + line[start:]


def _mutated_lines() -> list[bytes]:
    rng = random.Random(SEED)
    # The second generator's lines as written: non-ASCII text, huge and extreme numbers, deep
    # nesting, unreadable rows, other serialisations.
    lines = [line.strip() for line in corpus2.generate_lines(300, seed=SEED, avg_bytes=3_000) if line.strip()]
    for base in _bases():
        lines.append(json.dumps(base).encode())
        for _ in range(MUTATIONS_PER_BASE):
            if rng.random() < 0.5:
                lines.append(json.dumps(_structural(base, rng)).encode())
            else:
                lines.append(_textual(json.dumps(base).encode(), rng))
    return lines


def _facts(row: RowResult) -> tuple[Any, ...]:
    return tuple(getattr(row, item.name) for item in dataclasses.fields(row))


def _evaluate(lines: list[bytes]) -> tuple[list[RowResult], RunStats]:
    stats = RunStats()
    return [
        evaluate_line(line, index + 1, index, frozenset(), stats) for index, line in enumerate(lines)
    ], stats


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    return _mutated_lines()


def test_fast_and_exact_paths_agree_on_every_line(
    lines: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    typed_rows, typed_stats = _evaluate(lines)
    typed = [_reading._read_fast(line) is not None for line in lines]
    monkeypatch.setattr(_reading, "_read_fast", lambda line: None)
    fast_rows, fast_stats = _evaluate(lines)
    monkeypatch.setattr(structs, "convert_trajectory", lambda raw: None)
    exact_rows, exact_stats = _evaluate(lines)
    for line, typed_row, fast, exact in zip(lines, typed_rows, fast_rows, exact_rows, strict=True):
        assert _facts(fast) == _facts(exact), line[:300]
        assert _facts(typed_row) == _facts(exact), line[:300]
    assert typed_stats == fast_stats == exact_stats
    # The typed decoding takes most lines, and declines some that orjson reads (its check refused
    # them, or msgspec or a validator did), which the other paths then decide.
    readable = [isinstance(_reading._read_exact(line), _reading.RecordRead) for line in lines]
    assert sum(typed) > 1500, sum(typed)
    assert sum(r and not t for r, t in zip(readable, typed, strict=True)) > 300
    # The mutations reach every outcome: healthy, unhealthy and unobserved rows, unreadable lines
    # and unreadable trajectories (before the reports mark the many shared identities).
    outcomes = Counter(
        "unhealthy" if row.findings else "unobserved" if row.unobserved else "healthy" for row in fast_rows
    )
    assert outcomes["healthy"] > 300 and outcomes["unhealthy"] > 300 and outcomes["unobserved"] > 20, outcomes
    unreadable = Counter(
        item["detail"]["reason"]
        for row in fast_rows
        for item in row.findings
        if item["check"] == "record_unreadable"
    )
    assert unreadable["canonical trajectory is unreadable"] > 300, unreadable
    assert unreadable["rollout record is unreadable"] > 300, unreadable
    fast_report = build_report(fast_rows, (), fast_stats)
    exact_report = build_report(exact_rows, (), exact_stats)
    assert fast_report.summary_bytes == exact_report.summary_bytes
    assert b"".join(fast_report.verdict_lines()) == b"".join(exact_report.verdict_lines())


def test_fast_acceptance_implies_pydantic_acceptance_with_equal_values(lines: list[bytes]) -> None:
    accepted = declined_but_valid = 0
    for line in lines:
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        raw = parsed.get("ng_trajectory") if isinstance(parsed, dict) else None
        if raw is None:
            continue
        fast = structs.convert_trajectory(raw)
        try:
            exact: TrajectoryRecord | None = TrajectoryRecord.model_validate(raw)
        except (ValidationError, TypeError):
            exact = None
        if fast is None:
            declined_but_valid += exact is not None
            continue
        accepted += 1
        assert exact is not None, line[:300]
        # json writes 1 and 1.0 differently: equal texts are equal values of equal types.
        assert json.dumps(msgspec.to_builtins(fast)) == json.dumps(exact.model_dump()), line[:300]
    # Both sides of the property are exercised: records taken fast, and lax ones left to pydantic.
    assert accepted > 500 and declined_but_valid > 20, (accepted, declined_but_valid)
