"""Builders for aggregate tests: rows of the spec's worked examples and shard files."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gymflow.aggregate import RowFacts, ScoreSpec, extract


def usage(output_tokens: int) -> dict[str, Any]:
    return {"usage": {"output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0}}}


def row(task: int, rollout: int, reward: Any, **extra: Any) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": reward, **extra}


def facts(rows: Iterable[dict[str, Any]], spec: ScoreSpec | None = None) -> list[RowFacts]:
    return [extract(r, spec) for r in rows]


W1 = [
    row(0, 0, 1.0, correct=True, extracted_answer="B", response=usage(4)),
    row(0, 1, 0.0, correct=False, extracted_answer="C", response=usage(6)),
    row(1, 0, 1.0, correct=True, extracted_answer="A", response=usage(5)),
    row(1, 1, 1.0, correct=True, extracted_answer="A", response=usage(7)),
]


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]], trailer: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + trailer)
    return path


def mcqa_rows(agent: str = "mcqa_simple_agent", tasks: int = 5, repeats: int = 2) -> list[dict[str, Any]]:
    """A small mcqa-like run: rewards alternate, each row with usage."""
    return [
        row(t, r, float((t + r) % 2 == 0), agent_ref={"name": agent}, response=usage(10 + t + r))
        for t in range(tasks)
        for r in range(repeats)
    ]
