"""Start the test resources server (:mod:`tests.reverify.server`) in a subprocess and talk to its control API.

Used by ``tests/reverify/conftest.py`` and by ``bench/reverify.py``. Every start waits boundedly for
``GET /reverify_mode`` and every stop kills the server's whole process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex((host, port)) != 0


def server_argv(port: int, *, host: str = "127.0.0.1", mode: str = "stateless", **flags: Any) -> list[str]:
    """The argv that runs the server standalone; ``flags`` become ``--name value`` (``True`` → bare flag)."""
    argv = [
        sys.executable,
        "-m",
        "tests.reverify.server",
        "--host",
        host,
        "--port",
        str(port),
        "--mode",
        mode,
    ]
    for name, value in flags.items():
        option = "--" + name.replace("_", "-")
        if value is True:
            argv.append(option)
        elif value not in (None, False):
            argv += [option, str(value)]
    return argv


def server_env() -> dict[str, str]:
    """The environment for a server child: the repository importable, no proxies for loopback."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


class ServerProcess:
    """One running test server: ``.url``, the control API, and :meth:`stop`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        host: str,
        port: int,
        log_path: Path,
        owned_dir: Path | None = None,
    ) -> None:
        self.proc = proc
        self.owned_dir = owned_dir
        """The log's temporary directory when :func:`start_server` made it: removed by :meth:`stop`."""
        self.host = host
        self.port = port
        self.log_path = log_path
        self.url = f"http://{host}:{port}"
        self._http = httpx.Client(base_url=self.url, timeout=10.0, trust_env=False)

    # -- control API ------------------------------------------------------------------------------------
    def set(self, key: tuple[int, int] | None = None, **behaviour: Any) -> None:
        """Set ``/verify``'s behaviour for one key, or for all keys when ``key`` is None (``Behaviour``)."""
        response = self._http.post("/_control/set", json={"key": list(key) if key else None, **behaviour})
        response.raise_for_status()

    def set_mode(self, mode: Any, status: int = 200) -> None:
        """Set the ``/reverify_mode`` answer (any JSON value) and its HTTP status."""
        self._http.post("/_control/mode", json={"mode": mode, "status": status}).raise_for_status()

    def set_aggregate(self, status: int | None, body: Any = None) -> None:
        """``/aggregate_metrics`` answers ``status`` with ``body`` (None: computes again)."""
        self._http.post("/_control/aggregate", json={"status": status, "body": body}).raise_for_status()

    def reset(self) -> None:
        self._http.post("/_control/reset").raise_for_status()

    def log(self, path: str | None = None) -> list[dict[str, Any]]:
        """The request log, optionally only one path (``"/verify"``)."""
        entries: list[dict[str, Any]] = self._http.get("/_control/log").json()
        return [e for e in entries if path is None or e["path"] == path]

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self._http.get("/_control/stats").json()
        return stats

    def server_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- lifecycle --------------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        self._http.close()
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout_s)
        _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers of the group (uvicorn workers)
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until_answering(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Poll ``GET <url>/reverify_mode`` until it answers (any status), the process exits, or time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            try:
                client.get(f"{url}/reverify_mode")
                return True
            except httpx.TransportError:
                time.sleep(0.05)
    return False


def start_server(
    mode: str = "stateless",
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout_s: float = 20.0,
    log_dir: Path | None = None,
    **flags: Any,
) -> ServerProcess:
    """Start the server in its own process group and wait (bounded) until it answers.

    With ``port=None`` a free port is picked (and re-picked if another process took it first).
    """
    owned = None if log_dir else Path(tempfile.mkdtemp(prefix="gf-test-server-"))
    log_dir = log_dir or owned
    assert log_dir is not None
    for attempt in range(3):
        chosen = port if port is not None else free_port(host)
        log_path = log_dir / f"server-{chosen}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                server_argv(chosen, host=host, mode=mode, **flags),
                cwd=REPO_ROOT,
                env=server_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = ServerProcess(
            proc, host, chosen, log_path, owned if attempt == 2 or port is not None else None
        )
        if wait_until_answering(server.url, timeout_s, proc):
            server.owned_dir = owned
            return server
        text = server.server_log()
        server.stop()
        if port is not None or attempt == 2:
            raise RuntimeError(f"test server did not start on {server.url}:\n{text[-4000:]}")
    raise AssertionError("unreachable")


def gym_config(
    servers: Mapping[str, ServerProcess | Mapping[str, Any]],
    *,
    agents: Mapping[str, str] | None = None,
    impl: Mapping[str, str] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A NeMo Gym config: ``{name: {resources_servers: {impl: {host, port, ...}}}}`` per server, plus
    ``{agent: {responses_api_agents: {simple_agent: {resources_server: {type, name}}}}}`` per agent.

    ``servers`` maps a name to a running server (host and port taken from it) or to a literal block;
    ``impl`` renames the implementation key (default: the server name); ``extra`` adds block keys.
    """
    config: dict[str, Any] = {}
    for name, server in servers.items():
        if isinstance(server, ServerProcess):
            block: dict[str, Any] = {"entrypoint": "app.py", "host": server.host, "port": server.port}
        else:
            block = dict(server)
        block.update((extra or {}).get(name, {}))
        config[name] = {"resources_servers": {(impl or {}).get(name, name): block}}
    for agent, server_name in (agents or {}).items():
        config[agent] = {
            "responses_api_agents": {
                "simple_agent": {"resources_server": {"type": "resources_servers", "name": server_name}}
            }
        }
    return config


def write_gym_config(
    path: Path, servers: Mapping[str, ServerProcess | Mapping[str, Any]], **kwargs: Any
) -> Path:
    """Write :func:`gym_config` as YAML to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(gym_config(servers, **kwargs), sort_keys=False))
    return path


def mcqa_rows(
    n_tasks: int, repeats: int, *, agent: str = "mcqa_simple_agent", wrong: Sequence[tuple[int, int]] = ()
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Small matching materialized and rollout rows; keys in ``wrong`` answer a wrong letter."""
    materialized, rollouts = [], []
    for task in range(n_tasks):
        expected = "ABCD"[task % 4]
        for rollout in range(repeats):
            params = {"input": [{"role": "user", "content": f"Question {task}? Answer with \\boxed{{X}}."}]}
            base = {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent}}
            materialized.append(
                {
                    "responses_create_params": params,
                    **base,
                    "options": [{k: f"option {k}"} for k in "ABCD"],
                    "expected_answer": expected,
                    "grading_mode": "strict_single_letter_boxed",
                }
            )
            letter = "ABCD"[(task + 1) % 4] if (task, rollout) in wrong else expected
            rollouts.append(
                {"response": mcqa_response(f"The answer is \\boxed{{{letter}}}"), "reward": 1.0, **base}
            )
    return materialized, rollouts


def mcqa_response(text: str, response_id: str = "resp_0") -> dict[str, Any]:
    """A Responses-API response whose only output is an assistant message with ``text``."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0.0,
        "model": "policy",
        "output": [
            {
                "id": "msg_0",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
