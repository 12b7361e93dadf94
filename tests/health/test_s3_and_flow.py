"""The health check end to end on a real S3 API server, and through Prefect's local API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow import storage
from gymflow.cli import main
from tests.asset_events import asset_events
from tests.health.builders import Outcome, write_lines
from tests.health.test_cli import _mixed_rows


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    cli.last_err = captured.err  # type: ignore[attr-defined]
    return code, captured.out


@pytest.fixture
def local_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_lines(run_dir / "rollouts.jsonl", _mixed_rows())
    return run_dir


def _upload(local_run: Path, bucket: str) -> str:
    run_url = f"{bucket}/results/run"
    storage.write_atomic(f"{run_url}/rollouts.jsonl", (local_run / "rollouts.jsonl").read_bytes())
    return run_url


def _read(url: str) -> bytes:
    with storage.open_read(url) as handle:
        return handle.read()


def test_s3_end_to_end_direct(local_run: Path, s3_bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["eval", "health-check", str(local_run), "--direct", "--workers", "1"], capsys)[0] == 0
    local = Outcome(local_run)
    run_url = _upload(local_run, s3_bucket)
    code, stdout = cli(["eval", "health-check", run_url, "--direct", "--workers", "2"], capsys)
    assert code == 0
    assert stdout.endswith(f"Quality summary: {run_url}/quality_summary.json\n")
    assert _read(f"{run_url}/quality_summary.json") == local.summary_bytes
    remote_rows = _read(f"{run_url}/rollout_verdicts.jsonl")
    # Unreadable rows name their source file, which differs; everything else is identical.
    assert remote_rows.replace(f"{run_url}/rollouts.jsonl".encode(), b"X") == local.verdict_bytes.replace(
        str(local_run / "rollouts.jsonl").encode(), b"X"
    )
    record = json.loads(_read(f"{run_url}/quality_summary.provenance.json"))
    assert [item["uri"] for item in record["inputs"]] == [f"{run_url}/rollouts.jsonl"]
    assert {item["uri"] for item in record["outputs"]} == {
        f"{run_url}/quality_summary.json",
        f"{run_url}/rollout_verdicts.jsonl",
    }
    assert main(["provenance", "verify", f"{run_url}/quality_summary.json"]) == 0
    assert capsys.readouterr().out.count("ok  s3://") == 3
    code, stdout = cli(["eval", "health-check", run_url, "--direct"], capsys)
    assert code == 0 and stdout.startswith("Rollout health: 143 checked")
    assert "Reports are up to date (provenance: " in cli.last_err  # type: ignore[attr-defined]


def test_prefect_flow_writes_the_same_bytes(
    local_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def copy_to(name: str) -> Path:
        target = tmp_path / name
        target.mkdir()
        (target / "rollouts.jsonl").write_bytes((local_run / "rollouts.jsonl").read_bytes())
        return target

    direct_dir, moved_dir = copy_to("direct"), copy_to("moved")
    assert cli(["eval", "health-check", str(direct_dir), "--direct"], capsys)[0] == 0
    code, stdout = cli(["eval", "health-check", str(local_run), "--workers", "2"], capsys)
    assert code == 0
    assert stdout.startswith("Rollout health: 143 checked")
    flow_out, direct_out = Outcome(local_run), Outcome(direct_dir)
    assert flow_out.summary_bytes == direct_out.summary_bytes
    assert flow_out.verdict_bytes.replace(b"/run/", b"/direct/") == direct_out.verdict_bytes
    record = json.loads((local_run / "quality_summary.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect"
    assert record["orchestrator"]["flow_run_id"]
    assert asset_events(local_run / "quality_summary.json") == ["prefect.asset.materialization.succeeded"]
    assert asset_events(local_run / "rollouts.jsonl") == ["prefect.asset.referenced"]
    # Same bytes under another path: range results come from Prefect's cache, yet unreadable
    # rows must name the file of this run.
    assert cli(["eval", "health-check", str(moved_dir), "--workers", "2"], capsys)[0] == 0
    assert Outcome(moved_dir).verdict_bytes == direct_out.verdict_bytes.replace(b"/direct/", b"/moved/")


def test_a_path_prefect_asset_keys_refuse_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A space, ``%`` or ``#`` cannot be in a Prefect asset key; the run's reports are its assets
    under a key of their own (``~`` and the byte in hex) instead of failing the last step."""
    run_dir = tmp_path / "my run %1 #2"
    run_dir.mkdir()
    write_lines(run_dir / "rollouts.jsonl", _mixed_rows())
    code, stdout = cli(["eval", "health-check", str(run_dir)], capsys)
    assert code == 0, cli.last_err  # type: ignore[attr-defined]
    assert stdout.startswith("Rollout health: 143 checked")
    assert (run_dir / "quality_summary.provenance.json").is_file()
