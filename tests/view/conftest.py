"""Runs to view: the example run after ``eval post --direct``, and a re-verified run made against
the real ``/verify`` test server (one reward flipped each way, one judge failure)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gymflow.cli import main
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import gym_config, mcqa_rows, start_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"


def post_example(target: Path) -> Path:
    """A copy of examples/post_run after ``eval post --direct``."""
    shutil.copytree(EXAMPLE / "shards", target / "shards")
    assert main(["eval", "post", str(target), "--direct"]) == 0
    return target


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return post_example(tmp_path_factory.mktemp("view") / "example-run")


def post_reverified(target: Path) -> Path:
    """Ten mcqa rollouts, re-verified by ``eval post``: (1, 0) drops from 1.0 to 0.0, (2, 1)
    rises from 0.0 to 1.0, (3, 1) is a judge failure in the sidecar."""
    materialized, rollouts = mcqa_rows(5, 2, wrong=[(1, 0)])
    for row in rollouts:
        if (row["_ng_task_index"], row["_ng_rollout_index"]) == (2, 1):
            row["reward"] = 0.0
    write_jsonl(target / "shards" / "rollouts_shard_0.jsonl", rollouts[:5])
    write_jsonl(target / "shards" / "rollouts_shard_1.jsonl", rollouts[5:])
    write_jsonl(target / "rollouts_materialized_inputs.jsonl", materialized)
    with start_server(log_dir=target.parent) as server:
        config = target.parent / "post.yaml"
        config.write_text(yaml.safe_dump({**gym_config({"mcqa": server}), "reverify": {"enabled": True}}))
        server.set((3, 1), kind="judge_failed")
        assert main(["eval", "post", str(target), "--config", str(config), "--direct"]) == 0
    return target


@pytest.fixture(scope="module")
def reverified_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield post_reverified(tmp_path_factory.mktemp("view-reverify") / "run")


@dataclass
class Viewing:
    base: str
    """``http://127.0.0.1:PORT``"""
    port: int
    query: str
    """``run=<the run's URI>``, as every link carries it"""
    process: subprocess.Popen[str]

    def url(self, path: str = "/") -> str:
        return f"{self.base}{path}{'&' if '?' in path else '?'}{self.query}"


@contextmanager
def viewing(run: Path, port: int = 0) -> Iterator[Viewing]:
    """``gymflow view RUN --port PORT`` (0: a free one) in a process of its own, stopped by SIGINT
    (Ctrl-C) at the end (its exit status and stderr are left on ``process`` for the caller)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gymflow.cli", "view", str(run), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"gymflow view: (http://127\.0\.0\.1:(\d+))/\?(run=\S+)\n", line)
        assert match, (line, process.stderr.read() if process.poll() is not None and process.stderr else "")
        yield Viewing(match.group(1), int(match.group(2)), match.group(3), process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
