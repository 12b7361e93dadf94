"""The summary's bytes (orjson, the json module's where orjson refuses) and its shared task entries."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from gymflow import health
from gymflow.health._report import summary_bytes


def test_summary_bytes_are_the_json_modules_indented_bytes() -> None:
    summary = {
        "run": {"ignored_checks": [], "empty": {}, "n": 2**63, "text": 'é東\u2028\x7f\x01\n"\\'},
        "tasks": {"10": {"flags": []}, "naïve": {"flags": ["x"]}},
    }
    assert summary_bytes(summary) == json.dumps(summary, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]
    big = {"run": {"tokens": {"prompt": 2**70}}, "tasks": {"é": {"flags": []}}}  # beyond orjson's integers
    assert summary_bytes(big) == json.dumps(big, indent=2, ensure_ascii=False).encode()  # type: ignore[arg-type]


def test_tasks_with_equal_entries_share_one_entry(tmp_path: Path) -> None:
    rows = [
        {"_ng_task_index": task, "_ng_rollout_index": rollout, "response": {"usage": {}}}
        for task in range(50)
        for rollout in range(2 + task % 2)
    ]
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    outcome = health.run_health(health.HealthOptions((str(path),), workers=1, use_cache=False))
    tasks = outcome.summary["tasks"]
    assert len(tasks) == 50 and len({id(entry) for entry in tasks.values()}) == 2
    assert tasks["0"] == {"repeats": 2, "healthy": 0, "unhealthy": 0, "unobserved": 2, "flags": []}
    assert tasks["1"]["repeats"] == 3
    assert (tmp_path / "quality_summary.json").read_bytes() == summary_bytes(outcome.summary)  # type: ignore[arg-type]
