"""Runs to view: the example run after ``eval post --direct``, and a re-verified run made against
the real ``/verify`` test server (one reward flipped each way, one judge failure)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gymflow.cli import main
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import gym_config, mcqa_rows, start_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"


def post_example(target: Path) -> Path:
    """A copy of examples/post_run after ``eval post --direct``."""
    shutil.copytree(EXAMPLE / "shards", target / "shards")
    assert main(["eval", "post", str(target), "--direct"]) == 0
    return target


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return post_example(tmp_path_factory.mktemp("view") / "example-run")


def post_reverified(target: Path) -> Path:
    """Ten mcqa rollouts, re-verified by ``eval post``: (1, 0) drops from 1.0 to 0.0, (2, 1)
    rises from 0.0 to 1.0, (3, 1) is a judge failure in the sidecar."""
    materialized, rollouts = mcqa_rows(5, 2, wrong=[(1, 0)])
    for row in rollouts:
        if (row["_ng_task_index"], row["_ng_rollout_index"]) == (2, 1):
            row["reward"] = 0.0
    write_jsonl(target / "shards" / "rollouts_shard_0.jsonl", rollouts[:5])
    write_jsonl(target / "shards" / "rollouts_shard_1.jsonl", rollouts[5:])
    write_jsonl(target / "rollouts_materialized_inputs.jsonl", materialized)
    with start_server(log_dir=target.parent) as server:
        config = target.parent / "post.yaml"
        config.write_text(yaml.safe_dump({**gym_config({"mcqa": server}), "reverify": {"enabled": True}}))
        server.set((3, 1), kind="judge_failed")
        assert main(["eval", "post", str(target), "--config", str(config), "--direct"]) == 0
    return target


@pytest.fixture(scope="module")
def reverified_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield post_reverified(tmp_path_factory.mktemp("view-reverify") / "run")
