"""``gymflow eval post`` on the sharded example run: direct and through Prefect's real local API."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import pytest

from gymflow.cli import main
from gymflow.view import DEFAULT_PORT
from tests.asset_events import asset_events
from tests.prefect_api import local_client

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"
REPORTS = (
    "rollouts.jsonl",
    "rollouts_aggregate_metrics.json",
    "rollouts.provenance.json",
    "quality_summary.json",
    "rollout_verdicts.jsonl",
    "quality_summary.provenance.json",
)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    target = tmp_path / "my-run"
    shutil.copytree(EXAMPLE / "shards", target / "shards")
    return target


def _post(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["eval", "post", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    return captured.out


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in REPORTS}


def _status(out: str) -> dict[str, str]:
    summary = out.split("Summary:", 1)[1]
    return {
        line.strip().split(":", 1)[0]: line.split(":", 1)[1].strip().split(" (", 1)[0]
        for line in summary.splitlines()
        if line.strip().split(":", 1)[0] in ("aggregate", "join", "health-check", "reverify")
    }


def test_direct_post_runs_every_step_then_nothing(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _post([str(run_dir), "--direct"], capsys)
    assert _status(out) == {
        "aggregate": "ran",
        "join": "skipped",
        "health-check": "ran",
        "reverify": "skipped",
    }
    assert "Rollout health: 33 checked" in out
    assert "verdicts: " in out and "key metrics of example_simple_agent: mean/reward " in out
    first = _snapshot(run_dir)
    merged = [json.loads(line) for line in first["rollouts.jsonl"].splitlines()]
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in merged]
    assert keys == sorted(keys) and len(keys) == 33
    health_record = json.loads(first["quality_summary.provenance.json"])
    assert [item["uri"] for item in health_record["inputs"]] == [(run_dir / "rollouts.jsonl").as_uri()]
    assert main(["provenance", "verify", str(run_dir / "quality_summary.json")]) == 0
    assert main(["provenance", "verify", str(run_dir / "rollouts.jsonl")]) == 0
    assert f"report: ran (html {run_dir / 'report.html'})" in out
    html = (run_dir / "report.html").read_bytes()
    assert b"33 rollouts" in html
    capsys.readouterr()

    again = _post([str(run_dir), "--direct"], capsys)
    assert _status(again) == {
        "aggregate": "up to date",
        "join": "skipped",
        "health-check": "up to date",
        "reverify": "skipped",
    }
    assert _snapshot(run_dir) == first
    # nothing changed, so the report written with these reports stands; without it, it is written
    report = run_dir / "report.html"
    assert f"report: up to date (html {report})" in again and report.read_bytes() == html
    report.unlink()
    assert f"report: ran (html {report})" in _post([str(run_dir), "--direct"], capsys)
    assert b"33 rollouts" in report.read_bytes()


def test_direct_post_without_shards_or_rollouts_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "post", str(tmp_path), "--direct"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: no rollouts in ") and err.count("\n") == 1


def _artifacts(flow_run_id: str) -> list[Any]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with local_client() as client:
        return list(
            client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(flow_run_id)]))
            )
        )


def _tags(flow_run_id: str) -> tuple[list[str], dict[str, list[str]], set[str]]:
    """The post run's tags, each subflow run's tags by flow-run name, and every tag of their tasks."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )

    with local_client() as client:
        post = client.read_flow_run(UUID(flow_run_id))
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[post.id]))
        )
        ids = [post.id, *(child.id for child in children)]
        task_runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=ids))
        )
        subflows = {child.name: sorted(child.tags) for child in children}
    return sorted(post.tags), subflows, {tag for run in task_runs for tag in run.tags}


def _flow_run_id(out: str) -> str:
    line = next(line for line in out.splitlines() if line.strip().startswith("flow run: "))
    return line.rstrip("/").rsplit("/", 1)[1]


def test_prefect_post_publishes_artifacts_and_reruns_as_cache_hits(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    direct = tmp_path / "direct-run"
    shutil.copytree(run_dir / "shards", direct / "shards")
    _post([str(direct), "--direct"], capsys)

    out = _post([str(run_dir)], capsys)
    assert _status(out)["aggregate"] == "ran" and _status(out)["health-check"] == "ran"
    for name in ("rollouts_aggregate_metrics.json", "quality_summary.json", "rollout_verdicts.jsonl"):
        assert (run_dir / name).read_bytes() == (direct / name).read_bytes(), name
    record = json.loads((run_dir / "quality_summary.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect"
    assert record["orchestrator"]["flow_run_url"].startswith("http://127.0.0.1:")
    aggregate_record = json.loads((run_dir / "rollouts.provenance.json").read_text())
    assert aggregate_record["orchestrator"]["kind"] == "prefect"
    # Every report is an asset whose upstream are the inputs it was computed from.
    materialized = ["prefect.asset.materialization.succeeded"]
    for name in ("rollouts_aggregate_metrics.json", "rollouts.jsonl", "quality_summary.json"):
        assert materialized[0] in asset_events(run_dir / name), name
    assert asset_events(run_dir / "shards" / "rollouts_shard_0.jsonl") == ["prefect.asset.referenced"]

    artifacts = _artifacts(_flow_run_id(out))
    by_type: dict[str, list[Any]] = {}
    for artifact in artifacts:
        by_type.setdefault(artifact.type, []).append(artifact)
    summary = next(
        a
        for a in by_type["markdown"]
        if (a.key or "").startswith("eval-post-") and a.key.endswith("-summary") and "-link-" not in a.key
    )
    assert summary.key.startswith("eval-post-my-run-")
    # each step's own summary is published in the post run too
    assert any((a.key or "").startswith("eval-health-check-my-run-") for a in by_type["markdown"])
    assert "health-check: ran" in summary.data
    assert (
        "report: ran" in summary.data
        and "Showing the first 33 of 33 rollouts" in (run_dir / "report.html").read_text()
    )
    inputs = next(
        a for a in by_type["table"] if (a.key or "").startswith("eval-post-") and a.key.endswith("-inputs")
    )
    table = json.loads(inputs.data) if isinstance(inputs.data, str) else inputs.data
    shard = run_dir / "shards" / "rollouts_shard_0.jsonl"
    digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    assert {"uri": shard.as_uri(), "sha256": digest, "bytes": shard.stat().st_size} in table
    # Prefect stores a link artifact as markdown "[text](link)": each links the report's page of
    # `gymflow view` (a browser opens no file:// link from a web page) and keeps its URI as text.
    links = {a.data.rsplit("(", 1)[1].rstrip(")") for a in by_type["markdown"] if a.data.startswith("[")}
    quality, record = run_dir / "quality_summary.json", run_dir / "quality_summary.provenance.json"
    run_query = urlencode({"run": run_dir.as_uri()})
    assert f"http://127.0.0.1:{DEFAULT_PORT}/?{run_query}" in links
    assert f"http://127.0.0.1:{DEFAULT_PORT}/provenance?{run_query}#record-{record.name}" in links
    assert f"http://127.0.0.1:{DEFAULT_PORT}/rollouts?{run_query}" in links
    assert not any(link.startswith("file:") for link in links)
    assert quality.as_uri() in summary.data and record.as_uri() in summary.data
    assert f"Links open while `gymflow view {run_dir.as_uri()}` is running" in summary.data
    link_descriptions = [
        a.description or "" for a in artifacts if a.type == "markdown" and a.data.startswith("[")
    ]
    assert any(quality.as_uri() in text and "gymflow view" in text for text in link_descriptions)

    # Flow runs are tagged with their command and the run's name; task runs are not (each tag
    # would make every task ask the server for a concurrency slot first).
    post_tags, subflow_tags, task_tags = _tags(_flow_run_id(out))
    # Every step runs in the post flow itself (one runner per command, no subflows).
    assert post_tags == ["eval-post", "my-run"]
    assert subflow_tags == {}
    assert task_tags == set()

    first = _snapshot(run_dir)
    again = _post([str(run_dir)], capsys)
    assert _status(again)["aggregate"] == "up to date" and _status(again)["health-check"] == "up to date"
    assert _snapshot(run_dir) == first
    cached_artifacts = _artifacts(_flow_run_id(again))
    assert {a.type for a in cached_artifacts} >= {"markdown", "table"}
    cached_links = {
        a.data.rsplit("(", 1)[1].rstrip(")")
        for a in cached_artifacts
        if a.type == "markdown" and a.data.startswith("[")
    }
    assert cached_links == links  # the cached run links the same reports
