"""``eval post`` writes the merged rollouts' metrics over the healthy rollouts only
(``rollouts_aggregate_metrics.healthy.json``): the bytes ``eval aggregate`` writes for a file of
just those rows, in both modes, recorded, cached, and recomputed when the verdicts change."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gymflow import healthy as healthy_module
from gymflow.cli import main
from tests.asset_events import asset_events
from tests.pipeline.test_post import EXAMPLE, _artifacts, _flow_run_id, _post

HEALTHY = "rollouts_aggregate_metrics.healthy.json"


def _identity(row: dict[str, Any]) -> tuple[int, int]:
    return row["_ng_task_index"], row["_ng_rollout_index"]


def _expected(run_dir: Path, work: Path) -> tuple[bytes, int]:
    """``eval aggregate``'s metrics of a file holding only the rows the verdicts call healthy,
    and how many rows that is."""
    verdicts = [json.loads(raw) for raw in (run_dir / "rollout_verdicts.jsonl").read_text().splitlines()]
    healthy = {_identity(v) for v in verdicts if v["verdict"] == "healthy"}
    rows = (run_dir / "rollouts.jsonl").read_text().splitlines(keepends=True)
    keep = [raw for raw in rows if _identity(json.loads(raw)) in healthy]
    assert 0 < len(keep) < len(rows)  # some rollouts are not healthy
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "healthy.jsonl").write_text("".join(keep))
    args = ["eval", "aggregate", "-i", str(work / "healthy.jsonl"), "-o", str(work / "out" / "healthy.jsonl")]
    assert main([*args, "--no-health-check", "--direct"]) == 0
    return (work / "out" / "healthy_aggregate_metrics.json").read_bytes(), len(keep)


def _step(out: str, name: str) -> str:
    summary = out.split("Summary:", 1)[1]
    found = re.search(rf"^  {re.escape(name)}: ([a-z ]+?)(?: \(|$)", summary, re.MULTILINE)
    assert found, summary
    return found.group(1)


def _mean(path: Path) -> Any:
    return json.loads(path.read_text())[0]["agent_metrics"]["mean/reward"]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    target = tmp_path / "my-run"
    shutil.copytree(EXAMPLE / "shards", target / "shards")
    return target


@pytest.mark.parametrize("mode", [["--direct"], []], ids=["direct", "prefect"])
def test_post_writes_the_metrics_of_the_healthy_rollouts(
    mode: list[str],
    run_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the healthy rows in two pieces, read on the command's worker processes (a large run's way)
    monkeypatch.setattr(healthy_module, "PIECE_MIN_BYTES", 1)
    monkeypatch.setattr(healthy_module, "default_workers", lambda: 2)

    def paired(*_: Any) -> Any:
        raise AssertionError("the verdicts were paired with the rows: the health check's flags went unused")

    # Each time the healthy metrics are computed here, the health check has just run on the rows.
    monkeypatch.setattr(healthy_module, "row_key", paired)
    out = _post([str(run_dir), *mode], capsys)
    assert _step(out, "healthy-metrics") == "ran"
    written = run_dir / HEALTHY
    expected, count = _expected(run_dir, tmp_path / "expected")
    capsys.readouterr()
    assert written.read_bytes() == expected
    everything, healthy = _mean(run_dir / "rollouts_aggregate_metrics.json"), _mean(written)
    assert everything != healthy
    line = (
        f"mean/reward of example_simple_agent: all {everything} (33 rollouts), "
        f"healthy {healthy} ({count} rollouts)"
    )
    assert f"  {line}\n" in out.split("Summary:", 1)[1]

    record = json.loads((run_dir / "rollouts_aggregate_metrics.healthy.provenance.json").read_text())
    assert record["command"] == "eval post healthy-metrics"
    assert [item["uri"] for item in record["inputs"]] == [
        (run_dir / "rollouts.jsonl").as_uri(),
        (run_dir / "rollout_verdicts.jsonl").as_uri(),
    ]
    assert [item["uri"] for item in record["outputs"]] == [written.as_uri()]
    assert record["orchestrator"]["kind"] == ("direct" if mode else "prefect")
    assert main(["provenance", "verify", str(written)]) == 0
    capsys.readouterr()
    if not mode:
        assert "prefect.asset.materialization.succeeded" in asset_events(written)
        markdown = [a.data for a in _artifacts(_flow_run_id(out)) if a.type == "markdown"]
        post_summary = next(data for data in markdown if data.startswith("# eval post"))
        assert line in post_summary and "healthy-metrics: ran" in post_summary
        own = [a.key for a in _artifacts(_flow_run_id(out)) if a.data.startswith("# metrics over healthy")]
        assert len(own) == 1 and own[0].startswith("healthy-metrics-")  # not one of eval-post's keys
        assert any(written.as_uri() in data for data in markdown)  # linked

    # The same inputs again: nothing recomputed, the same bytes.
    first = written.read_bytes()
    again = _post([str(run_dir), *mode], capsys)
    assert _step(again, "health-check") == "up to date"
    assert _step(again, "healthy-metrics") == "up to date"
    assert written.read_bytes() == first and line in again

    # Other verdicts (a check ignored): the healthy rows change, and so do their metrics.
    ignored = "++post.health_check_ignore=[rollout_token_count_mismatch]"
    changed = _post([str(run_dir), *mode, ignored], capsys)
    assert _step(changed, "aggregate") == "up to date"
    assert _step(changed, "healthy-metrics") == "ran"
    expected, more = _expected(run_dir, tmp_path / "expected")
    assert more > count and written.read_bytes() == expected != first
    assert f"healthy {_mean(written)} ({more} rollouts)" in changed


def test_a_run_without_shards_has_no_healthy_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    merged = run / "rollouts.jsonl"
    merged.write_bytes(
        b"".join((EXAMPLE / "shards" / f"rollouts_shard_{n}.jsonl").read_bytes() for n in (0, 1))
    )
    out = _post([str(run), "--direct"], capsys)
    assert _step(out, "healthy-metrics") == "skipped"
    assert not (run / HEALTHY).exists()
