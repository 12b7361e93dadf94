"""Declared dependencies match the imports: every third-party module the code imports comes from a
distribution pyproject declares (runtime for gymflow/, flows/, tasks/, config/; runtime or test extra for
tests/ and bench/), and every declared distribution is imported somewhere or named below with the
reason it is needed without an import."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"gymflow", "tests", "bench", "flows", "tasks", "config"}

# Declared, yet never imported by name: why each is needed.
NOT_IMPORTED = {
    "s3fs": "fsspec's s3:// backend, loaded by fsspec from the URL's protocol",
    "pytest-timeout": "pytest plugin (the timeout setting in pyproject)",
    "pytest-xdist": "pytest plugin (-n 2 in pyproject's addopts)",
    "ruff": "lint tool run by .ci/run and pre-commit",
    "mypy": "type checker run by .ci/typecheck",
    "pre-commit": "runs the lint and type hooks",
}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _declared() -> tuple[set[str], set[str], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = {_name(r) for r in project["dependencies"]}
    return runtime, {_name(r) for r in extras["test"]}, {_name(r) for r in extras["dask"]}


def _imported(roots: Iterable[str]) -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it."""
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@cache
def _module_distributions() -> dict[str, list[str]]:
    return dict(packages_distributions())  # scans every installed distribution: once


def _distributions(module: str) -> set[str]:
    return {_name(d) for d in _module_distributions().get(module, [])}


def _undeclared(imports: dict[str, set[str]], allowed: set[str]) -> dict[str, list[str]]:
    return {
        module: sorted(files) for module, files in imports.items() if not _distributions(module) & allowed
    }


def test_the_core_imports_only_runtime_dependencies() -> None:
    runtime, _, dask = _declared()
    imports = _imported(["gymflow", "flows", "tasks", "config"])
    # prefect_dask is imported only when the config asks for the Dask runner (the dask extra).
    assert _undeclared(imports, runtime | dask) == {}


def test_tests_and_benchmarks_import_only_declared_dependencies() -> None:
    runtime, test, _ = _declared()
    assert _undeclared(_imported(["tests", "bench"]), runtime | test) == {}


def test_every_declared_dependency_is_used() -> None:
    runtime, test, dask = _declared()
    imported = set().union(
        *(_distributions(m) for m in _imported(["gymflow", "flows", "tasks", "config", "tests", "bench"]))
    )
    unused = sorted((runtime | test | dask) - imported - set(NOT_IMPORTED))
    assert unused == []
