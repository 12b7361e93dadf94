"""The native reverify example (examples/reverify/README.md) does what its README says: the
walk-through's commands, run as written (each with --direct, the first also in the default Prefect
mode), score the rows the README's table states, with the grader launched from a stock-form config
and the reward changing with ``grading_mode``."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from gymflow.cli import main
from tests.reverify.server_process import REPO_ROOT

pytestmark = pytest.mark.timeout(120)

EXAMPLE = REPO_ROOT / "examples" / "reverify"
README = (EXAMPLE / "README.md").read_text()
TABLE_ROW = re.compile(r"^\| `(rescored/\w+\.jsonl)` \| (\d+) of (\d+) \| ([0-9.]+) \|$", re.MULTILINE)


def commands() -> list[list[str]]:
    """The ``gymflow ...`` commands of the README's bash block, continuation lines joined."""
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


def table() -> dict[str, tuple[int, int, float]]:
    return {m[1]: (int(m[2]), int(m[3]), float(m[4])) for m in TABLE_ROW.finditer(README)}


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(argv: list[str], *extra: str) -> int:
    assert argv[:3] == ["gymflow", "eval", "reverify"]
    try:
        return main([*argv[1:], *extra])
    except SystemExit as exc:
        return int(exc.code or 0)


def output_of(argv: list[str]) -> str:
    return argv[argv.index("--output") + 1]


@pytest.fixture
def repo_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example where the README runs it from (the repository root), in a copy."""
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "reverify", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEMO_GYM_EXTRA_ROOTS", raising=False)
    return tmp_path


def test_the_walk_through_changes_the_reward_as_the_readme_says(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    walk_through, expected = commands(), table()
    assert len(walk_through) == 2 and sorted(expected) == sorted(output_of(c) for c in walk_through)
    means = []
    for argv in walk_through:
        assert run(argv, "--direct") == 0, capsys.readouterr()
        out = capsys.readouterr().out
        output = repo_copy / output_of(argv)
        ones, total, mean = expected[output_of(argv)]
        rows = read_rows(output)
        assert len(rows) == total and sum(r["reward"] for r in rows) == ones
        assert sum(r["reward"] for r in rows) / len(rows) == mean
        metrics = json.loads(output.with_name(output.stem + "_aggregate_metrics.json").read_text())
        assert [e["agent_ref"]["name"] for e in metrics] == ["quiz_simple_agent"]
        assert metrics[0]["agent_metrics"]["mean/reward"] == mean
        assert "Key metrics for quiz_simple_agent:" in out and f'"mean/reward": {mean}' in out
        assert "Starting resources server 'quiz' on http://127.0.0.1:" in out
        record = json.loads(output.with_suffix(".provenance.json").read_text())
        assert [s["settings"] for s in record["verifier"]["resources_servers"]] == ["launched"]
        mode = "lenient" if any("grading_mode=lenient" in a for a in argv) else "boxed"
        assert {r["grading_mode"] for r in rows} == {mode}
        means.append(mean)
    assert means[0] != means[1]  # the reward changed
    # "The first run reproduces the stored rewards"
    stored = read_rows(repo_copy / "examples" / "reverify" / "rollouts.jsonl")
    boxed = read_rows(repo_copy / output_of(walk_through[0]))
    key = lambda r: (r["_ng_task_index"], r["_ng_rollout_index"])  # noqa: E731
    assert {key(r): r["reward"] for r in boxed} == {key(r): r["reward"] for r in stored}
    # "--resume into rescored/boxed.jsonl with the lenient setting is refused"
    lenient = walk_through[1]
    resumed = [*lenient[: lenient.index("--output") + 1], output_of(walk_through[0])]
    assert run(resumed, "--resume", "--direct") == 1
    assert "Error: Cannot resume: " in capsys.readouterr().err


def test_the_first_command_in_the_default_prefect_mode(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = commands()[0]
    assert run(argv) == 0, capsys.readouterr()
    assert "Flow run: http" in capsys.readouterr().err
    ones, total, mean = table()[output_of(argv)]
    rows = read_rows(repo_copy / output_of(argv))
    assert len(rows) == total and sum(r["reward"] for r in rows) == ones
