"""Health spec §10, H74-H77: report bytes, the CLI's messages and exit codes, worker counts."""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from pathlib import Path

import pytest

from gymflow import parallel
from gymflow.cli import main
from gymflow.health import HealthOptions, _ranges, run_health
from gymflow.health._evaluate import RunStats, evaluate_line
from gymflow.health._report import merge_runs
from gymflow.health._runs import Placement, sort_rows
from tests.health.builders import Outcome, call, health, record, trajectory, turn, write_lines


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_h74_report_formatting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = health(tmp_path, [record("ünï", traj=trajectory(turns=[turn(answer=None)]))])
    text = out.summary_bytes.decode()
    assert text == json.dumps(out.summary, indent=2, ensure_ascii=False)
    assert not text.endswith("\n") and '"ünï"' in text
    assert out.verdict_bytes.endswith(b"}\n") and b'"_ng_task_index":"\xc3\xbcn\xc3\xaf"' in out.verdict_bytes
    assert b", " not in out.verdict_bytes
    code, stdout, _ = cli(
        ["eval", "health-check", str(tmp_path / "run"), "--json", "--direct", "--no-cache"], capsys
    )
    assert code == 0
    assert stdout.count("\n") == 1 and json.loads(stdout) == out.summary


@pytest.fixture
def cli_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "cli"
    run_dir.mkdir(parents=True)
    write_lines(run_dir / "evaluator_rollouts.jsonl", [record(0), record(1)])
    return run_dir


def test_h75_cli_errors(
    cli_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(cli_run.parent.parent)
    cases = [
        (["runs/nope"], "Run directory not found: runs/nope"),
        (["runs/cli"], "Rollout JSONL not found: runs/cli/rollouts.jsonl"),
        (
            ["runs/cli", "--rollouts-file", "evaluator_rollouts.jsonl", "--workers", "0"],
            "workers must be at least 1",
        ),
        (
            ["runs/cli", "--ignore", "a,,b"],
            "argument --ignore-checks/--ignore: "
            "check IDs must be a comma-separated list without empty entries",
        ),
        # 0.7.0's line, followed by what it refused.
        (["runs/cli", "+foo=1"], "health-check does not accept Hydra overrides: +foo=1"),
        (["runs/cli", "extra"], "health-check does not accept Hydra overrides: extra"),
        (["runs/cli", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["runs/cli", "--workers", "x"], "argument --workers: invalid int value: 'x'"),
        (
            ["runs/cli", "--rollouts-file", "evaluator_rollouts.jsonl", "--ignore", "zzz,aaa"],
            "Unknown rollout health check(s): aaa, zzz; valid ids: check_execution_error, record_unreadable, "
            "rollout_duplicate_identity, rollout_missing_agent_turns, rollout_ended_on_failed_model_call, "
            "agent_turn_hollow, model_call_zero_completion_tokens, model_call_missing_token_counts, "
            "trajectory_capture_mismatch, model_call_failed, rollout_token_count_mismatch, "
            "model_call_runaway_generation, task_consistently_unhealthy, task_no_successful_model_calls",
        ),
    ]
    for args, message in cases:
        code, stdout, stderr = cli(["eval", "health-check", *args, "--direct"], capsys)
        assert code == 2, args
        assert stderr.startswith("usage: gymflow eval health-check"), args
        assert stderr.rstrip("\n").endswith(f"gymflow eval health-check: error: {message}"), (args, stderr)
        assert stdout == ""
        assert "Traceback" not in stderr
    assert sorted(os.listdir(cli_run)) == ["evaluator_rollouts.jsonl"]


def test_h76_rollouts_file_and_report_location(
    cli_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(cli_run.parent.parent)
    code, stdout, _ = cli(
        ["eval", "health-check", "runs/cli/", "--rollouts-file", "evaluator_rollouts.jsonl", "--direct"],
        capsys,
    )
    assert code == 0
    assert stdout == (
        "Rollout health: 2 checked, 2 healthy, 0 unhealthy, 0 unobserved\n"
        "Quality summary: runs/cli/quality_summary.json\n"
    )
    elsewhere = write_lines(
        tmp_path / "elsewhere.jsonl", [record(0, traj=trajectory(turns=[turn(answer=None)]))]
    )
    args = ["eval", "health-check", "runs/cli", "--rollouts-file", str(elsewhere), "--direct"]
    code, stdout, _ = cli(
        [*args, "--ignore", "agent_turn_hollow", "--ignore-checks", "model_call_failed"], capsys
    )
    assert code == 0
    assert "1 unhealthy" in stdout and "(ignored: model_call_failed)" in stdout
    assert json.loads((cli_run / "quality_summary.json").read_text())["run"]["ignored_checks"] == [
        "model_call_failed"
    ]
    assert not (tmp_path / "quality_summary.json").exists()


def test_dot_run_dir_is_rendered_bare(
    cli_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(cli_run)
    code, stdout, _ = cli(
        ["eval", "health-check", ".", "--rollouts-file", "evaluator_rollouts.jsonl", "--direct"], capsys
    )
    assert code == 0 and stdout.endswith("\nQuality summary: quality_summary.json\n")


def _mixed_rows() -> list[object]:
    """143 rows of every kind: healthy, hollow, failing, duplicated, unreadable, keyless, staged."""
    rows: list[object] = []
    for i in range(143):
        kind = i % 7
        if kind == 0:
            rows.append(record(i // 3, i % 3))
        elif kind == 1:
            rows.append(record(i // 3, i % 3, traj=trajectory(turns=[turn(answer=None)])))
        elif kind == 2:
            rows.append(record(i // 3, i % 3, traj=trajectory(calls=[call(status=500)])))
        elif kind == 3:
            rows.append(record(5, 0))
        elif kind == 4:
            rows.append("{bad" if i % 2 else "[]")
        elif kind == 5:
            rows.append({"response": {"usage": {"input_tokens": i, "output_tokens": 1}}})
        else:
            rows.append(record(f"s{i % 4}", 0, stage_index=i % 2, traj=None))
    return rows


def test_h77_identical_bytes_for_any_worker_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "rollouts.jsonl", _mixed_rows())
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 4096)  # several ranges even for a small file
    outputs = set()
    for workers in (1, 2, 4, 8):
        out_dir = tmp_path / f"w{workers}"
        run_health(HealthOptions((str(path),), report_dir=str(out_dir), workers=workers, use_cache=False))
        outcome = Outcome(out_dir)
        assert len(outcome.rows) == 143
        outputs.add((outcome.summary_bytes, outcome.verdict_bytes))
    assert len(outputs) == 1


def test_rows_placed_after_their_range_keep_input_order_among_equal_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows without a task index take their ordinal as task, so they share keys with rows whose
    task index is that number, in ranges before and after theirs; unreadable rows too. The report
    cut into many ranges is the report of one sort of every row by key, then input order."""
    rows: list[object] = []
    for i in range(160):
        if i % 5 == 0:
            rows.append(
                {"_ng_rollout_index": 0, "response": {"usage": {"input_tokens": i, "output_tokens": 1}}}
            )
        elif i % 11 == 0:
            rows.append("{bad")
        else:
            rows.append(record(i % 7 * 25 + i % 3 * 5, 0, usage=(i, 2)))  # tasks 0..160 by 5s, often twice
    path = write_lines(tmp_path / "rollouts.jsonl", rows)
    stats = RunStats()
    evaluated = [
        evaluate_line(text, n, n - 1, frozenset(), stats)
        for n, text in enumerate(path.read_bytes().splitlines(), 1)
    ]
    one_sort = sort_rows(evaluated, Placement(0, _ranges.source_file_name(str(path)), 0, 0))
    expected = merge_runs([(one_sort.entries(), 0)], (), stats)
    expected_bytes = Path(expected.verdicts_path).read_bytes()
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 4096)
    for workers in (1, 2):
        out_dir = tmp_path / f"w{workers}"
        run_health(HealthOptions((str(path),), report_dir=str(out_dir), workers=workers, use_cache=False))
        assert Outcome(out_dir).verdict_bytes == expected_bytes
    # The keyless row at ordinal i (every 5th) takes task i: many share it with rows elsewhere.
    shared = Counter((row["_ng_task_index"], row["_ng_rollout_index"]) for row in Outcome(out_dir).rows)
    assert sum(shared[ordinal, 0] > 1 for ordinal in range(0, 160, 5)) >= 10


def test_h77_pool_unavailable_or_broken_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "rollouts.jsonl", _mixed_rows())
    monkeypatch.setattr(_ranges, "RANGE_BYTES", 4096)
    run_health(HealthOptions((str(path),), report_dir=str(tmp_path / "ref"), workers=1, use_cache=False))
    expected = Outcome(tmp_path / "ref").verdict_bytes

    def no_pool(*args: object, **kwargs: object) -> None:
        raise OSError("no semaphores")

    class BrokenPool:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def __enter__(self) -> BrokenPool:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def submit(self, *args: object, **kwargs: object) -> None:
            from concurrent.futures.process import BrokenProcessPool

            raise BrokenProcessPool("worker died")

    for name, replacement, message in (
        (
            "unavailable",
            no_pool,
            "Process pool unavailable (no semaphores); running rollout health checks serially.",
        ),
        ("broken", BrokenPool, "Process pool failed (worker died); running rollout health checks serially."),
    ):
        monkeypatch.setattr(parallel, "ProcessPoolExecutor", replacement)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_health(
                HealthOptions((str(path),), report_dir=str(tmp_path / name), workers=2, use_cache=False)
            )
        assert [str(w.message) for w in caught if w.category is RuntimeWarning] == [message]
        assert Outcome(tmp_path / name).verdict_bytes == expected
