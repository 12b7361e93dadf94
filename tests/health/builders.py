"""Builders for health-check inputs: the spec's default record and small variations of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from gymflow.health import HealthOptions, run_health

POLICY = {"type": "responses_api_models", "name": "policy"}
JUDGE = {"type": "responses_api_models", "name": "judge"}
TRAJECTORY_IDS = [
    "rollout_missing_agent_turns",
    "rollout_ended_on_failed_model_call",
    "agent_turn_hollow",
    "model_call_zero_completion_tokens",
    "model_call_missing_token_counts",
    "trajectory_capture_mismatch",
    "model_call_failed",
    "rollout_token_count_mismatch",
    "model_call_runaway_generation",
]
BINDING_IDS = [
    "rollout_ended_on_failed_model_call",
    "model_call_zero_completion_tokens",
    "model_call_missing_token_counts",
    "trajectory_capture_mismatch",
    "model_call_failed",
    "rollout_token_count_mismatch",
    "model_call_runaway_generation",
]


def call(
    call_id: str | None = "c1",
    response_id: str | None = "r1",
    status: Any = 200,
    prompt: Any = 3,
    completion: Any = 2,
    response: Any = None,
    model_ref: Any = POLICY,
    started_at: Any = None,
    **metadata: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"response_id": response_id, "model_ref": model_ref, "status_code": status}
    meta.update(metadata)
    return {
        "model_call_id": call_id,
        "started_at": started_at,
        "response": {"output_text": "ok"} if response is None else response,
        "response_metadata": meta,
        "token_stats": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def turn(
    answer: Any = "ok", refs: list[dict[str, Any]] | None = None, turn_no: int = 1, **extra: Any
) -> dict[str, Any]:
    body = {
        "invocation_id": "inv-0",
        "task_id": "t",
        "rollout_id": "t-0",
        "turn_no": turn_no,
        "timestamp": 1.0,
        "answer": answer,
        "step_count": 1,
        "model_calls": [{"model_call_id": "c1"}] if refs is None else refs,
    }
    body.update(extra)
    return body


def trajectory(
    turns: list[dict[str, Any]] | None = None,
    calls: list[dict[str, Any]] | None = None,
    gaps: list[dict[str, Any]] | None = None,
    invocations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "task_id": "t",
        "rollout_id": "t-0",
        "invocations": invocations or [],
        "turns": [turn()] if turns is None else turns,
        "model_calls": [call()] if calls is None else calls,
        "gaps": gaps or [],
    }


def record(
    task: Any = 0, rollout: Any = 0, usage: Any = (3, 2), traj: Any = "default", **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"_ng_task_index": task, "_ng_rollout_index": rollout}
    if usage is not None:
        body["response"] = {"usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}
    if traj == "default":
        body["ng_trajectory"] = trajectory()
    elif traj is not None:
        body["ng_trajectory"] = copy.deepcopy(traj)
    body.update(extra)
    return body


def line(obj: Any) -> str:
    return json.dumps(obj)


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "".join((item if isinstance(item, str) else line(item)) + "\n" for item in lines)
    path.write_bytes(text.encode())
    return path


class Outcome:
    def __init__(self, run_dir: Path) -> None:
        self.summary_bytes = (run_dir / "quality_summary.json").read_bytes()
        self.verdict_bytes = (run_dir / "rollout_verdicts.jsonl").read_bytes()
        self.summary = json.loads(self.summary_bytes)
        self.rows = [json.loads(item) for item in self.verdict_bytes.decode().splitlines()]

    @property
    def run(self) -> dict[str, Any]:
        return self.summary["run"]  # type: ignore[no-any-return]

    def row(self, index: int = 0) -> dict[str, Any]:
        return self.rows[index]  # type: ignore[no-any-return]

    def checks(self, index: int = 0) -> list[str]:
        return [item["check"] for item in self.rows[index]["findings"]]

    def findings(self, check: str, index: int = 0) -> list[dict[str, Any]]:
        return [item for item in self.rows[index]["findings"] if item["check"] == check]


def health(tmp_path: Path, lines: list[Any], workers: int = 1, ignore: Any = None) -> Outcome:
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_lines(run_dir / "rollouts.jsonl", lines)
    run_health(
        HealthOptions(
            (str(run_dir / "rollouts.jsonl"),), workers=workers, ignored_checks=ignore, use_cache=False
        )
    )
    return Outcome(run_dir)
