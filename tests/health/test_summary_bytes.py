"""The summary's bytes (orjson, the json module's where orjson refuses) and its tasks, streamed."""

from __future__ import annotations

import json
import math
import os
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow import health
from gymflow.health import _ranges, _tasks
from gymflow.health._report import summary_bytes
from tests.health.builders import call, record, trajectory, turn, write_lines


def test_summary_bytes_are_the_json_modules_indented_bytes() -> None:
    summary = {
        "run": {"ignored_checks": [], "empty": {}, "n": 2**63, "text": 'é東\u2028\x7f\x01\n"\\'},
        "tasks": {"10": {"flags": []}, "naïve": {"flags": ["x"]}},
    }
    assert summary_bytes(summary) == json.dumps(summary, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]
    big = {"run": {"tokens": {"prompt": 2**70}}, "tasks": {"é": {"flags": []}}}  # beyond orjson's integers
    assert summary_bytes(big) == json.dumps(big, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def test_tasks_spilled_in_runs_are_written_in_the_summarys_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "RUN_TASKS", 3)  # many spilled runs of integer and text tasks
    tasks: list[object] = [*range(25), -3, "5", "b", "a", "10x", "__x", "é", "12"]
    rows = [
        {"_ng_task_index": task, "_ng_rollout_index": rollout, "response": {"usage": {}}}
        for task in tasks
        for rollout in range(3 if task in ("5", "12") else 1 + (isinstance(task, int) and task % 2))
    ]
    outcome = health.run_health(
        health.HealthOptions((str(_write(tmp_path / "rollouts.jsonl", rows)),), workers=1, use_cache=False)
    )
    summary = outcome.summary
    ints = sorted((task for task in tasks if isinstance(task, int)), key=str)
    texts = sorted(task for task in tasks if isinstance(task, str) and task not in ("5", "12"))
    assert list(summary["tasks"]) == [str(task) for task in ints] + texts
    # A text task with an integer task's text takes its place, with the text task's entry.
    assert summary["tasks"]["5"]["repeats"] == 3 and summary["tasks"]["12"]["repeats"] == 3
    assert summary["tasks"]["13"]["repeats"] == 2
    assert summary["run"]["artifacts"]["records"] == len(rows)
    written = (tmp_path / "quality_summary.json").read_bytes()
    assert written == summary_bytes(summary) == json.dumps(summary, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]
    assert list(Path(tempfile.gettempdir()).glob(f"gymflow-tasks-{os.getpid()}-*")) == []


def test_a_summary_without_tasks() -> None:
    summary: dict[str, Any] = {"run": {"ignored_checks": []}, "tasks": {}}
    assert summary_bytes(summary) == json.dumps(summary, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]


def test_the_parent_holds_no_task_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tasks, "RUN_TASKS", 1_000)

    def peak(count: int) -> int:
        rows = [{"_ng_task_index": task, "response": {"usage": {}}} for task in range(count)]
        path = _write(tmp_path / f"rollouts-{count}.jsonl", rows)
        # Two ranges, each sorted in a worker: the parent only merges.
        monkeypatch.setattr(_ranges, "RANGE_BYTES", math.ceil(path.stat().st_size / 2))
        tracemalloc.start()
        try:
            health.run_health(health.HealthOptions((str(path),), str(tmp_path), workers=2, use_cache=False))
            _, traced = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return traced

    small, large = peak(2_000), peak(20_000)
    # Held in the parent (and in the summary's bytes), the 18,000 more tasks would take 4 MB.
    assert large < small + 1_000_000, (small, large)


def test_verdict_lines_are_the_json_modules_compact_bytes(tmp_path: Path) -> None:
    odd = 'é東\u2028\x7f\x01\n"\\'
    calls = [call("c1", "r1", prompt=2**64 - 1), call("c2", "r2", prompt=2**64 - 1)]
    # Their prompt tokens add up to an integer beyond orjson's (the token-count mismatch's detail).
    big = trajectory(turns=[turn(refs=[{"model_call_id": "c1"}, {"model_call_id": "c2"}])], calls=calls)
    rows = [
        record(odd, 0),
        record(f"{odd}-2", 0, traj=big),
        record(7, 1, traj=trajectory(calls=[call(status=503, error_category=odd)])),
    ]
    outcome = health.run_health(
        health.HealthOptions((str(write_lines(tmp_path / "rollouts.jsonl", rows)),), use_cache=False)
    )
    lines = Path(outcome.verdicts_url).read_bytes().split(b"\n")
    assert lines.pop() == b"" and len(lines) == 3
    for item in lines:
        assert item == json.dumps(json.loads(item), ensure_ascii=False, separators=(",", ":")).encode()
    assert any(str(2 * (2**64 - 1)).encode() in item for item in lines)
