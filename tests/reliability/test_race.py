"""Concurrent runs on one output location (issue 11, attack 1): never a mixed set that verifies.

Two real processes with different parameters health-check one run directory at the same time,
many times over. Afterwards the directory holds one run's complete set with a record that
verifies, or one of the runs was refused with a one-line message naming the holder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow import provenance
from tests.reliability.helpers import env, health_rows, start, write_rows

REPEATS = 10


def _consistent(run_dir: Path) -> tuple[bool, str]:
    """Whether summary, verdicts and record come from one run (and say why not)."""
    summary = json.loads((run_dir / "quality_summary.json").read_text())
    verdicts = [json.loads(line) for line in (run_dir / "rollout_verdicts.jsonl").read_text().splitlines()]
    record = json.loads((run_dir / "quality_summary.provenance.json").read_text())
    ignored = summary["run"]["ignored_checks"]
    if record["parameters"]["ignored_checks"] != ignored:
        return False, f"record ignores {record['parameters']['ignored_checks']}, summary {ignored}"
    counts = {"healthy": 0, "unhealthy": 0, "unobserved": 0}
    for row in verdicts:
        counts[row["verdict"]] += 1
        if any(finding["check"] in ignored for finding in row["findings"]):
            return False, "a verdict row reports a check the summary says was ignored"
    if counts != summary["run"]["verdicts"]:
        return False, f"verdict rows {counts} != summary {summary['run']['verdicts']}"
    return True, ""


@pytest.mark.parametrize("wait", ["0", "30"])
def test_two_health_checks_with_different_parameters_never_leave_a_mix(tmp_path: Path, wait: str) -> None:
    run_dir = tmp_path / "run"
    write_rows(run_dir / "rollouts.jsonl", health_rows(400))
    refused = 0
    for _ in range(REPEATS // 2):
        variants = [
            ["eval", "health-check", str(run_dir), "--direct", "--no-cache"],
            ["eval", "health-check", str(run_dir), "--direct", "--no-cache", "--ignore", "model_call_failed"],
        ]
        processes = [start(args, env=env(GYMFLOW_LOCK_WAIT=wait)) for args in variants]
        results: list[tuple[int, str, str]] = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=60)
            results.append((process.returncode, stdout.decode(), stderr.decode()))
        for code, _, err in results:
            assert "Traceback" not in err
            if code != 0:
                refused += 1
                (message,) = err.strip().splitlines()
                assert "is writing these outputs" in message and "pid " in message, message
        assert any(code == 0 for code, _, _ in results)
        checks = provenance.verify(str(run_dir / "quality_summary.provenance.json"))
        assert all(check.status == "ok" for check in checks), checks
        ok, why = _consistent(run_dir)
        assert ok, why
        assert not list(run_dir.glob(".*.tmp")) and not list(run_dir.glob(".*.lock"))
    if wait == "30":
        assert refused == 0  # the second run waited for the first and then ran in full


def test_two_aggregates_into_one_output_never_leave_a_mix(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    write_rows(shards / "s0.jsonl", health_rows(300))
    out = tmp_path / "out" / "merged.jsonl"
    base = ["eval", "aggregate", "-i", f"{shards}/*.jsonl", "-o", str(out), "--direct", "--no-health-check"]
    variants = [[*base, "--no-cache"], [*base, "--no-cache", "pass_majority={score_field: reward}"]]
    for wait in ("0", "30"):
        processes = [start(args, env=env(GYMFLOW_LOCK_WAIT=wait)) for args in variants]
        outputs = [p.communicate(timeout=60) for p in processes]
        results = [(p.returncode, err.decode()) for p, (_, err) in zip(processes, outputs, strict=True)]
        assert any(code == 0 for code, _ in results)
        for code, err in results:
            assert "Traceback" not in err
            if code != 0:
                assert "is writing these outputs" in err.strip().splitlines()[-1]
        record_url = str(out.parent / "merged.provenance.json")
        assert all(check.status == "ok" for check in provenance.verify(record_url))
        record = json.loads(Path(record_url).read_text())
        metrics = (out.parent / "merged_aggregate_metrics.json").read_text()
        assert (record["parameters"]["pass_majority"] is not None) == ("pass@" in metrics)
