"""The seeded corpus generator (``bench/corpus.py``): determinism, sizes, trajectory keys, shards."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow import health

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.corpus import (  # noqa: E402
    EXAMPLE_PLAN,
    KINDS,
    VARIANTS,
    Row,
    example_rows,
    generate_records,
    iter_rows,
    write_corpus,
)

# Keys each trajectory object may carry (health spec §2.4); anything else makes it unreadable.
ALLOWED: dict[str, frozenset[str]] = {
    "record": frozenset(
        {
            "schema_version",
            "task_id",
            "rollout_id",
            "invocations",
            "turns",
            "model_calls",
            "tool_calls",
            "gaps",
        }
    ),
    "turn": frozenset(
        {
            "invocation_id",
            "task_id",
            "rollout_id",
            "turn_no",
            "timestamp",
            "question",
            "answer",
            "reasoning_content",
            "resolved",
            "step_count",
            "model_calls",
        }
    ),
    "ref": frozenset({"model_call_id", "model_ref", "response_id"}),
    "model_ref": frozenset({"type", "name"}),
    "call": frozenset(
        {
            "model_call_id",
            "started_at",
            "completed_at",
            "duration_ms",
            "request",
            "response",
            "response_metadata",
            "token_stats",
        }
    ),
    "response_metadata": frozenset(
        {
            "response_id",
            "model",
            "dialect",
            "response_status",
            "finish_reason",
            "local_response_reason",
            "error_category",
            "model_ref",
            "status_code",
            "upstream_status_code",
            "upstream_attempted",
            "response_source",
            "latency_ttft_ms",
        }
    ),
    "token_stats": frozenset(
        {"prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens"}
    ),
    "invocation": frozenset(
        {
            "kind",
            "invocation_id",
            "parent_invocation_id",
            "spawned_by_tool_call_id",
            "error_type",
            "status",
            "duration_ms",
            "model_calls",
            "conversation",
        }
    ),
    "tool_call": frozenset(
        {
            "kind",
            "invocation_id",
            "tool_call_id",
            "sandbox_id",
            "tool_name",
            "error_type",
            "started_at",
            "completed_at",
            "duration_ms",
            "timing_source",
            "status",
            "output",
        }
    ),
    "gap": frozenset({"code", "invocation_id", "detail"}),
}
REQUIRED: dict[str, frozenset[str]] = {
    "record": frozenset({"task_id", "rollout_id"}),
    "turn": frozenset({"invocation_id", "task_id", "rollout_id", "turn_no", "timestamp", "step_count"}),
    "invocation": frozenset({"invocation_id"}),
    "tool_call": frozenset({"invocation_id", "tool_call_id"}),
    "gap": frozenset({"code"}),
}


def _check_object(kind: str, value: Any, where: str) -> None:
    assert isinstance(value, dict), f"{where}: {kind} is not an object"
    extra = set(value) - ALLOWED[kind]
    assert not extra, f"{where}: {kind} has keys the spec rejects: {sorted(extra)}"
    missing = REQUIRED.get(kind, frozenset()) - set(value)
    assert not missing, f"{where}: {kind} lacks required keys {sorted(missing)}"


def _check_refs(refs: Any, where: str) -> None:
    assert isinstance(refs, list)
    for ref in refs:
        _check_object("ref", ref, where)
        assert ref.get("model_call_id") or (ref.get("model_ref") and ref.get("response_id"))
        if ref.get("model_ref") is not None:
            _check_object("model_ref", ref["model_ref"], where)


def check_trajectory(trajectory: Any, where: str) -> None:
    """Assert ``trajectory`` uses only the keys §2.4 allows and meets its cross-field rules."""
    _check_object("record", trajectory, where)
    assert trajectory.get("schema_version", "1.0") == "1.0"
    for invocation in trajectory.get("invocations", []):
        _check_object("invocation", invocation, where)
        assert invocation.get("conversation", []) == []
        assert invocation.get("status", "unknown") in {"completed", "failed", "incomplete", "unknown"}
        _check_refs(invocation.get("model_calls", []), where)
    for turn in trajectory.get("turns", []):
        _check_object("turn", turn, where)
        assert turn["task_id"] == trajectory["task_id"] and turn["rollout_id"] == trajectory["rollout_id"]
        assert isinstance(turn["turn_no"], int) and turn["turn_no"] >= 1
        assert isinstance(turn["timestamp"], int | float)
        assert isinstance(turn["step_count"], int) and turn["step_count"] >= 0
        _check_refs(turn.get("model_calls", []), where)
    for call in trajectory.get("model_calls", []):
        _check_object("call", call, where)
        metadata = call.get("response_metadata", {})
        _check_object("response_metadata", metadata, where)
        if metadata.get("model_ref") is not None:
            _check_object("model_ref", metadata["model_ref"], where)
            assert metadata["model_ref"]["type"] == "responses_api_models"
        stats = call.get("token_stats", {})
        _check_object("token_stats", stats, where)
        assert all(v is None or (isinstance(v, int) and v >= 0) for v in stats.values())
    for tool_call in trajectory.get("tool_calls", []):
        _check_object("tool_call", tool_call, where)
        assert tool_call["completed_at"] >= tool_call["started_at"]
    for gap in trajectory.get("gaps", []):
        _check_object("gap", gap, where)
    ids = [call["model_call_id"] for call in trajectory.get("model_calls", []) if call.get("model_call_id")]
    assert len(ids) == len(set(ids)), f"{where}: model_call_id values repeat"
    invocation_ids = [invocation["invocation_id"] for invocation in trajectory.get("invocations", [])]
    assert len(invocation_ids) == len(set(invocation_ids))
    turn_keys = [(turn["invocation_id"], turn["turn_no"]) for turn in trajectory.get("turns", [])]
    assert len(turn_keys) == len(set(turn_keys))


def _is_object_line(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def _rows(n: int, **kwargs: Any) -> list[Row]:
    return list(iter_rows(n, **kwargs))


def test_same_seed_same_bytes_and_other_seed_other_bytes() -> None:
    first = b"".join(generate_records(80, seed=7, avg_bytes=4_000))
    again = b"".join(generate_records(80, seed=7, avg_bytes=4_000))
    other = b"".join(generate_records(80, seed=8, avg_bytes=4_000))
    assert first == again
    assert first != other


def test_lines_are_single_jsonl_lines() -> None:
    for line in generate_records(120, seed=1, avg_bytes=3_000, mix={"healthy": 1, "unreadable": 1}):
        assert line.endswith(b"\n") and line.count(b"\n") == 1


@pytest.mark.parametrize("avg_bytes", [16_000, 9_000])
@pytest.mark.parametrize("mix", [None, {"healthy": 1.0}])
def test_average_line_size_is_within_20_percent(avg_bytes: int, mix: dict[str, float] | None) -> None:
    sizes = [len(line) for line in generate_records(300, seed=2, avg_bytes=avg_bytes, mix=mix)]
    average = sum(sizes) / len(sizes)
    assert abs(average - avg_bytes) <= 0.2 * avg_bytes, average


def test_healthy_rows_are_consistent_and_use_only_allowed_keys() -> None:
    rows = _rows(150, seed=3, avg_bytes=12_000, mix={"healthy": 1.0})
    assert {row.kind for row in rows} == {"healthy"}
    for row in rows:
        record = orjson.loads(row.line)
        assert record == row.record
        assert (record["_ng_task_index"], record["_ng_rollout_index"]) == (row.task, row.rollout)
        trajectory = record["ng_trajectory"]
        where = f"row {row.task}-{row.rollout}"
        check_trajectory(trajectory, where)
        assert trajectory["task_id"] == str(row.task)
        assert trajectory["rollout_id"] == f"{row.task}-{row.rollout}"
        assert trajectory["gaps"] == []
        calls = {call["model_call_id"]: call for call in trajectory["model_calls"]}
        bound = [ref["model_call_id"] for turn in trajectory["turns"] for ref in turn["model_calls"]]
        assert sorted(bound) == sorted(calls), f"{where}: every call is bound by exactly one turn"
        usage = record["response"]["usage"]
        assert usage["input_tokens"] == sum(c["token_stats"]["prompt_tokens"] for c in calls.values())
        assert usage["output_tokens"] == sum(c["token_stats"]["completion_tokens"] for c in calls.values())
        for call in calls.values():
            assert call["response_metadata"]["status_code"] == 200
            assert call["response_metadata"]["finish_reason"] in {"stop", "tool_calls"}
            assert call["token_stats"]["completion_tokens"] > 0
        for turn in trajectory["turns"]:
            answer = turn["answer"]
            assert (isinstance(answer, str) and answer.strip()) or answer[0]["type"] == "function_call"
        assert len(trajectory["turns"]) >= 2
        assert record["reward"] in (0.0, 1.0)


def test_every_trajectory_of_every_kind_uses_only_allowed_keys() -> None:
    rows = _rows(400, seed=4, avg_bytes=3_000, mix={kind: 1.0 for kind in KINDS})
    assert {row.kind for row in rows} == set(KINDS)
    for row in rows:
        if row.kind == "unreadable":
            assert row.record is None and not _is_object_line(row.line)
            continue
        trajectory = orjson.loads(row.line).get("ng_trajectory")
        if trajectory is not None:
            check_trajectory(trajectory, f"{row.kind}/{row.variant}")


def test_repeats_and_duplicates() -> None:
    rows = _rows(400, seed=5, avg_bytes=2_000, repeats=3, mix={"healthy": 0.9, "duplicate": 0.1})
    identities = Counter((row.task, row.rollout) for row in rows)
    assert {rollout for _, rollout in identities} == {0, 1, 2}
    duplicated = {identity for identity, count in identities.items() if count > 1}
    duplicates = [row for row in rows if row.kind == "duplicate"]
    assert duplicates and {(row.task, row.rollout) for row in duplicates} <= duplicated
    assert len(duplicated) <= len(duplicates)


def test_sharding_partitions_the_rows(tmp_path: Path) -> None:
    whole = write_corpus(str(tmp_path / "one.jsonl"), 47, seed=6, avg_bytes=2_500)
    shards = write_corpus(str(tmp_path / "shards"), 47, seed=6, avg_bytes=2_500, shards=4)
    assert [Path(p).name for p in shards] == [f"rollouts_shard_{i}.jsonl" for i in range(4)]
    pieces = [Path(p).read_bytes() for p in shards]
    assert [piece.count(b"\n") for piece in pieces] == [11, 12, 12, 12]
    assert b"".join(pieces) == Path(whole[0]).read_bytes()
    assert Path(whole[0]).read_bytes() == b"".join(generate_records(47, seed=6, avg_bytes=2_500))
    directory = tmp_path / "run"
    directory.mkdir()
    assert write_corpus(str(directory), 3, seed=6) == [str(directory / "rollouts.jsonl")]
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_example_plan_covers_every_variant_and_matches_the_committed_file() -> None:
    assert {variant for _, variant in EXAMPLE_PLAN} == {v for vs in VARIANTS.values() for v in vs}
    rows = list(example_rows())
    assert len(rows) == len(EXAMPLE_PLAN) == 40
    assert 1_500 <= sum(len(row.line) for row in rows) / len(rows) <= 3_000
    committed = REPO / "examples" / "run" / "rollouts.jsonl"
    assert committed.read_bytes() == b"".join(row.line for row in rows), (
        "regenerate with: python -m bench.corpus examples/run/rollouts.jsonl --example --seed 0"
    )


def test_kinds_get_the_intended_verdicts(tmp_path: Path) -> None:
    rows = _rows(160, seed=9, avg_bytes=2_500, mix={kind: 1.0 for kind in KINDS})
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(row.line for row in rows))
    health.run_health(health.HealthOptions((str(path),), workers=1, use_cache=False))
    copies = Counter((row.task, row.rollout) for row in rows if row.kind != "unreadable")
    expected: Counter[str] = Counter()
    for row in rows:
        if row.kind == "unreadable" or copies[(row.task, row.rollout)] > 1:
            expected["unhealthy"] += 1
        else:
            expected[
                {"healthy": "healthy", "unhealthy": "unhealthy", "unobserved": "unobserved"}[row.kind]
            ] += 1
    verdicts = Counter(
        orjson.loads(line)["verdict"]
        for line in (tmp_path / "rollout_verdicts.jsonl").read_bytes().splitlines()
    )
    assert verdicts == expected
