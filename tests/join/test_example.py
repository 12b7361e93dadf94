"""The raw example run (examples/raw_run) is what the generator writes, and joins as documented."""

from __future__ import annotations

import filecmp
from pathlib import Path

from bench.join_corpus import write_run
from gymflow.join import resolve_settings, run_join

EXAMPLE = Path(__file__).parents[2] / "examples" / "raw_run"


def test_example_is_generated(tmp_path: Path) -> None:
    write_run(tmp_path, 16, 0, 3, 300, variants=True)
    assert (tmp_path / "rollouts.jsonl").read_bytes() == (EXAMPLE / "rollouts.jsonl").read_bytes()
    names = sorted(p.name for p in (tmp_path / "model-calls").iterdir())
    assert names == sorted(p.name for p in (EXAMPLE / "model-calls").iterdir())
    match, mismatch, errors = filecmp.cmpfiles(
        tmp_path / "model-calls", EXAMPLE / "model-calls", names, shallow=False
    )
    assert (mismatch, errors) == ([], [])


def test_example_joins_with_one_gap_of_each_kind(tmp_path: Path) -> None:
    result = run_join(resolve_settings(str(EXAMPLE), output=str(tmp_path / "joined.jsonl")))
    summary = result.summary
    assert (summary["rows"], summary["merged"], summary["projected"], summary["projection_failed"]) == (
        16,
        15,
        14,
        1,
    )
    assert summary["gap_counts"] == {
        "model_call_capture_incomplete": 1,
        "model_call_capture_no_records": 1,
        "model_call_capture_records_unreadable": 1,
        "model_call_ownership_unavailable": 1,
        "model_call_reference_unmatched": 3,
        "model_calls_unavailable": 1,
        "trajectory_projection_failed": 1,
        "turns_unavailable": 1,
    }
