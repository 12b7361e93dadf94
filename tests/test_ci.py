"""The README's test command is what ``.ci/run`` runs, with the gate of ``.pre-commit-config.yaml``
(ruff check, ruff format, mypy through ``.ci/typecheck``) between install and tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert len(blocks) == 2, "the README keeps exactly two commands"
    return str(blocks[1])


def _ci_steps() -> list[str]:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    return [
        line for line in lines if line and not line.startswith("#") and not line.startswith(("set ", "cd "))
    ]


def test_ci_runs_the_readme_test_command_around_the_gate() -> None:
    install, tests = (part.strip() for part in _readme_test_command().split("&&"))
    assert install == "pip install -c constraints.txt -e '.[test]'"
    gate = ["ruff check .", "ruff format --check .", ".ci/typecheck"]
    assert _ci_steps() == [".ci/system-deps", install, *gate, tests]


def test_pre_commit_runs_the_same_gate_with_the_environments_tools() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "local"
    entries = {hook["id"]: hook["entry"] for hook in repo["hooks"]}
    assert entries == {
        "ruff-check": "ruff check --force-exclude",
        "ruff-format": "ruff format --force-exclude",
        "mypy": ".ci/typecheck",
    }
    assert {hook["language"] for hook in repo["hooks"]} == {"unsupported"}


def test_constraints_pin_every_package_of_the_test_install() -> None:
    lines = [line for line in (REPO / "constraints.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9._-]+==[^=\s]+", line) for line in lines)
    pinned = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in lines}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    names = {
        re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ]", item, maxsplit=1)[0]).lower() for item in declared
    }
    assert names - pinned == set(), "re-resolve constraints.txt after changing pyproject's dependencies"
    assert "gymflow" not in pinned


def test_the_editable_install_wrote_the_bytecode_of_the_modules_a_command_starts_with() -> None:
    """setup.py's hook: with PYTHONDONTWRITEBYTECODE set, nothing else writes it (the install this
    suite runs after is the README's editable one)."""
    import importlib.util

    import gymflow.cli
    import gymflow.executor

    for module in (gymflow, gymflow.cli, gymflow.executor):
        assert module.__file__ is not None
        assert Path(importlib.util.cache_from_source(module.__file__)).is_file(), module.__name__
