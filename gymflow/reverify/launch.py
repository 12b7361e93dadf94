"""Resources servers for a reverify run: use the running ones, launch the others (reverify.md §1 "Servers",
§3.10 points 2 and 4).

:class:`Servers` decides once per routed server whether gymflow launches it: a server that already
answers ``GET /reverify_mode`` at its configured address is used as is and never stopped (and a
config that sets server settings for it is refused unless ``reuse_server``: gymflow cannot apply
them); otherwise, if its block can be launched (an ``entrypoint``, the NeMo Gym way, or a ``command``
argv), gymflow starts it. An ``entrypoint`` server runs in its server directory, found as NeMo Gym
0.7.0 finds it (``resources_servers/<impl>`` under the search roots: ``search_dirs``,
``$NEMO_GYM_EXTRA_ROOTS``, the working directory, the installed ``nemo_gym``), with the interpreter of
the venv 0.7.0 would run it from. :func:`ensure_servers` starts them in their own process groups
with their output in a temporary log, awaits them (bounded) and stops them when the context exits,
also on errors and Ctrl-C. A watchdog process per launched server kills its process group if
gymflow itself dies (``kill -9`` included).
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

import yaml

from gymflow import blocking_http, lifeline, scratch
from gymflow.errors import GymflowError
from gymflow.gym_config import ADDRESS_KEYS, verifier_sha256

DEFAULT_HOST = "127.0.0.1"
GYM_HEAD_SERVER_PORT = 11000
LOG_TAIL_LINES = 20
STOP_TIMEOUT_S = 5.0
_POLL_S = 0.1
LAUNCH_KEYS = frozenset({"entrypoint", "command", "python", "dir", "server_dir", "num_workers"})
"""Keys of a server block that say how to start it (and with how many workers), not how it verifies."""
METADATA_KEYS = frozenset({"domain", "description", "verified", "verified_url", "value"})
"""NeMo Gym 0.7.0's descriptive keys of a resources-server block (server metadata): no server reads them."""
SERVER_DIR_MARKERS = ("requirements.txt", "pyproject.toml")
"""A directory counts as a server directory when it holds one of these (0.7.0's rule)."""

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


class SettingsNotApplied(GymflowError):
    """The config sets server settings for a server gymflow did not launch (§3.10 point 4)."""


@dataclass
class ServerBlock:
    """Where one resources-server instance lives and how it could be started."""

    name: str
    impl: str
    block: Mapping[str, Any]
    host: str
    port: int | None
    url: str
    launch: bool = False
    """Decided by :class:`Servers`: gymflow starts this server (nothing answered at its address)."""

    @property
    def launchable(self) -> bool:
        return bool(self.block.get("entrypoint") or self.block.get("command"))

    @property
    def address(self) -> str:
        """``host:port`` of the configured URL (no credentials)."""
        parts = urlsplit(self.url)
        return parts.netloc.rpartition("@")[2] or self.url


def settings_keys(block: Mapping[str, Any]) -> list[str]:
    """The keys of a server block that configure how the server verifies: all but its address, its
    launch recipe, NeMo Gym's descriptive metadata and keys set to null (which set nothing)."""
    exempt = ADDRESS_KEYS | LAUNCH_KEYS | METADATA_KEYS
    return sorted(str(k) for k, v in block.items() if k not in exempt and v is not None)


class Servers:
    """Per resources server of a run, decided once (the first time it is asked, i.e. when the first
    row routes to it): whether gymflow launches it, and the verifier identity its rows are keyed by.

    A server that answers at its configured address is not launched; when its block sets server
    settings, :class:`SettingsNotApplied` is raised unless ``reuse_server``, and its provenance
    says ``settings: unverified``. Every server's rows are keyed by its block as the config gives it
    (:func:`~gymflow.gym_config.verifier_sha256`, reverify.md §4 point 4): with ``reuse_server``,
    the user vouches for settings gymflow could not apply.
    """

    def __init__(
        self,
        gym_config: Mapping[str, Any],
        *,
        reuse_server: bool = False,
        search_dirs: Sequence[str] = (),
    ) -> None:
        self.gym_config = gym_config
        self.reuse_server = reuse_server
        self.search_dirs = tuple(search_dirs)
        self._blocks: dict[str, ServerBlock] = {}
        self._hashes: dict[str, str] = {}

    def get(self, name: str) -> ServerBlock:
        server = self._blocks.get(name)
        if server is None:
            server = self._blocks[name] = self._decide(name)
        return server

    def _decide(self, name: str) -> ServerBlock:
        server = server_block(self.gym_config, name)
        addressed = server.port is not None or bool(server.block.get("base_url"))
        if addressed and answers(server.url):
            keys = settings_keys(server.block)
            if keys and not self.reuse_server:
                raise SettingsNotApplied(
                    f"A resources server already answers at {server.address}; gymflow cannot apply "
                    f"{', '.join(keys)} to it. Stop it, or pass --reuse-server to use it as it runs."
                )
            return server
        if server.launchable:
            server.launch = True
            if server.port is None:
                server.port = _free_port(server.host)
                server.url = f"http://{server.host}:{server.port}"
        return server

    def launched(self, name: str) -> bool:
        return self.get(name).launch

    def verifier_sha256(self, name: str) -> str:
        """The identity the rows routed to ``name`` are keyed by (reverify.md §4 point 4, §3.10 point 4)."""
        digest = self._hashes.get(name)
        if digest is None:
            self.get(name)  # decided first: a refused server has no identity
            digest = self._hashes[name] = verifier_sha256(self.gym_config, name)
        return digest


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
    try:
        blocking_http.request("GET", url.rstrip("/") + "/reverify_mode", timeout_s=timeout_s)
    except blocking_http.TransportError:
        return False
    return True


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def installed_gym_root() -> Path | None:
    """The directory the ``nemo_gym`` package importable here sits in (0.7.0's install root, where
    its built-in servers live: ``site-packages`` of a wheel install, the checkout of an editable one)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nemo_gym")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent.parent


def search_roots(search_dirs: Sequence[str] = ()) -> list[Path]:
    """0.7.0's component roots, first wins: ``search_dirs`` (``--search-dir``), then
    ``$NEMO_GYM_EXTRA_ROOTS``, the working directory and the install root of an installed ``nemo_gym``
    (its built-in components); one entry per resolved directory."""
    roots = [Path(d) for d in search_dirs]
    roots += [Path(d) for d in os.environ.get("NEMO_GYM_EXTRA_ROOTS", "").split(os.pathsep) if d]
    roots.append(Path.cwd())
    installed = installed_gym_root()
    if installed is not None:
        roots.append(installed)
    unique: dict[Path, Path] = {}
    for root in roots:
        unique.setdefault(root.resolve(), root)
    return list(unique.values())


def _is_server_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in SERVER_DIR_MARKERS)


def resolve_server_dir(
    impl: str, search_dirs: Sequence[str] = (), entrypoint: str = "app.py"
) -> tuple[Path, Path] | None:
    """(server directory, its root) of ``resources_servers/<impl>``: the first root where it holds
    ``requirements.txt`` or ``pyproject.toml`` (0.7.0's rule), else the first root where it holds the
    ``entrypoint`` file (a server of one's own, without either); None when no root has it."""
    relative = Path("resources_servers") / impl
    roots = search_roots(search_dirs)
    accepts: tuple[Callable[[Path], bool], ...] = (_is_server_dir, lambda d: (d / entrypoint).is_file())
    for accept in accepts:
        for root in roots:
            if accept(root / relative):
                return (root / relative).absolute(), root.absolute()
    return None


def _gym_root_of(root: Path | None) -> Path | None:
    """The Gym install root that owns a server found under ``root``: ``root`` itself when it holds
    the ``nemo_gym`` package (a checkout, or a ``site-packages``), else the installed one."""
    if root is not None and (root / "nemo_gym" / "__init__.py").is_file():
        return root
    return installed_gym_root()


def server_python(server_dir: Path, gym_root: Path | None, gym_config: Mapping[str, Any]) -> str:
    """The interpreter of an ``entrypoint`` server, as 0.7.0 picks it when that venv exists: the venv
    ``<uv_venv_dir>/resources_servers/<impl>/.venv``, or ``<server dir>/.venv`` when ``uv_venv_dir`` is
    the install root (0.7.0's default for a checkout; for a wheel install it defaults to the working
    directory). gymflow does not create or fill that venv (0.7.0 does, with uv); without it, the
    interpreter of the environment whose ``site-packages`` holds the server, else gymflow's own."""
    editable = gym_root is not None and (gym_root / "pyproject.toml").is_file()
    working_dir = gym_root if editable and gym_root is not None else Path.cwd()
    uv_venv_dir = Path(str(gym_config.get("uv_venv_dir") or working_dir))
    if gym_root is not None and uv_venv_dir.resolve() == gym_root.resolve():
        venv = server_dir / ".venv"
    else:
        venv = Path(uv_venv_dir, *server_dir.parts[-2:], ".venv")
    candidates = [venv / "bin" / "python"]
    parts = server_dir.parts
    if "site-packages" in parts:
        index = parts.index("site-packages")
        if index >= 2 and parts[index - 2] == "lib":  # <prefix>/lib/pythonX.Y/site-packages
            candidates.append(Path(*parts[: index - 2], "bin", "python"))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.absolute())
    return sys.executable


def _entrypoint_place(
    server: ServerBlock,
    gym_config: Mapping[str, Any],
    python: str | None,
    directory: str | None,
    search_dirs: Sequence[str],
) -> tuple[str, str]:
    """(interpreter, working directory) of an ``entrypoint`` server: the block's ``python`` and
    ``dir``/``server_dir`` win, then the caller's, then 0.7.0's resolution (an absolute entrypoint
    runs in its directory; a relative one found nowhere else but in the working directory, there)."""
    block = server.block
    chosen = block.get("dir") or block.get("server_dir") or directory
    root: Path | None = None
    entrypoint = Path(str(block["entrypoint"]))
    if chosen:
        server_dir = Path(str(chosen)).absolute()
    elif entrypoint.is_absolute():
        server_dir = entrypoint.parent
    else:
        found = resolve_server_dir(server.impl, search_dirs, str(entrypoint))
        if found is None and entrypoint.is_file():  # a server of one's own, beside the config
            found = Path.cwd(), Path.cwd()
        if found is None:
            where = ", ".join(str(r) for r in search_roots(search_dirs))
            raise ServerStartError(
                f"resources server '{server.name}': no server directory resources_servers/{server.impl} "
                f"under {where} (add a root with --search-dir, or give the block a dir key)"
            )
        server_dir, root = found
    interpreter = block.get("python") or python
    if not interpreter:
        interpreter = server_python(server_dir, _gym_root_of(root), gym_config)
    return str(interpreter), str(server_dir)


def _launch_argv(
    server: ServerBlock,
    gym_config: Mapping[str, Any],
    python: str | None,
    directory: str | None,
    search_dirs: Sequence[str] = (),
) -> tuple[list[str], str | None, dict[str, str]]:
    """argv, working directory and environment that start ``server`` (its host and port already final).

    Both kinds get the resolved global config as YAML in ``NEMO_GYM_CONFIG_DICT``, the instance
    name in ``NEMO_GYM_CONFIG_PATH`` and the search dirs first in ``NEMO_GYM_EXTRA_ROOTS``, the way
    Gym starts its child servers."""
    env = dict(os.environ)
    block = server.block
    config = to_plain(gym_config)
    resolved = dict(config[server.name]["resources_servers"][server.impl])
    resolved.update(host=server.host, port=server.port)
    config[server.name]["resources_servers"][server.impl] = resolved
    # Keys Gym's parser always fills and a child server reads without a default.
    config.setdefault("head_server", {"host": DEFAULT_HOST, "port": GYM_HEAD_SERVER_PORT})
    config.setdefault("dry_run", False)
    env["NEMO_GYM_CONFIG_DICT"] = yaml.safe_dump(config, sort_keys=False)
    env["NEMO_GYM_CONFIG_PATH"] = server.name
    if search_dirs:  # as 0.7.0 hands --search-dir to its servers: first in their extra roots
        roots = [str(Path(d).absolute()) for d in search_dirs]
        if env.get("NEMO_GYM_EXTRA_ROOTS"):
            roots.append(env["NEMO_GYM_EXTRA_ROOTS"])
        env["NEMO_GYM_EXTRA_ROOTS"] = os.pathsep.join(roots)
    command = block.get("command")
    if command:
        chosen = block.get("dir") or block.get("server_dir") or directory
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        values = {"{host}": server.host, "{port}": str(server.port)}
        for placeholder, value in values.items():
            argv = [a.replace(placeholder, value) for a in argv]
        return argv, str(chosen) if chosen else None, env
    interpreter, cwd = _entrypoint_place(server, gym_config, python, directory, search_dirs)
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
    servers: Servers | None = None,
) -> Iterator[dict[str, str]]:
    """Yield ``{name: url}`` for the resources servers ``names``, launching those :class:`Servers`
    decides to launch (``servers``, or one made here without ``reuse_server``).

    ``python`` and ``directory`` are the interpreter and working directory of ``entrypoint`` servers whose
    block names none (``python``, ``dir``/``server_dir`` keys); without them, 0.7.0's resolution under
    the search roots. Launched servers are stopped at exit (and by :func:`gymflow.lifeline.run_cleanups`
    while the context is open, for a CLI's signal handler).
    """
    servers = servers if servers is not None else Servers(gym_config)
    urls: dict[str, str] = {}
    to_launch: list[ServerBlock] = []
    for name in dict.fromkeys(names):
        server = servers.get(name)
        urls[name] = server.url
        if server.launch:
            to_launch.append(server)
    launched: list[_Launched] = []
    unregister: list[Callable[[], None]] = []
    log_dir = Path(scratch.scratch_dir("servers")) if to_launch else None
    try:
        for server in to_launch:
            assert log_dir is not None
            argv, cwd, env = _launch_argv(server, gym_config, python, directory, servers.search_dirs)
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
