"""The core never imports Prefect, Hydra or the CLI (ARCHITECTURE.md, "Rules")."""

from __future__ import annotations

import subprocess
import sys
import textwrap


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
