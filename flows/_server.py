"""The local Prefect server gymflow starts on first use and reuses across commands.

Without ``PREFECT_API_URL`` every Prefect process would start a throwaway API of its own (4-12 s
each, with a new random port, so the flow-run links it recorded die with it). Instead, the
first orchestrated command starts ``prefect server start`` in the background on 127.0.0.1 (port
``PREFECT_SERVER_API_PORT``, default 4200), over the same database under ``$PREFECT_HOME``;
later commands find it answering and cost a second.

The server is this home's, never someone else's. A Prefect API answering on the port is adopted
only when its ``/api/admin/settings`` says it serves this ``$PREFECT_HOME``. The server gymflow
starts is recorded in ``gymflow-server.json`` under the home (pid, the pid's start time, port),
so later commands find it wherever it runs, and ``gymflow ui --stop`` stops that process and no
other. When the default port serves another home (or something else), gymflow starts the home's
server on a free port and records it; a port the user set is refused in one line naming the
other home. The pid also goes into Prefect's own pid file, so ``prefect server stop`` stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import orjson

from gymflow import blocking_http, lifeline
from gymflow.errors import GymflowError

DEFAULT_PORT = 4200
PORT_ENV = "PREFECT_SERVER_API_PORT"
PID_FILE = "server.pid"
"""Prefect's own name for its background server's pid file (``prefect server stop`` reads it)."""
RECORD_FILE = "gymflow-server.json"
"""The server gymflow started for this home: ``{"pid", "started", "port", "home"}``."""
LOG_FILE = "gymflow-server.log"
LOCK_FILE = "gymflow-server.lock"
FIRST_START = "the first start takes 10-20 s"

# The server outlives the command that starts it. Its Popen handle is kept for the life of this
# process: a handle collected while the child runs emits a ResourceWarning ("subprocess ... is
# still running").
_LAUNCHED: list[subprocess.Popen[bytes]] = []
_current_port: dict[Path, int] = {}
"""The port of the server :func:`ensure` returned in this process, per home."""


class PrefectServerError(GymflowError):
    """The local Prefect server could not be started, or the port is someone else's."""


class NotOurServerError(PrefectServerError):
    """``gymflow ui --stop`` found a server it did not start for this home, and left it running."""


@dataclass(frozen=True)
class Answer:
    """What answers on a port of 127.0.0.1."""

    kind: Literal["nothing", "other", "prefect"]
    home: Path | None = None
    """For a Prefect API: the ``PREFECT_HOME`` it serves (None when its settings are unreadable)."""


@dataclass(frozen=True)
class Record:
    """The server gymflow started for this home."""

    pid: int
    started: str | None
    """The pid's start time (so a pid reused by another process is not taken for the server)."""
    port: int
    home: str
    """The home it was started for (a home copied with its files does not own the server)."""


def home() -> Path:
    from prefect.settings import PREFECT_HOME

    path = Path(PREFECT_HOME.value()).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def configured_port() -> tuple[int, bool]:
    """The port asked for (``PREFECT_SERVER_API_PORT``, which ``prefect.port`` sets, or 4200),
    and whether the user asked for it (then gymflow refuses rather than moves)."""
    raw = os.environ.get(PORT_ENV, "").strip()
    return (int(raw), True) if raw.isdigit() else (DEFAULT_PORT, False)


def port() -> int:
    """The port of this home's server: the one :func:`ensure` found or started, else the
    recorded server's, else the configured port."""
    where = home()
    if where in _current_port:
        return _current_port[where]
    record = _read_record()
    if record is not None and _is_ours(record):
        return record.port
    return configured_port()[0]


def base_url() -> str:
    return f"http://127.0.0.1:{port()}"


def api_url() -> str:
    return f"{base_url()}/api"


def _identify(at_port: int, timeout: float = 1.0) -> Answer:
    """What answers on ``at_port``: nothing, something that is not a Prefect API, or a Prefect
    API and the ``PREFECT_HOME`` its settings name."""
    base = f"http://127.0.0.1:{at_port}/api"
    try:
        # The standard library's client, not an httpx one: each httpx client loads a CA bundle
        # (~0.1 s of every orchestrated command) that a plain-HTTP probe of loopback never uses.
        response = blocking_http.request(
            "GET", f"{base}/admin/settings", timeout_s=timeout, headers=_auth_headers()
        )
        if response.status == 200:
            served = orjson.loads(response.body).get("home")
            if isinstance(served, str) and served:
                return Answer("prefect", Path(served))
        health = blocking_http.request("GET", f"{base}/health", timeout_s=timeout)
    except blocking_http.TimeoutException:
        return Answer("other")  # it took the connection and said nothing
    except (blocking_http.TransportError, ValueError, AttributeError):
        return Answer("nothing") if _port_free(at_port) else Answer("other")
    return Answer("prefect") if health.status == 200 else Answer("other")


def _auth_headers() -> dict[str, str]:
    """Basic auth for a server started with ``PREFECT_SERVER_API_AUTH_STRING`` (its settings
    need it; its health does not)."""
    import base64

    from prefect.settings import PREFECT_API_AUTH_STRING

    secret = PREFECT_API_AUTH_STRING.value()
    if not secret:
        return {}
    token = base64.b64encode(secret.get_secret_value().encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _serves_this_home(answer: Answer) -> bool:
    # A relative home is relative to the server's working directory, which is not known here.
    if answer.kind != "prefect" or answer.home is None or not answer.home.is_absolute():
        return False
    mine = home()
    with contextlib.suppress(OSError):
        return answer.home.resolve() == mine.resolve() or os.path.samefile(answer.home, mine)
    return False


def _describe(answer: Answer) -> str:
    if answer.kind != "prefect":
        return "something that is not a Prefect API"
    if answer.home is None:
        return "a Prefect server whose PREFECT_HOME it does not tell"
    return f"the Prefect server of another PREFECT_HOME ({answer.home})"


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot on Linux; ``ps`` elsewhere); None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    try:
        shown = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return shown.stdout.strip() or None


def _is_ours(record: Record) -> bool:
    """Whether the recorded process still runs (the same process, not a reused pid) and was
    started for this home."""
    if record.home != str(home().resolve()) or not lifeline.alive(record.pid):
        return False
    return record.started is None or _start_time(record.pid) == record.started


def _read_record() -> Record | None:
    try:
        raw = json.loads((home() / RECORD_FILE).read_text())
        return Record(int(raw["pid"]), raw.get("started"), int(raw["port"]), str(raw["home"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_record(record: Record) -> None:
    where = home()
    body = json.dumps(
        {"pid": record.pid, "started": record.started, "port": record.port, "home": record.home}
    )
    temporary = where / f".{RECORD_FILE}.{os.getpid()}.tmp"
    temporary.write_text(body + "\n")
    os.replace(temporary, where / RECORD_FILE)
    (where / PID_FILE).write_text(str(record.pid))


def _forget(record: Record | None) -> None:
    """Remove the record, and Prefect's pid file when it names the recorded process or a
    process that is gone (``prefect server start --background`` writes it too)."""
    where = home()
    (where / RECORD_FILE).unlink(missing_ok=True)
    try:
        named = int((where / PID_FILE).read_text().strip())
    except OSError:
        return
    except ValueError:
        named = None
    if named is None or (record is not None and named == record.pid) or not lifeline.alive(named):
        (where / PID_FILE).unlink(missing_ok=True)


def _port_free(at_port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", at_port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Progress:
    """What a wait shows on stderr: its line at once, then, on a terminal and outside CI, a
    spinner with the seconds waited, erased when the wait ends."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO, line: str) -> None:
        self._stream = stream
        self._begun = time.monotonic()
        self._live = _is_terminal(stream) and not _in_ci()
        self._shown = False
        stream.write(line + "\n")
        stream.flush()

    def tick(self) -> None:
        if not self._live:
            return
        waited = time.monotonic() - self._begun
        frame = self.FRAMES[int(waited * 5) % len(self.FRAMES)]
        self._stream.write(f"\r{frame} waiting, {waited:.0f} s")
        self._stream.flush()
        self._shown = True

    def end(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[2K")  # as gymflow.cli.progress erases its bars
            self._stream.flush()
            self._shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _in_ci() -> bool:
    return bool(os.environ.get("CI"))  # the rule of gymflow.cli.progress


@contextlib.contextmanager
def _locked(stream: TextIO | None = None) -> Iterator[None]:
    """One process at a time decides whether to start the server (two commands at once would
    otherwise start two). With ``stream``, a wait for another command says so."""
    with open(home() / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if stream is None:
                fcntl.flock(handle, fcntl.LOCK_EX)
            else:
                _wait_for_lock(handle, stream)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _wait_for_lock(handle: TextIO, stream: TextIO) -> None:
    progress = _Progress(
        stream,
        f"Waiting for the local Prefect server that another gymflow command is starting for "
        f"PREFECT_HOME {home()}",
    )
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                progress.tick()
                time.sleep(0.2)
    finally:
        progress.end()


def _last_lines(path: Path, count: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return "(no log)"


def _adoptable(wanted: int, explicit: bool, timeout: float) -> tuple[int | None, Answer]:
    """The port of a server that serves this home (the recorded one, else the configured port's),
    and what answers on the configured port; a recorded one on another port than the one the
    user set is refused."""
    record = _read_record()
    if record is not None and record.port != wanted and _is_ours(record):
        if _serves_this_home(_identify(record.port, timeout)):
            if explicit:
                raise PrefectServerError(
                    f"the local Prefect server of PREFECT_HOME {home()} runs on port "
                    f"{record.port}, not on the port asked for ({wanted}); `gymflow ui --stop` "
                    f"stops it, and the next command starts it on {wanted}"
                )
            return record.port, Answer("nothing")
    answer = _identify(wanted)
    return (wanted if _serves_this_home(answer) else None), answer


def _port_to_start_on(wanted: int, explicit: bool, answer: Answer, last: Record | None) -> tuple[int, str]:
    """The port to start this home's server on (the one asked for when free; else, unless the
    user set it, the port it ran on last when free, so its flow-run links keep working, else a
    free one), and what the start line says about it. ``answer``: what answers on ``wanted``."""
    if answer.kind == "nothing" and _port_free(wanted):
        return wanted, ""
    if explicit:
        remedy = f"; set {PORT_ENV} (or prefect.port) to a free port, or PREFECT_API_URL to a running server"
        raise PrefectServerError(f"port {wanted} on 127.0.0.1 is taken by {_describe(answer)}{remedy}")
    chosen = last.port if last is not None and _port_free(last.port) else _free_port()
    return chosen, f" (port {wanted} is taken by {_describe(answer)})"


def ensure(timeout_s: float, *, stream: TextIO | None = None) -> tuple[str, bool]:
    """This home's local server's API URL, starting the server if none answers; and whether it
    was started now. A start prints one line to ``stream`` (stderr) at once and, on a terminal,
    a spinner until the server answers."""
    out = sys.stderr if stream is None else stream
    wanted, explicit = configured_port()
    found, _ = _adoptable(wanted, explicit, timeout=1.0)
    if found is None:
        with _locked(out):
            # A recorded server gets 3 s to answer before it is taken for stuck and replaced.
            found, answer = _adoptable(wanted, explicit, timeout=3.0)
            if found is None:
                return _start(timeout_s, wanted, explicit, answer, out), True
    _current_port[home()] = found
    return api_url(), False


def _start(timeout_s: float, wanted: int, explicit: bool, answer: Answer, out: TextIO) -> str:
    record = _read_record()
    if record is not None and _is_ours(record):
        _terminate(record.pid)  # recorded, alive, not answering within 3 s: stuck
    _forget(record)
    chosen, moved = _port_to_start_on(wanted, explicit, answer, record)
    url = f"http://127.0.0.1:{chosen}/api"
    log_path = home() / LOG_FILE
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_UI_API_URL": url,
        "PREFECT_HOME": str(home().resolve()),  # absolute, so its settings name it for others
    }
    env.pop("PREFECT_API_URL", None)
    progress = _Progress(
        out,
        f"Starting the local Prefect server for PREFECT_HOME {home()} on 127.0.0.1:{chosen}"
        f"{moved} ({FIRST_START})",
    )
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
                + ["--port", str(chosen), "--log-level", "WARNING"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        _LAUNCHED.append(process)
        started = Record(process.pid, _start_time(process.pid), chosen, str(home().resolve()))
        _write_record(started)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            if _serves_this_home(_identify(chosen, timeout=0.5)):
                _current_port[home()] = chosen
                return url
            progress.tick()
            time.sleep(0.2)
    finally:
        progress.end()
    _terminate(process.pid)
    _forget(started)
    raise PrefectServerError(
        f"the local Prefect server did not start within {timeout_s:g} s; last log lines:\n"
        + _last_lines(log_path)
    )


def _terminate(pid: int, grace_s: float = 10.0) -> None:
    """Stop ``pid`` and its process group (the server starts in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and lifeline.alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if lifeline.alive(pid):
            os.killpg(pid, signal.SIGKILL)
    for process in [launched for launched in _LAUNCHED if launched.pid == pid]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)  # records the exit, so the handle no longer warns
        _LAUNCHED.remove(process)


def stop() -> bool:
    """Stop the server gymflow started for this home; whether one was running. A server on the
    port that gymflow did not start for this home is left running: :class:`NotOurServerError`."""
    with _locked():
        record = _read_record()
        _current_port.pop(home(), None)
        if record is not None and _is_ours(record):
            _terminate(record.pid)
            _forget(record)
            return True
        _forget(record)
        at_port = record.port if record is not None else configured_port()[0]
        answer = _identify(at_port)
        if answer.kind == "nothing" and record is not None:
            at_port = configured_port()[0]
            answer = _identify(at_port)
        if answer.kind != "prefect":
            return False
        if _serves_this_home(answer):
            how = "with `prefect server stop`" if (home() / PID_FILE).exists() else "where it was started"
            raise NotOurServerError(
                f"the Prefect server on port {at_port} serves this PREFECT_HOME but gymflow did not "
                f"start it; left running (stop it {how})"
            )
        raise NotOurServerError(
            f"left running: port {at_port} on 127.0.0.1 is taken by {_describe(answer)}, not by a "
            f"server gymflow started for PREFECT_HOME {home()}"
        )
