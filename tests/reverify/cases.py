"""Test helpers for ``eval reverify``: the mcqa fixture data, writing inputs, running the CLI in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gymflow.cli import main
from tests.reverify.server_process import ServerProcess, mcqa_rows, write_gym_config

AGENT = "mcqa_simple_agent"
WRONG = ((1, 0), (2, 1))
MISSING = (4, 1)


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        """The last stderr line (warnings may precede it)."""
        lines = self.err.strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def write_jsonl(path: Path, rows: list[dict[str, Any]], *, blank: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    path.write_text(text)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mcqa_fixture() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """5 tasks x 2 rollouts; (4, 1) has no rollout row; two wrong answers: 7 of 9 correct."""
    materialized, rollouts = mcqa_rows(5, 2, wrong=WRONG)
    rollouts = [r for r in rollouts if (r["_ng_task_index"], r["_ng_rollout_index"]) != MISSING]
    return materialized, rollouts


def key(row: dict[str, Any]) -> tuple[int, int]:
    return row["_ng_task_index"], row["_ng_rollout_index"]


class Case:
    """One test's run directory, inputs and CLI."""

    def __init__(self, root: Path, server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self.server = server
        self.capsys = capsys
        self.materialized, self.rollouts = mcqa_fixture()
        self.config_path: Path | None = None

    @property
    def inputs(self) -> Path:
        return self.root / "rollouts_materialized_inputs.jsonl"

    @property
    def rollouts_path(self) -> Path:
        return self.root / "rollouts.jsonl"

    @property
    def output(self) -> Path:
        return self.root / "out.jsonl"

    def path(self, name: str) -> Path:
        return self.root / name

    def write(self) -> None:
        write_jsonl(self.inputs, self.materialized)
        write_jsonl(self.rollouts_path, self.rollouts)

    def config(self, servers: dict[str, Any] | None = None, **kwargs: Any) -> Path:
        self.config_path = write_gym_config(
            self.root / "gym_config.yaml", servers or {"mcqa": self.server}, **kwargs
        )
        return self.config_path

    def cli(self, *args: str) -> Outcome:
        self.capsys.readouterr()
        try:
            code = main(["eval", "reverify", *args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = self.capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    def run(
        self, *extra: str, output: Path | None = None, write: bool = True, direct: bool = True
    ) -> Outcome:
        if write:
            self.write()
        if self.config_path is None:
            self.config()
        args = [
            "--config",
            str(self.config_path),
            "--inputs",
            str(self.inputs),
            "--rollouts",
            str(self.rollouts_path),
            "--output",
            str(output or self.output),
        ]
        return self.cli(*(["--direct"] if direct else []), *args, *extra)

    def out_rows(self, name: str = "out.jsonl") -> list[dict[str, Any]]:
        return read_jsonl(self.root / name)

    def metrics(self, name: str = "out_aggregate_metrics.json") -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = json.loads((self.root / name).read_text())
        return data


@pytest.fixture(name="case")
def case_fixture(
    tmp_path: Path, resources_server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> Iterator[Case]:
    yield Case(tmp_path, resources_server, capsys)
