"""Minimal ATIF trajectories, materialized rows and manifests for the ATIF tests."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Doc = dict[str, Any]


def text_trajectory(answer: str = "A", *, trajectory_id: str | None = "t1", **root: Any) -> Doc:
    """A user question and one agent answer (step 2)."""
    doc: Doc = {
        "schema_version": "ATIF-v1.7",
        "session_id": "s1",
        "trajectory_id": trajectory_id,
        "agent": {"name": "relay-agent", "version": "1.0", "model_name": "m"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Which letter?"},
            {"step_id": 2, "source": "agent", "message": answer},
        ],
    }
    doc.update(root)
    return doc


def tool_trajectory(**root: Any) -> Doc:
    """Item 63: reasoning, two calls, results in reverse order (one via ``extra.tool_result``),
    then a final answer."""
    doc = text_trajectory(**root)
    doc["steps"] = [
        {"step_id": 1, "source": "user", "message": "Weather?"},
        {
            "step_id": 2,
            "source": "agent",
            "message": "",
            "reasoning_content": "look it up",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "weather", "arguments": {"city": "Zürich", "a": 1}},
                {"tool_call_id": "c2", "function_name": "time", "arguments": {}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "c2", "content": [{"type": "text", "text": "noon"}]},
                    {"source_call_id": "c1", "extra": {"tool_result": {"temp": 20}}},
                ]
            },
        },
        {"step_id": 3, "source": "agent", "message": "\\boxed{A}"},
    ]
    return doc


def changed(doc: Doc, edit: Callable[[Doc], Any]) -> Doc:
    """A deep copy of ``doc`` with ``edit`` applied."""
    result = copy.deepcopy(doc)
    edit(result)
    return result


def materialized_row(task: int = 0, rollout: int = 0, **fields: Any) -> Doc:
    row: Doc = {
        "responses_create_params": {"input": [{"role": "user", "content": "Which letter?"}]},
        "agent_ref": {"name": "mcqa_simple_agent"},
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "options": [{"A": "yes"}, {"B": "no"}],
        "expected_answer": "A",
        "grading_mode": "lenient_boxed",
    }
    row.update(fields)
    return row


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    path.write_text("".join(dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_json(path: Path, doc: Any) -> Path:
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_row(path: str, task: int = 0, rollout: int = 0, sha: str | None = None) -> Doc:
    row: Doc = {"trajectory_path": path, "_ng_task_index": task, "_ng_rollout_index": rollout}
    if sha is not None:
        row["expected_sha256"] = sha
    return row
