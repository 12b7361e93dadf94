"""Orchestrated runs keep the rows of their stored results in files beside the result store
(:mod:`gymflow.kept`), so the flow holds names, not rows; a cached result whose files are gone
is computed again, and the reports do not change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gymflow.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"
REPORTS = (
    "rollouts.jsonl",
    "rollouts_aggregate_metrics.json",
    "quality_summary.json",
    "rollout_verdicts.jsonl",
)


def _post(run: Path, *flags: str) -> None:
    assert main(["eval", "post", str(run), *flags]) == 0


def test_stored_results_name_kept_files_and_lost_ones_are_computed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "results"
    settings = tmp_path / "gymflow.yaml"
    settings.write_text(f"prefect:\n  result_store: {store}\n")
    monkeypatch.setenv("GYMFLOW_CONFIG", str(settings))
    direct, run = tmp_path / "direct", tmp_path / "run"
    for target in (direct, run):
        shutil.copytree(EXAMPLE / "shards", target / "shards")
    _post(direct, "--direct")
    _post(run)
    expected = {name: (direct / name).read_bytes() for name in REPORTS}
    assert {name: (run / name).read_bytes() for name in REPORTS} == expected

    kept = store / "gymflow-kept"
    entries = sorted(path.name for path in kept.iterdir())
    ranges = [name for name in entries if name.startswith("health-range-")]
    shards = [name for name in entries if name.startswith("aggregate-shard-")]
    assert ranges and len(shards) == 2, entries
    assert not [name for name in entries if name.startswith("gymflow-kept-")]  # no staging left
    assert all(any((kept / name).iterdir()) for name in ranges + shards)

    # The cached results stay; the files of one range and one shard go, and so do the reports.
    untouched = {name: (kept / name).stat().st_ino for name in (ranges[-1], shards[0])}
    shutil.rmtree(kept / ranges[0])
    shutil.rmtree(kept / shards[1])
    for name in REPORTS:
        (run / name).unlink()
    capsys.readouterr()
    _post(run)
    assert {name: (run / name).read_bytes() for name in REPORTS} == expected
    assert (kept / ranges[0]).is_dir() and (kept / shards[1]).is_dir()
    # The others were cache hits, read from their kept files (a recomputed result is a new directory).
    if ranges[-1] != ranges[0]:
        assert (kept / ranges[-1]).stat().st_ino == untouched[ranges[-1]]
    assert (kept / shards[0]).stat().st_ino == untouched[shards[0]]
