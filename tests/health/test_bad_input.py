"""Bad input: every malformed line gets a row naming its file and line; nothing aborts the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.cli import main
from tests.health.builders import Outcome, line, record, trajectory, turn


def run_cli(run_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    try:
        code = main(["eval", "health-check", str(run_dir), "--direct", "--no-cache", *extra])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(run_dir: Path, data: bytes) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "rollouts.jsonl").write_bytes(data)
    return run_dir


def test_malformed_lines_each_get_a_located_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = b"[" * 1100 + b"]" * 1100
    data = b"\n".join(
        [
            line(record(0)).encode(),
            b"not json at all",
            b'{"_ng_task_index": 1, "answer": "\xff\xfe"}',
            b'{"_ng_task_index": 2, "x": "\\ud800"}',
            deep,
            b'{"_ng_task_index": 3, "_ng_rollout_index": ',  # truncated last line, no newline
        ]
    )
    run_dir = write(tmp_path / "run", data)
    code, stdout, stderr = run_cli(run_dir, capsys)
    assert code == 0 and "Traceback" not in stderr
    assert stdout.startswith("Rollout health: 6 checked, 1 healthy, 5 unhealthy, 0 unobserved\n")
    out = Outcome(run_dir)
    bad = [row for row in out.rows if row["_ng_task_index"] != 0]
    assert [row["findings"][0]["locator"]["line"] for row in bad] == [2, 3, 4, 5, 6]
    assert {row["findings"][0]["locator"]["source_file"] for row in bad} == {str(run_dir / "rollouts.jsonl")}
    assert {row["findings"][0]["detail"]["error"] for row in bad} == {"JSONDecodeError"}


def test_a_50_mb_line_is_read_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = record(0, traj=trajectory(turns=[turn(answer="word " * 10_000_000)]))
    run_dir = write(tmp_path / "run", (line(big) + "\n" + line(record(1)) + "\n").encode())
    assert (run_dir / "rollouts.jsonl").stat().st_size > 50_000_000
    code, stdout, _ = run_cli(run_dir, capsys, "--workers", "2")
    assert code == 0
    assert stdout.startswith("Rollout health: 2 checked, 2 healthy")


def test_an_empty_file_gives_empty_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = write(tmp_path / "run", b"")
    code, stdout, _ = run_cli(run_dir, capsys)
    assert code == 0
    assert stdout.startswith("Rollout health: 0 checked, 0 healthy, 0 unhealthy, 0 unobserved")
    out = Outcome(run_dir)
    assert out.rows == [] and out.summary["tasks"] == {}
    assert out.run["issues"]["record_unreadable"] == 0


def test_missing_file_and_directory_without_rollouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    code, _, stderr = run_cli(empty_dir, capsys)
    assert code == 2 and f"error: Rollout JSONL not found: {empty_dir / 'rollouts.jsonl'}" in stderr
    code, _, stderr = run_cli(tmp_path / "absent", capsys)
    assert code == 2 and "error: Run directory not found:" in stderr
    assert "Traceback" not in stderr


def test_d2_d3_inputs_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gap = {"code": "model_call_reference_unmatched", "invocation_id": "root", "detail": "x"}
    rows = [
        record(0, usage=(18446744073709551615, 2)),
        record(1, usage=(3, 2)),
        record(2, traj=trajectory(gaps=[gap, gap])),
        record(None),
    ]
    run_dir = write(tmp_path / "run", "".join(line(r) + "\n" for r in rows).encode())
    code, _, stderr = run_cli(run_dir, capsys)
    assert code == 0 and "Traceback" not in stderr
    summary = json.loads((run_dir / "quality_summary.json").read_text())
    assert summary["run"]["stats"]["tokens"]["prompt"] == 18446744073709551615 + 3 + 3
    assert summary["run"]["issues"]["trajectory_capture_mismatch"] == 1
    assert summary["run"]["issues"]["record_unreadable"] == 1
