"""``eval post`` of a run on a real S3 API server (moto, loopback) through Prefect, with the
result store on S3 too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow import storage
from gymflow.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"


def test_post_on_s3_through_prefect_with_an_s3_result_store(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = f"{s3_bucket}/results/run-1"
    for shard in sorted((EXAMPLE / "shards").glob("*.jsonl")):
        storage.write_atomic(f"{run}/shards/{shard.name}", shard.read_bytes())
    config = tmp_path / "gymflow.yaml"
    config.write_text(f"prefect:\n  result_store: {s3_bucket}/prefect-results\n")
    monkeypatch.setenv("GYMFLOW_CONFIG", str(config))

    assert main(["eval", "post", run]) == 0
    out = capsys.readouterr().out
    assert "health-check: ran" in out.split("Summary:")[-1]
    assert "healthy-metrics: ran" in out.split("Summary:")[-1]
    assert main(["provenance", "verify", f"{run}/rollouts_aggregate_metrics.healthy.json"]) == 0
    with storage.open_read(f"{run}/quality_summary.provenance.json") as handle:
        record = json.loads(handle.read())
    assert record["orchestrator"]["kind"] == "prefect"
    assert [item["uri"] for item in record["inputs"]] == [f"{run}/rollouts.jsonl"]
    assert main(["provenance", "verify", f"{run}/quality_summary.json"]) == 0
    # The health check's range results persisted to the result store on S3.
    assert storage.glob(f"{s3_bucket}/prefect-results/*")

    assert main(["eval", "post", run]) == 0
    again = capsys.readouterr().out.split("Summary:")[-1]
    assert "aggregate: up to date" in again and "health-check: up to date" in again
    assert "healthy-metrics: up to date" in again
