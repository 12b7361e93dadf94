"""The second corpus generator (``bench/corpus2.py``): determinism and the shapes it claims."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow import health
from gymflow.jsonline import loads_exact

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import corpus2  # noqa: E402
from tests.test_corpus import check_trajectory  # noqa: E402

ALL_KINDS = {kind: 1.0 for kind in corpus2.KINDS}


def _rows(n: int, **kwargs: Any) -> list[corpus2.Row]:
    return list(corpus2.iter_rows(n, **kwargs))


def test_same_seed_same_bytes_and_other_seed_other_bytes() -> None:
    first = b"".join(corpus2.generate_lines(150, seed=3, avg_bytes=12_000, mix=ALL_KINDS))
    again = b"".join(corpus2.generate_lines(150, seed=3, avg_bytes=12_000, mix=ALL_KINDS))
    other = b"".join(corpus2.generate_lines(150, seed=4, avg_bytes=12_000, mix=ALL_KINDS))
    assert first == again
    assert first != other


def test_sizes_come_in_three_classes_around_the_average() -> None:
    rows = _rows(800, seed=1, avg_bytes=16_000, mix={"healthy": 1.0})
    sizes: dict[str, list[int]] = {}
    for row in rows:
        sizes.setdefault(row.size_class, []).append(len(row.line))
    mean = {name: sum(values) / len(values) for name, values in sizes.items()}
    assert set(mean) == {"short", "medium", "long"}
    assert mean["short"] < 0.5 * 16_000 < mean["medium"] < 2 * 16_000 < mean["long"]
    average = sum(len(row.line) for row in rows) / len(rows)
    assert abs(average - 16_000) <= 0.2 * 16_000, average


def test_healthy_rows_have_the_claimed_shapes() -> None:
    rows = _rows(300, seed=2, avg_bytes=16_000, mix={"healthy": 1.0}, big_int_share=0.05)
    assert {row.style for row in rows} == {"orjson", "ascii_escaped", "spaced", "crlf"}
    fan_out = reasoning = by_response = two_call_turns = failed_tools = structured = big = 0
    scripts = Counter[str]()
    for row in rows:
        assert row.line.endswith(b"\n") and row.line.count(b"\n") == 1
        record, _ = loads_exact(row.line.strip())
        assert record == row.record
        trajectory = record["ng_trajectory"]
        check_trajectory(trajectory, f"row {row.task}-{row.rollout}")
        calls = {call["model_call_id"]: call for call in trajectory["model_calls"]}
        usage = record["response"]["usage"]
        assert usage["input_tokens"] == sum(c["token_stats"]["prompt_tokens"] for c in calls.values())
        assert usage["output_tokens"] == sum(c["token_stats"]["completion_tokens"] for c in calls.values())
        for turn in trajectory["turns"]:
            answer = turn["answer"]
            if isinstance(answer, list):
                fan_out = max(fan_out, len(answer))
            two_call_turns += len(turn["model_calls"]) > 1
            by_response += "response_id" in turn["model_calls"][0]
        for call in calls.values():
            reasoning = max(
                reasoning, sum(item["type"] == "reasoning" for item in call["response"]["output"])
            )
        for tool in trajectory["tool_calls"]:
            failed_tools += tool["status"] == "failed"
            structured += not isinstance(tool["output"], str)
        big += any(isinstance(v, int) and v >= 2**64 for v in record.values())
        text = row.line.decode()
        scripts.update(
            name
            for name, probe in (("cjk", "\u6570"), ("cyrillic", "\u0434"), ("emoji", "\U0001f680"))
            if probe in text or json.dumps(probe)[1:-1] in text
        )
    assert fan_out >= 3 and reasoning >= 2 and two_call_turns and by_response and failed_tools and structured
    assert big and set(scripts) == {"cjk", "cyrillic", "emoji"}
    assert any(record_value == 18446744073709551615 for row in rows for record_value in row.record.values())  # type: ignore[union-attr]


def test_every_variant_appears_and_lines_are_what_their_kind_says() -> None:
    rows = _rows(900, seed=5, avg_bytes=3_000, mix=ALL_KINDS)
    assert {row.variant for row in rows} == {v for vs in corpus2.VARIANTS.values() for v in vs}
    for row in rows:
        if row.kind == "unreadable":
            with pytest.raises(orjson.JSONDecodeError):
                value = orjson.loads(row.line)
                if not isinstance(value, dict):  # a scalar line is JSON, but no rollout
                    raise orjson.JSONDecodeError("scalar", "", 0)
        else:
            trajectory = loads_exact(row.line.strip())[0].get("ng_trajectory")
            assert (trajectory is None) == (row.record is not None and "ng_trajectory" not in row.record)
            if trajectory is not None:
                check_trajectory(trajectory, f"{row.kind}/{row.variant}")


def test_kinds_get_the_intended_verdicts(tmp_path: Path) -> None:
    rows = _rows(400, seed=9, avg_bytes=2_500, mix=ALL_KINDS)
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(row.line for row in rows))
    health.run_health(health.HealthOptions((str(path),), workers=1, use_cache=False))
    copies = Counter((row.task, row.rollout) for row in rows if row.kind != "unreadable")
    expected = Counter(
        "unhealthy" if row.kind == "unreadable" or copies[(row.task, row.rollout)] > 1 else row.kind
        for row in rows
    )
    verdicts = Counter(
        orjson.loads(line)["verdict"]
        for line in (tmp_path / "rollout_verdicts.jsonl").read_bytes().splitlines()
    )
    assert verdicts == expected


@pytest.mark.parametrize("round_robin", [True, False])
def test_shards_partition_the_lines(tmp_path: Path, round_robin: bool) -> None:
    whole = corpus2.write_corpus(str(tmp_path / "one.jsonl"), 61, seed=6, avg_bytes=2_000)
    shards = corpus2.write_corpus(
        str(tmp_path / "shards"), 61, seed=6, avg_bytes=2_000, shards=3, round_robin=round_robin
    )
    assert [Path(p).name for p in shards] == [f"rollouts_shard_{i}.jsonl" for i in range(3)]
    lines = Path(whole[0]).read_bytes().splitlines(keepends=True)
    rows = [line for line in lines if line.strip()]
    pieces = [
        [line for line in Path(p).read_bytes().splitlines(keepends=True) if line.strip()] for p in shards
    ]
    assert [len(piece) for piece in pieces] == [21, 20, 20]
    if round_robin:
        assert pieces == [rows[i::3] for i in range(3)]
    else:
        assert [line for piece in pieces for line in piece] == rows
    assert not list(tmp_path.rglob("*.tmp"))


def test_prejoin_run_joins_into_rows_the_health_check_passes(tmp_path: Path) -> None:
    from gymflow.cli import main

    files = corpus2.write_prejoin_run(tmp_path, 60, seed=8, avg_bytes=3_000)
    rows = list(corpus2.iter_rows(60, 8, 3_000, corpus2.PREJOIN_MIX, big_int_share=0.0))
    assert files == len(rows) == len(list((tmp_path / "model-calls").iterdir()))
    for line in (tmp_path / "rollouts.jsonl").read_bytes().splitlines():
        row = loads_exact(line.strip())[0]
        assert "ng_trajectory" not in row and row["ng_agent_observations"]["records"][0]["conversation"]
    assert main(["eval", "join", str(tmp_path), "--direct", "--no-cache"]) == 0
    joined = tmp_path / "rollouts_joined.jsonl"
    assert main(["eval", "health-check", str(tmp_path), "--rollouts-file", str(joined), "--direct"]) == 0
    verdicts = {
        (entry["_ng_task_index"], entry["_ng_rollout_index"]): entry["verdict"]
        for entry in map(orjson.loads, (tmp_path / "rollout_verdicts.jsonl").read_bytes().splitlines())
    }
    healthy = [(row.task, row.rollout) for row in rows if row.kind == "healthy"]
    assert healthy and all(verdicts[identity] == "healthy" for identity in healthy)
