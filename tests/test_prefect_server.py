"""The local Prefect server gymflow starts on first use, reuses, and stops with ``gymflow ui --stop``."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from tests.server_homes import free_port, gymflow, gymflow_command, home_env, listening


def test_ui_starts_reuses_and_stops_the_local_server(tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    env = home_env(home, port)
    # A pid file left by a server that died (kill -9, reboot) must not block the start.
    home.mkdir()
    (home / "server.pid").write_text("999999")
    try:
        # Two commands at once start one server: the second waits for the first, and says so.
        both = [
            subprocess.Popen(
                gymflow_command(["ui"]), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outcomes = [(process.wait(timeout=180), *process.communicate()) for process in both]
        assert [code for code, _, _ in outcomes] == [0, 0], outcomes
        firsts = sorted(out.splitlines()[0] for _, out, _ in outcomes)
        assert firsts == [
            f"Prefect UI ({state}): http://127.0.0.1:{port}" for state in ("running", "started")
        ]
        # Not a terminal: the one line at once and nothing else (no spinner).
        errs = sorted(err for _, _, err in outcomes)
        starting = (
            f"Starting the local Prefect server for PREFECT_HOME {home} on 127.0.0.1:{port} "
            "(the first start takes 10-20 s)\n"
        )
        waiting = (
            f"Waiting for the local Prefect server that another gymflow command is starting for "
            f"PREFECT_HOME {home}\n"
        )
        assert starting in errs, errs
        assert errs in (sorted([starting, waiting]), sorted([starting, ""])), errs  # "": came after the start
        pid = int((home / "server.pid").read_text())
        assert pid != 999999 and listening(port)
        assert json.loads((home / "gymflow-server.json").read_text())["pid"] == pid
        second = gymflow(["ui"], env)
        assert second.stdout.splitlines()[0] == f"Prefect UI (running): http://127.0.0.1:{port}"
        assert second.stderr == ""
        assert int((home / "server.pid").read_text()) == pid
    finally:
        stopped = gymflow(["ui", "--stop"], env)
    assert stopped.stdout.strip() == "Stopped the local Prefect server."
    assert not listening(port)
    assert not (home / "server.pid").exists() and not (home / "gymflow-server.json").exists()
    assert gymflow(["ui", "--stop"], env).stdout.strip() == "No local Prefect server was running."


def test_port_taken_by_something_else_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        result = gymflow(["ui"], home_env(tmp_path / "home", port))
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: port {port} on 127.0.0.1 is taken by something that is not")
    assert result.stderr.count("\n") == 1
