"""The reverify step of ``eval post`` against a real ``/verify`` server on 127.0.0.1: enabled by
config, a judge outage lands in the sidecar and the summary, and the next ``eval post`` verifies
only the row that failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gymflow.cli import main
from tests.asset_events import asset_events
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import ServerProcess, gym_config, mcqa_rows, start_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with start_server(log_dir=tmp_path) as running:
        yield running


@pytest.mark.parametrize("mode", [["--direct"], []], ids=["direct", "prefect"])
def test_post_reverifies_and_recovers_only_the_failed_row(
    mode: list[str], tmp_path: Path, server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    materialized, rollouts = mcqa_rows(5, 2, wrong=[(1, 0)])
    write_jsonl(run / "shards" / "rollouts_shard_0.jsonl", rollouts[:5])
    write_jsonl(run / "shards" / "rollouts_shard_1.jsonl", rollouts[5:])
    write_jsonl(run / "rollouts_materialized_inputs.jsonl", materialized)
    config = tmp_path / "post.yaml"
    config.write_text(yaml.safe_dump({**gym_config({"mcqa": server}), "reverify": {"enabled": True}}))
    server.set((3, 1), kind="judge_failed")

    assert main(["eval", "post", str(run), "--config", str(config), *mode]) == 0
    out = capsys.readouterr().out
    summary = out.split("Summary:")[-1]
    assert "reverify: ran" in summary and "failures by class: 1 judge_failed" in summary
    assert len((run / "rollouts_reverified.jsonl").read_bytes().splitlines()) == 9
    assert b'"_ng_failure_class":"judge_failed"' in (run / "rollouts_reverified_failures.jsonl").read_bytes()
    [entry] = json.loads((run / "rollouts_reverified_aggregate_metrics.json").read_text())
    assert "pass@1/accuracy" in entry["agent_metrics"]  # the server's own answer, as 0.7.0 writes it
    assert len(server.log("/aggregate_metrics")) == 1  # only reverify asks: post's aggregate is local
    assert len(server.log("/verify")) == 10
    if not mode:  # the reverified rollouts are an asset computed from the run's inputs
        assert "prefect.asset.materialization.succeeded" in asset_events(run / "rollouts_reverified.jsonl")
        assert "prefect.asset.referenced" in asset_events(run / "rollouts_materialized_inputs.jsonl")

    server.reset()
    assert main(["eval", "post", str(run), "--config", str(config), *mode]) == 0
    again = capsys.readouterr().out.split("Summary:")[-1]
    assert "aggregate: up to date" in again and "health-check: up to date" in again
    assert [entry["key"] for entry in server.log("/verify")] == [[3, 1]]
    assert len((run / "rollouts_reverified.jsonl").read_bytes().splitlines()) == 10


def test_post_reverify_local_metrics(
    tmp_path: Path, server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    materialized, rollouts = mcqa_rows(2, 2)
    write_jsonl(run / "shards" / "rollouts_shard_0.jsonl", rollouts)
    write_jsonl(run / "rollouts_materialized_inputs.jsonl", materialized)
    config = tmp_path / "post.yaml"
    reverify = {"enabled": True, "local_metrics": True}
    config.write_text(yaml.safe_dump({**gym_config({"mcqa": server}), "reverify": reverify}))
    assert main(["eval", "post", str(run), "--config", str(config), "--direct"]) == 0
    capsys.readouterr()
    [entry] = json.loads((run / "rollouts_reverified_aggregate_metrics.json").read_text())
    assert entry["agent_metrics"]["mean/reward"] == 1 and "pass@1/accuracy" not in entry["agent_metrics"]
    assert server.log("/aggregate_metrics") == [] and len(server.log("/verify")) == 4
