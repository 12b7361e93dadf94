"""``runner.kind: dask`` (prefect-dask, a two-worker LocalCluster) runs the same flows unchanged
and writes the same report bytes as the default runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gymflow.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_dask_runner_writes_identical_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    default, dask = tmp_path / "default", tmp_path / "dask"
    for run in (default, dask):
        shutil.copytree(EXAMPLES / "post_run" / "shards", run / "shards")
    assert main(["eval", "post", str(default), "--direct"]) == 0
    config = tmp_path / "dask.yaml"
    config.write_text("runner:\n  kind: dask\n")
    monkeypatch.setenv("GYMFLOW_CONFIG", str(config))
    assert main(["eval", "post", str(dask)]) == 0
    out = capsys.readouterr().out
    assert "health-check: ran" in out.split("Summary:")[-1]
    for name in (
        "rollouts.jsonl",
        "rollouts_aggregate_metrics.json",
        "quality_summary.json",
        "rollout_verdicts.jsonl",
    ):
        assert (dask / name).read_bytes() == (default / name).read_bytes(), name
