"""The core never imports Prefect, Hydra or the CLI (ARCHITECTURE.md, "Rules")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_core_modules_import_no_orchestrator() -> None:
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import gymflow
        names = []
        for info in pkgutil.walk_packages(gymflow.__path__, "gymflow."):
            if info.name.split(".")[1] in {"cli", "flows", "tasks", "conf"}:
                continue
            importlib.import_module(info.name)
            names.append(info.name)
        assert len(names) > 10, names
        banned = {"prefect", "hydra", "omegaconf", "typer"}
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in banned)
        print(len(names), leaked)
        assert not leaked, leaked
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_atif_does_not_import_reverify() -> None:
    """``gymflow.reverify`` imports ``gymflow.atif`` for ATIF input; never the other way round."""
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import gymflow.atif
        for info in pkgutil.walk_packages(gymflow.atif.__path__, "gymflow.atif."):
            importlib.import_module(info.name)
        leaked = sorted(m for m in sys.modules if m.startswith("gymflow.reverify"))
        assert not leaked, leaked
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_flows_and_tasks_do_not_import_the_cli() -> None:
    """Flows and tasks (deployments included) build on the core, never on the CLI."""
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import gymflow.flows, gymflow.tasks
        for package in (gymflow.flows, gymflow.tasks):
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                importlib.import_module(info.name)
        leaked = sorted(m for m in sys.modules if m.startswith("gymflow.cli"))
        assert not leaked, leaked
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_an_aggregate_without_health_check_imports_no_other_command(tmp_path: Path) -> None:
    """``eval aggregate --direct --no-health-check`` imports neither the health check, the healthy
    metrics nor the join (together about 0.1 s of every such run): the pipeline imports each where
    a step runs it. (Reverify's options type a field of the post flow's parameters, so it stays.)"""
    shard = tmp_path / "a.jsonl"
    shard.write_text('{"_ng_task_index":0,"_ng_rollout_index":0,"reward":1.0}\n')  # compact, as merged
    script = textwrap.dedent(
        f"""
        import sys
        from gymflow.cli import main
        status = main(["eval", "aggregate", "--input-glob", {str(shard)!r},
                       "--output", {str(tmp_path / "out" / "merged.jsonl")!r},
                       "--direct", "--no-cache", "--no-health-check"])
        assert status == 0, status
        commands = ("gymflow.health", "gymflow.healthy", "gymflow.join")
        print(sorted(m for m in sys.modules if m.startswith(commands)))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout
    assert (tmp_path / "out" / "merged.jsonl").read_text() == shard.read_text()
