"""The local Prefect server gymflow starts on first use and reuses across commands.

Without ``PREFECT_API_URL`` every Prefect process would start a throwaway API of its own (4-12 s
each, with a new random port, so the flow-run links it recorded die with it). Instead, the
first orchestrated command starts ``prefect server start`` in the background on 127.0.0.1 (port
``PREFECT_SERVER_API_PORT``, default 4200), over the same database under ``$PREFECT_HOME``;
later commands find it answering and cost a second. The server's pid goes into Prefect's own pid
file, so ``prefect server stop`` stops it as well as ``gymflow ui --stop``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from gymflow.errors import GymflowError

DEFAULT_PORT = 4200
PID_FILE = "server.pid"
"""Prefect's own name for its background server's pid file (``prefect server stop`` reads it)."""
LOG_FILE = "gymflow-server.log"
LOCK_FILE = "gymflow-server.lock"

# The server outlives the command that starts it. Its Popen handle is kept for the life of this
# process: a handle collected while the child runs emits a ResourceWarning ("subprocess ... is
# still running").
_LAUNCHED: list[subprocess.Popen[bytes]] = []


class PrefectServerError(GymflowError):
    """The local Prefect server could not be started."""


def home() -> Path:
    from prefect.settings import PREFECT_HOME

    path = Path(PREFECT_HOME.value()).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def port() -> int:
    raw = os.environ.get("PREFECT_SERVER_API_PORT", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_PORT


def base_url() -> str:
    return f"http://127.0.0.1:{port()}"


def api_url() -> str:
    return f"{base_url()}/api"


def answering(timeout: float = 1.0) -> bool:
    """Whether a Prefect API answers at :func:`api_url`."""
    try:
        response = httpx.get(f"{api_url()}/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _pid() -> int | None:
    try:
        return int((home() / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_free() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port()))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One process at a time decides whether to start the server (two commands at once would
    otherwise start two)."""
    with open(home() / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_lines(path: Path, count: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return "(no log)"


def ensure(timeout_s: float) -> tuple[str, bool]:
    """The local server's API URL, starting the server if nothing answers; and whether it was
    started now."""
    if answering():
        return api_url(), False
    with _locked():
        if answering():
            return api_url(), False
        pid = _pid()
        if pid is not None and _alive(pid):
            _terminate(pid)
        (home() / PID_FILE).unlink(missing_ok=True)
        if not _port_free():
            raise PrefectServerError(
                f"port {port()} on 127.0.0.1 is taken by something that is not a Prefect API; set "
                "PREFECT_SERVER_API_PORT to a free port, or PREFECT_API_URL to a running server"
            )
        log_path = home() / LOG_FILE
        env = {
            **os.environ,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_UI_API_URL": api_url(),
        }
        env.pop("PREFECT_API_URL", None)
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
                + ["--port", str(port()), "--log-level", "WARNING"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        _LAUNCHED.append(process)
        (home() / PID_FILE).write_text(str(process.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if answering(timeout=0.5):
                return api_url(), True
            time.sleep(0.2)
        _terminate(process.pid)
        (home() / PID_FILE).unlink(missing_ok=True)
        raise PrefectServerError(
            f"the local Prefect server did not start within {timeout_s:g} s; last log lines:\n"
            + _last_lines(log_path)
        )


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for process in [launched for launched in _LAUNCHED if launched.pid == pid]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)  # records the exit, so the handle no longer warns
        _LAUNCHED.remove(process)


def stop() -> bool:
    """Stop the server gymflow started (if any); whether one was running."""
    with _locked():
        pid = _pid()
        (home() / PID_FILE).unlink(missing_ok=True)
        if pid is None or not _alive(pid):
            return False
        _terminate(pid)
        return True
