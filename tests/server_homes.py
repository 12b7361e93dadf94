"""Helpers for tests of the local Prefect server: environments with their own ``PREFECT_HOME``
and port, ``gymflow`` in a subprocess, and what answers on a port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

DEFAULT_PORT_AS = (
    "import sys\n"
    "from gymflow.flows import _server\n"
    "_server.DEFAULT_PORT = int(sys.argv[1])\n"
    "from gymflow.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)
"""``gymflow`` with 4200 replaced by ``argv[1]`` as the port nobody set: the machine's real 4200
is not the tests' to take."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def home_env(home: Path, port: int | None) -> dict[str, str]:
    """This process's environment with its own Prefect home and, when given, the port set."""
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    env.pop("CI", None)
    env.pop("PREFECT_SERVER_API_PORT", None)
    if port is not None:
        env["PREFECT_SERVER_API_PORT"] = str(port)
    return env


def gymflow_command(args: list[str], default_port: int | None = None) -> list[str]:
    if default_port is None:
        return [sys.executable, "-m", "gymflow.cli", *args]
    return [sys.executable, "-c", DEFAULT_PORT_AS, str(default_port), *args]


def gymflow(
    args: list[str], env: dict[str, str], default_port: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gymflow_command(args, default_port), env=env, capture_output=True, text=True, timeout=180
    )


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def served_home(port: int) -> str | None:
    """The ``PREFECT_HOME`` the Prefect server on ``port`` serves, per its settings."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/api/admin/settings", timeout=5)
    except httpx.HTTPError:
        return None
    return response.json().get("home") if response.status_code == 200 else None


def start_prefect_server(home: Path, port: int, timeout_s: float = 120) -> subprocess.Popen[bytes]:
    """``prefect server start`` by hand (not by gymflow) for ``home``, answering on ``port``."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "by-hand.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
            + ["--port", str(port), "--log-level", "WARNING", "--no-services"],
            env=home_env(home, None),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while served_home(port) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            end(process)
            raise AssertionError((home / "by-hand.log").read_text()[-3000:])
        time.sleep(0.2)
    return process


def end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait(timeout=20)
