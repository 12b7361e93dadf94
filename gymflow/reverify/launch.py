"""Resources servers for a reverify run: use the running ones, launch the others (reverify.md §1 "Servers").

:func:`ensure_servers` resolves each named server instance to a URL. A server that already answers
``GET /reverify_mode`` is used as is and never stopped. Otherwise, if its block can be launched (an
``entrypoint``, the NeMo Gym way, or a ``command`` argv), it is started in its own process group with its
output in a temporary log, awaited (bounded) and stopped when the context exits, also on errors and Ctrl-C.
A watchdog process per launched server kills its process group if gymflow itself dies (``kill -9``
included).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from gymflow import lifeline, scratch
from gymflow.errors import GymflowError

DEFAULT_HOST = "127.0.0.1"
GYM_HEAD_SERVER_PORT = 11000
LOG_TAIL_LINES = 20
STOP_TIMEOUT_S = 5.0
_POLL_S = 0.1
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

# The watchdog waits for EOF on stdin (gymflow holds the only write end), then ends the server's process
# group: SIGTERM, then SIGKILL when the group is still there after the bound.
_WATCHDOG = """\
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pgid, bound = int(sys.argv[1]), float(sys.argv[2])
sys.stdin.buffer.read()
def alive():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
if alive():
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + bound
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


class ServerStartError(GymflowError):
    """A launched resources server did not answer ``GET /reverify_mode`` in time."""


@dataclass
class ServerBlock:
    """Where one resources-server instance lives and how it could be started."""

    name: str
    impl: str
    block: Mapping[str, Any]
    host: str
    port: int | None
    url: str

    @property
    def launchable(self) -> bool:
        return bool(self.block.get("entrypoint") or self.block.get("command"))


@dataclass
class _Launched:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    watchdog: subprocess.Popen[bytes] | None = None
    watchdog_pipe: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False


def to_plain(value: Any) -> Any:
    """Mappings and sequences (OmegaConf containers included) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_plain(v) for v in value]
    return value


def server_block(gym_config: Mapping[str, Any], name: str) -> ServerBlock:
    """The block ``name.resources_servers.<impl>`` (the first implementation) and its URL."""
    instance = gym_config.get(name)
    servers = instance.get("resources_servers") if isinstance(instance, Mapping) else None
    if not isinstance(servers, Mapping) or not servers:
        raise GymflowError(f"reverify: '{name}' is not a resources server block of the config")
    impl, block = next(iter(servers.items()))
    block = block if isinstance(block, Mapping) else {}
    base_url = block.get("base_url")
    if base_url:
        parts = urlsplit(str(base_url))
        url = str(base_url).rstrip("/")
        return ServerBlock(name, str(impl), block, parts.hostname or DEFAULT_HOST, parts.port, url)
    host = str(block.get("host") or DEFAULT_HOST)
    port = int(block["port"]) if block.get("port") not in (None, "") else None
    url = f"http://{host}:{port}" if port is not None else f"http://{host}"
    return ServerBlock(name, str(impl), block, host, port, url)


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether anything answers ``GET <url>/reverify_mode`` with an HTTP response (any status)."""
    host = urlsplit(url).hostname or ""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=host not in _LOOPBACK) as client:
            client.get(url.rstrip("/") + "/reverify_mode")
    except httpx.HTTPError:
        return False
    return True


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _launch_argv(
    server: ServerBlock, gym_config: Mapping[str, Any], python: str | None, directory: str | None
) -> tuple[list[str], str | None, dict[str, str]]:
    """argv, working directory and environment that start ``server`` (its host and port already final)."""
    env = dict(os.environ)
    block = server.block
    chosen = block.get("dir") or block.get("server_dir") or directory
    command = block.get("command")
    if command:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        values = {"{host}": server.host, "{port}": str(server.port)}
        for placeholder, value in values.items():
            argv = [a.replace(placeholder, value) for a in argv]
        return argv, str(chosen) if chosen else None, env
    # Gym runs a server in `resources_servers/<impl>` under the working directory (or its install root).
    gym_layout = Path("resources_servers") / server.impl
    cwd = str(chosen) if chosen else str(gym_layout) if gym_layout.is_dir() else None
    config = to_plain(gym_config)
    resolved = dict(config[server.name]["resources_servers"][server.impl])
    resolved.update(host=server.host, port=server.port)
    config[server.name]["resources_servers"][server.impl] = resolved
    # Keys Gym's parser always fills and a child server reads without a default.
    config.setdefault("head_server", {"host": DEFAULT_HOST, "port": GYM_HEAD_SERVER_PORT})
    config.setdefault("dry_run", False)
    env["NEMO_GYM_CONFIG_DICT"] = yaml.safe_dump(config, sort_keys=False)
    env["NEMO_GYM_CONFIG_PATH"] = server.name
    interpreter = str(block.get("python") or python or sys.executable)
    return [interpreter, str(block["entrypoint"])], cwd, env


def _start(
    server: ServerBlock, argv: list[str], cwd: str | None, env: dict[str, str], log_dir: Path
) -> _Launched:
    log_path = log_dir / f"{server.name}.log"
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServerStartError(f"resources server '{server.name}' could not be started: {exc}") from exc
    launched = _Launched(server.name, server.url, proc, log_path)
    read_end, write_end = os.pipe()
    try:
        launched.watchdog = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG, str(proc.pid), str(STOP_TIMEOUT_S)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        launched.watchdog_pipe = write_end
    except OSError:
        os.close(write_end)
    finally:
        os.close(read_end)
    return launched


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log file (decoded leniently)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(launched: _Launched, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``timeout_s``; end the watchdog. Idempotent."""
    with launched.lock:
        if not launched.stopped:
            _stop_locked(launched, timeout_s)
            launched.stopped = True


def _stop_locked(launched: _Launched, timeout_s: float) -> None:
    pgid = launched.proc.pid
    if launched.proc.poll() is None or _group_alive(pgid):
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (launched.proc.poll() is None or _group_alive(pgid)):
            time.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
    try:
        launched.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        pass
    if launched.watchdog_pipe is not None:
        os.close(launched.watchdog_pipe)
        launched.watchdog_pipe = None
    if launched.watchdog is not None:
        try:
            launched.watchdog.wait(timeout_s)
        except subprocess.TimeoutExpired:
            launched.watchdog.kill()


def _await_started(launched: Sequence[_Launched], timeout_s: float, echo: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(launched)
    while pending:
        for server in list(pending):
            exit_code = server.proc.poll()
            if answers(server.url, timeout_s=min(1.0, max(0.1, deadline - time.monotonic()))):
                echo(f"Resources server '{server.name}' is up at {server.url}")
                pending.remove(server)
            elif exit_code is not None or time.monotonic() >= deadline:
                lines = log_tail(server.log_path)
                if exit_code is not None:
                    lines.append(f"(the server process exited with code {exit_code})")
                raise ServerStartError(
                    f"resources server '{server.name}' did not start within {timeout_s:g} s; "
                    "last log lines:\n" + "\n".join(lines)
                )
        if pending:
            time.sleep(_POLL_S)


@contextmanager
def ensure_servers(
    gym_config: Mapping[str, Any],
    names: Iterable[str],
    *,
    echo: Callable[[str], None],
    timeout_s: float = 60.0,
    python: str | None = None,
    directory: str | None = None,
) -> Iterator[dict[str, str]]:
    """Yield ``{name: url}`` for the resources servers ``names``, launching those that can be and are not up.

    ``python`` and ``directory`` are the interpreter and working directory of ``entrypoint`` servers whose
    block names none (``python``, ``dir``/``server_dir`` keys). Launched servers are stopped at exit (and
    by :func:`gymflow.lifeline.run_cleanups` while the context is open, for a CLI's signal handler).
    """
    urls: dict[str, str] = {}
    to_launch: list[ServerBlock] = []
    for name in dict.fromkeys(names):
        server = server_block(gym_config, name)
        if answers(server.url) or not server.launchable:
            urls[name] = server.url
            continue
        if server.port is None:
            server.port = _free_port(server.host)
            server.url = f"http://{server.host}:{server.port}"
        urls[name] = server.url
        to_launch.append(server)
    launched: list[_Launched] = []
    unregister: list[Callable[[], None]] = []
    log_dir = Path(scratch.scratch_dir("servers")) if to_launch else None
    try:
        for server in to_launch:
            assert log_dir is not None
            argv, cwd, env = _launch_argv(server, gym_config, python, directory)
            echo(f"Starting resources server '{server.name}' on {server.url}: {shlex.join(argv)}")
            running = _start(server, argv, cwd, env, log_dir)
            launched.append(running)
            unregister.append(lifeline.add_cleanup(functools.partial(_stop, running)))
        _await_started(launched, timeout_s, echo)
        yield urls
    finally:
        for remove in unregister:
            remove()
        for running in reversed(launched):
            _stop(running)
            echo(f"Stopped resources server '{running.name}'")
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
