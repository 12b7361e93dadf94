"""Every user error prints the same one line in the default (Prefect) mode as with ``--direct``:
no Prefect log, no traceback, the same exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gymflow.cli import main


def _row(task: int, rollout: int, **extra: object) -> str:
    return json.dumps({"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": 1.0, **extra})


def _write(path: Path, *lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _no_shards(root: Path) -> list[str]:
    return ["eval", "aggregate", "-i", str(root / "none-*.jsonl"), "-o", str(root / "o" / "m.jsonl")]


def _malformed_shard(root: Path) -> list[str]:
    _write(root / "s" / "a.jsonl", _row(0, 0), "{not json")
    return ["eval", "aggregate", "-i", str(root / "s" / "*.jsonl"), "-o", str(root / "o" / "m.jsonl")]


def _duplicate_rollouts(root: Path) -> list[str]:
    _write(root / "s" / "a.jsonl", _row(0, 0, agent_ref={"name": "x"}))
    _write(root / "s" / "b.jsonl", _row(0, 0, agent_ref={"name": "x"}))
    return ["eval", "aggregate", "-i", str(root / "s" / "*.jsonl"), "-o", str(root / "o" / "m.jsonl")]


def _join_not_an_object(root: Path) -> list[str]:
    _write(root / "run" / "rollouts.jsonl", _row(0, 0), "[1, 2]")
    return ["eval", "join", str(root / "run"), "--no-capture"]


def _post_without_rollouts(root: Path) -> list[str]:
    (root / "empty").mkdir()
    return ["eval", "post", str(root / "empty")]


def _reverify_without_response(root: Path) -> list[str]:
    _write(root / "inputs.jsonl", _row(0, 0, agent_ref={"name": "a"}))
    _write(root / "rollouts.jsonl", _row(0, 0, agent_ref={"name": "a"}))
    _write(root / "cfg.yaml", "mcqa:", "  resources_servers:", "    mcqa: {host: 127.0.0.1, port: 9}")
    return [
        "eval", "reverify", "--config", str(root / "cfg.yaml"), "--inputs", str(root / "inputs.jsonl"),
        "--rollouts", str(root / "rollouts.jsonl"), "--output", str(root / "out.jsonl"),
    ]  # fmt: skip


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "aggregate, no shards": (_no_shards, "Error: No shards matched input_glob="),
    "aggregate, malformed line": (_malformed_shard, "Error: Malformed JSON in "),
    "aggregate, duplicate rollouts": (_duplicate_rollouts, "Error: Duplicate rollout (group 'x', task 0"),
    "join, line not an object": (_join_not_an_object, "gymflow eval join: error: "),
    "post, nothing to do": (_post_without_rollouts, "Error: no rollouts in "),
    "reverify, no response": (_reverify_without_response, "Error: reverify: rollout (task 0, rollout 0)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_in_both_modes(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build, start = CASES[case]
    # A first start of the local server prints a line of its own (progress): start it beforehand,
    # in a process of its own (importing Prefect here would fix its log level before the CLI does).
    ui = [sys.executable, "-m", "gymflow.cli", "ui"]
    started = subprocess.run(ui, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    results = []
    for mode in ("direct", "default"):
        root = tmp_path / mode
        root.mkdir()
        args = build(root)
        code = main([*args, "--direct"] if mode == "direct" else args)
        err = capsys.readouterr().err.replace(str(root), "ROOT")
        results.append((code, err))
    (direct_code, direct_err), (default_code, default_err) = results
    assert direct_code == default_code != 0
    assert direct_err.startswith(start), direct_err
    assert direct_err.count("\n") == 1, direct_err
    assert default_err == direct_err
