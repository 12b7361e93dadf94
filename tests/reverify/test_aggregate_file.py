"""reverify.md §2.7, §4 points 6-7: a deterministic aggregate file (item 55); sharding works (item 56)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gymflow.cli import main
from tests.reverify.cases import AGENT, Case, case_fixture, key, read_jsonl, write_jsonl  # noqa: F401
from tests.reverify.server_process import ServerProcess

pytestmark = pytest.mark.timeout(60)

BLOCKS = ("agent_metrics", "key_metrics", "group_level_metrics", "repeat_level_metrics")


def test_item_55_entries_sorted_and_byte_identical(
    case: Case, start_resources_server: Callable[..., ServerProcess]
) -> None:
    slow = start_resources_server()
    # rows of "b_agent" come first in the file and answer at once; "a_agent"'s answer last
    for row in case.materialized + case.rollouts:
        row["agent_ref"] = {"name": "b_agent" if row["_ng_task_index"] < 3 else "a_agent"}
    slow.set(None, latency_ms=300)
    case.config({"rs_b": case.server, "rs_a": slow}, agents={"b_agent": "rs_b", "a_agent": "rs_a"})
    assert case.run().code == 0
    first = case.path("out_aggregate_metrics.json").read_bytes()
    entries = json.loads(first)
    assert [e["agent_ref"]["name"] for e in entries] == ["a_agent", "b_agent"]
    assert [e["agent_metrics"]["mean/reward"] for e in entries] == [1.0, 4 / 6]
    completion = [tuple(e["key"]) for e in case.server.log("/verify")] + [
        tuple(e["key"]) for e in slow.log("/verify")
    ]
    assert completion[0][0] < 3  # b_agent's rows were answered first
    assert case.run("--overwrite", write=False).code == 0
    assert case.path("out_aggregate_metrics.json").read_bytes() == first
    assert [key(r) for r in case.out_rows()] == sorted(key(r) for r in case.rollouts)


def _aggregate(case: Case, config: str, output: str) -> int:
    case.capsys.readouterr()
    code = main(
        [
            "eval",
            "aggregate",
            "--direct",
            "--no-health-check",
            "--config",
            config,
            "--input-glob",
            str(case.path("shards/reverified_*.jsonl")),
            "--output",
            output,
        ]
    )
    case.capsys.readouterr()
    return code


def test_item_56_sharding_recipe(case: Case, start_resources_server: Callable[..., ServerProcess]) -> None:
    own = start_resources_server()
    case.config({"mcqa": own})
    assert case.run("--local-metrics").code == 0  # the default set, as `eval aggregate` computes it
    unsharded = case.metrics()
    config = str(case.config_path)
    for shard, tasks in enumerate(((0, 1, 2), (3, 4))):
        write_jsonl(
            case.path(f"shards/inputs_{shard}.jsonl"),
            [m for m in case.materialized if m["_ng_task_index"] in tasks],
        )
        write_jsonl(
            case.path(f"shards/rollouts_{shard}.jsonl"),
            [r for r in case.rollouts if r["_ng_task_index"] in tasks],
        )
        outcome = case.cli(
            "--direct",
            "--config",
            config,
            "--inputs",
            str(case.path(f"shards/inputs_{shard}.jsonl")),
            "--rollouts",
            str(case.path(f"shards/rollouts_{shard}.jsonl")),
            "--output",
            str(case.path(f"shards/reverified_{shard}.jsonl")),
            "--disable-aggregation",
        )
        assert outcome.code == 0, outcome
        assert not case.path(f"shards/reverified_{shard}_aggregate_metrics.json").exists()
    own.stop()  # aggregation needs no server
    merged = str(case.path("merged.jsonl"))
    assert _aggregate(case, config, merged) == 0
    [entry] = json.loads(case.path("merged_aggregate_metrics.json").read_text())
    assert entry["agent_ref"] == {"name": AGENT}
    for block in BLOCKS:
        assert entry[block] == unsharded[0][block], block
    assert _aggregate(case, config, merged) == 0
    assert len(read_jsonl(case.path("merged.jsonl"))) == 9
