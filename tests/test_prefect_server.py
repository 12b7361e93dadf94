"""The local Prefect server gymflow starts on first use, reuses, and stops with ``gymflow ui --stop``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _gymflow(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *args], env=env, capture_output=True, text=True, timeout=180
    )


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_ui_starts_reuses_and_stops_the_local_server(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "PREFECT_SERVER_API_PORT": str(port)}
    env.pop("PREFECT_API_URL", None)
    # A pid file left by a server that died (kill -9, reboot) must not block the start.
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "server.pid").write_text("999999")
    try:
        first = _gymflow(["ui"], env)
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines()[0] == f"Prefect UI (started): http://127.0.0.1:{port}"
        pid = int((tmp_path / "home" / "server.pid").read_text())
        assert pid != 999999 and _listening(port)
        second = _gymflow(["ui"], env)
        assert second.stdout.splitlines()[0] == f"Prefect UI (running): http://127.0.0.1:{port}"
        assert int((tmp_path / "home" / "server.pid").read_text()) == pid
    finally:
        stopped = _gymflow(["ui", "--stop"], env)
    assert stopped.stdout.strip() == "Stopped the local Prefect server."
    assert not _listening(port)
    assert not (tmp_path / "home" / "server.pid").exists()
    assert _gymflow(["ui", "--stop"], env).stdout.strip() == "No local Prefect server was running."


def test_port_taken_by_something_else_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "PREFECT_SERVER_API_PORT": str(port)}
        env.pop("PREFECT_API_URL", None)
        result = _gymflow(["ui"], env)
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: port {port} on 127.0.0.1 is taken by something that is not")
    assert result.stderr.count("\n") == 1
