"""The local Prefect server is this ``PREFECT_HOME``'s: another home's server on the port is never
adopted or stopped, a server gymflow did not start is never stopped, and a start shows itself.

Real servers, each with its own temporary home and port: one started by hand (``prefect server
start``, as another user would) and one gymflow starts. The session's server is not involved.
"""

from __future__ import annotations

import io
import json
import os
import pty
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from tests.server_homes import (
    end,
    free_port,
    gymflow,
    gymflow_command,
    home_env,
    listening,
    served_home,
    start_prefect_server,
)


def _on_a_terminal(command: list[str], env: dict[str, str]) -> tuple[int, str, list[tuple[float, bytes]]]:
    """Run ``command`` with stderr on a pseudo-terminal: exit code, stdout, and the stderr chunks
    with the seconds since the start at which each arrived."""
    leader, follower = pty.openpty()
    began = time.monotonic()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower
    )
    os.close(follower)
    chunks: list[tuple[float, bytes]] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            chunks.append((time.monotonic() - began, chunk))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out, _ = process.communicate(timeout=180)
    reader.join(timeout=10)
    os.close(leader)
    return process.returncode, out.decode(), chunks


def test_another_homes_server_is_neither_adopted_nor_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gymflow.flows import _server

    theirs, mine, copied = tmp_path / "theirs", tmp_path / "mine", tmp_path / "copied"
    their_port = free_port()
    foreign = start_prefect_server(theirs, their_port)
    my_port: int | None = None
    try:
        # The user set the port, and another home's server answers there: one line, nothing started.
        refused = gymflow(["ui"], home_env(mine, their_port))
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith(
            f"Error: port {their_port} on 127.0.0.1 is taken by the Prefect server of another "
            f"PREFECT_HOME ({theirs})"
        ), refused.stderr
        assert not (mine / "gymflow-server.json").exists()
        # --stop leaves it running, and says so in one line.
        kept = gymflow(["ui", "--stop"], home_env(mine, their_port))
        assert kept.returncode == 1 and kept.stderr.count("\n") == 1, kept.stderr
        assert kept.stderr.startswith(f"Error: left running: port {their_port} on 127.0.0.1 is taken by")
        assert f"another PREFECT_HOME ({theirs})" in kept.stderr and str(mine) in kept.stderr
        assert served_home(their_port) == str(theirs)

        # Its own home adopts it; gymflow did not start it, so --stop leaves it running.
        with _as_home(theirs, their_port, monkeypatch):
            assert _server.ensure(60, stream=(quiet := io.StringIO())) == (
                f"http://127.0.0.1:{their_port}/api",
                False,
            )
            assert quiet.getvalue() == ""
            with pytest.raises(_server.NotOurServerError) as not_started:
                _server.stop()
        assert str(not_started.value) == (
            f"the Prefect server on port {their_port} serves this PREFECT_HOME but gymflow did not "
            "start it; left running (stop it where it was started)"
        )
        assert served_home(their_port) == str(theirs)

        # Nobody set the port and the default one is another home's: a free port, recorded. The
        # start shows a line at once and, on a terminal, a spinner while the server comes up.
        # (The migrated database is copied in, so this start skips Prefect's migrations.)
        _copy_database(theirs, mine)
        code, out, chunks = _on_a_terminal(
            gymflow_command(["ui"], default_port=their_port), home_env(mine, None)
        )
        assert code == 0, chunks
        record = json.loads((mine / "gymflow-server.json").read_text())
        my_port = record["port"]
        assert my_port != their_port
        assert out.splitlines()[0] == f"Prefect UI (started): http://127.0.0.1:{my_port}"
        err = b"".join(chunk for _, chunk in chunks).decode()
        assert err.split("\r\n", 1)[0] == (
            f"Starting the local Prefect server for PREFECT_HOME {mine} on 127.0.0.1:{my_port} "
            f"(port {their_port} is taken by the Prefect server of another PREFECT_HOME ({theirs})) "
            "(the first start takes 10-20 s)"
        )
        line_at = next(at for at, seen in _prefix_times(chunks) if "\r\n" in seen)
        assert line_at < chunks[-1][0] - 2, chunks  # at once: seconds before the server answered
        assert "| waiting, " in err and "/ waiting, " in err and err.endswith("\r\x1b[2K"), err
        assert served_home(my_port) == str(mine)

        monkeypatch.setattr(_server, "DEFAULT_PORT", their_port)
        with _as_home(mine, None, monkeypatch):
            # Later commands find it on its recorded port, silently.
            assert _server.ensure(60, stream=quiet) == (f"http://127.0.0.1:{my_port}/api", False)
            assert quiet.getvalue() == "" and _server.base_url() == f"http://127.0.0.1:{my_port}"
        with _as_home(mine, their_port, monkeypatch):
            # A port set now that is not the one it runs on: refused, naming both.
            with pytest.raises(_server.PrefectServerError, match=f"runs on port {my_port}, not on the port "):
                _server.ensure(60, stream=quiet)
        # A home copied with its files does not own the server the copy's record names.
        copied.mkdir()
        for name in ("gymflow-server.json", "server.pid"):
            shutil.copy(mine / name, copied / name)
        with _as_home(copied, None, monkeypatch), pytest.raises(_server.NotOurServerError) as from_copy:
            _server.stop()
        assert str(from_copy.value) == (
            f"left running: port {my_port} on 127.0.0.1 is taken by the Prefect server of another "
            f"PREFECT_HOME ({mine}), not by a server gymflow started for PREFECT_HOME {copied}"
        )
        assert served_home(my_port) == str(mine)

        stopped = gymflow(["ui", "--stop"], home_env(mine, None), default_port=their_port)
        assert stopped.returncode == 0 and stopped.stdout.strip() == "Stopped the local Prefect server."
        assert not listening(my_port) and not (mine / "gymflow-server.json").exists()
        assert served_home(their_port) == str(theirs)
    finally:
        if my_port is not None and listening(my_port):
            gymflow(["ui", "--stop"], home_env(mine, my_port))
        end(foreign)


@contextmanager
def _as_home(home: Path, port: int | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as a command of ``home`` (the port set to ``port``, or not set), for a block."""
    from prefect.settings import PREFECT_HOME, temporary_settings

    with monkeypatch.context() as patch, temporary_settings(updates={PREFECT_HOME: str(home)}):
        if port is None:
            patch.delenv("PREFECT_SERVER_API_PORT", raising=False)
        else:
            patch.setenv("PREFECT_SERVER_API_PORT", str(port))
        yield


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a running server's SQLite database (sqlite's online backup)."""
    target.mkdir(parents=True, exist_ok=True)
    with (
        closing(sqlite3.connect(source / "prefect.db")) as live,
        closing(sqlite3.connect(target / "prefect.db")) as copy,
    ):
        live.backup(copy)


def _prefix_times(chunks: list[tuple[float, bytes]]) -> list[tuple[float, str]]:
    """For each chunk: when it arrived and all stderr up to it."""
    seen = b""
    prefixes = []
    for at, chunk in chunks:
        seen += chunk
        prefixes.append((at, seen.decode(errors="replace")))
    return prefixes


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("ci", "spins"), [(None, True), ("true", False)])
def test_progress_spins_on_a_terminal_outside_ci(
    ci: str | None, spins: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gymflow.flows import _server

    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    stream = _Terminal()
    progress = _server._Progress(stream, "Starting")
    assert stream.getvalue() == "Starting\n"  # at once, before any wait
    progress.tick()
    progress.end()
    assert stream.getvalue() == "Starting\n" + ("\r| waiting, 0 s\r\x1b[2K" if spins else "")
