"""Shared pieces of the reliability tests: generated runs, the CLI as a real process, process trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from tests.health.builders import call, record, trajectory

CLI = [sys.executable, "-c", "import sys; from gymflow.cli import main; sys.exit(main())"]


def health_rows(count: int, *, failed_every: int = 3, padding: int = 0) -> list[dict[str, Any]]:
    """Rollouts of which every ``failed_every``-th has a failed model call (model_call_failed)."""
    rows = []
    for index in range(count):
        status = 500 if index % failed_every == 0 else 200
        row = record(task=index // 2, rollout=index % 2, traj=trajectory(calls=[call(status=status)]))
        if padding:
            row["payload"] = "x" * padding
        rows.append(row)
    return rows


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path


def env(**extra: str) -> dict[str, str]:
    out = dict(os.environ)
    out.pop("GYMFLOW_CONFIG", None)
    out.update(extra)
    return out


def start(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """The gymflow CLI as a process of its own (its own session, so signals reach only it)."""
    kwargs.setdefault("env", env())
    return subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        **kwargs,
    )


def run(args: Sequence[str], timeout: float = 60, **kwargs: Any) -> tuple[int, str, str]:
    process = start(args, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out.decode(), err.decode()


def same_session_descendants(pid: int) -> list[psutil.Process]:
    """Descendants of ``pid`` that belong to its session (a server started in a session of its
    own, such as gymflow's kept local Prefect server, is meant to outlive the command)."""
    try:
        root = psutil.Process(pid)
        session = os.getsid(pid)
        found = []
        for child in root.children(recursive=True):
            try:
                if os.getsid(child.pid) == session:
                    found.append(child)
            except OSError:
                continue
        return found
    except psutil.Error:
        return []


def alive(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    out = []
    for item in processes:
        try:
            if item.is_running() and item.status() != psutil.STATUS_ZOMBIE:
                out.append(item)
        except psutil.Error:
            continue
    return out


def wait_gone(processes: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Processes of ``processes`` still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = alive(processes)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = alive(left)
    return left


def kill_all(processes: Sequence[psutil.Process]) -> None:
    for item in alive(processes):
        try:
            item.kill()
        except psutil.Error:
            pass


def wait_for(predicate: Any, timeout: float, interval: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def temp_files(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp") or ".parts-" in name)


def strict_json(text: str | bytes) -> Any:
    """json.loads that refuses NaN / Infinity (what 'parses as JSON' means here)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=refuse)
