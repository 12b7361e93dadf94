"""Launching resources servers from the config (reverify.md §1 "Servers", G): real processes, real ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from gymflow.errors import GymflowError
from gymflow.reverify.launch import ServerStartError, ensure_servers, server_block
from tests.reverify.server_process import REPO_ROOT, ServerProcess, free_port, port_is_free, server_env

pytestmark = pytest.mark.timeout(60)

SERVER_COMMAND = [sys.executable, "-m", "tests.reverify.server", "--host", "{host}", "--port", "{port}"]


def command_config(name: str = "mcqa", command: list[str] | None = None, **block: Any) -> dict[str, Any]:
    return {
        name: {
            "resources_servers": {
                name: {
                    "command": command or SERVER_COMMAND,
                    "dir": str(REPO_ROOT),
                    "domain": "knowledge",
                    **block,
                }
            }
        }
    }


def mode_of(url: str) -> Any:
    return httpx.get(f"{url}/reverify_mode", timeout=5, trust_env=False).json()


def processes_with(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(token in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [
            p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        time.sleep(0.05)
    return alive


def test_urls_from_blocks() -> None:
    config = {
        "a": {"resources_servers": {"mcqa": {"host": "10.0.0.1", "port": 8001}}},
        "b": {"resources_servers": {"x": {"host": "h", "port": 1, "base_url": "http://other:9/"}}},
        "c": {"resources_servers": {"y": {"port": 7}}},
    }
    assert server_block(config, "a").url == "http://10.0.0.1:8001"
    assert server_block(config, "b").url == "http://other:9"
    assert (server_block(config, "c").url, server_block(config, "c").impl) == ("http://127.0.0.1:7", "y")
    with pytest.raises(GymflowError, match="'agent' is not a resources server block"):
        server_block({"agent": {"responses_api_agents": {}}}, "agent")


def test_not_launchable_and_not_answering_yields_the_url() -> None:
    port = free_port()
    messages: list[str] = []
    config = {"rs": {"resources_servers": {"rs": {"host": "127.0.0.1", "port": port}}}}
    with ensure_servers(config, ["rs"], echo=messages.append) as urls:
        assert urls == {"rs": f"http://127.0.0.1:{port}"}
    assert messages == []


def test_launches_a_command_block_on_a_free_port_and_stops_it() -> None:
    messages: list[str] = []
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with ensure_servers(command_config(), ["mcqa"], echo=messages.append, timeout_s=20) as urls:
        url = urls["mcqa"]
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        assert mode_of(url) == "stateless"
        children = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        server_pids = [p.pid for p in children if "tests.reverify.server" in " ".join(p.cmdline())]
        assert len(server_pids) == 1 and len(children) == 2  # the server and its watchdog
    assert messages[0].startswith(f"Starting resources server 'mcqa' on {url}: ")
    assert f"--port {port}" in messages[0]
    assert messages[1:] == [f"Resources server 'mcqa' is up at {url}", "Stopped resources server 'mcqa'"]
    assert wait_gone(server_pids, 1) == []
    assert port_is_free(port)
    assert wait_gone([p.pid for p in children], 1) == []  # the watchdog is gone too


def test_explicit_port_and_two_servers() -> None:
    port = free_port()
    config = {
        **command_config("a", port=port),
        **command_config("b", command=[*SERVER_COMMAND, "--mode", "unknown"]),
    }
    with ensure_servers(config, ["a", "b", "a"], echo=lambda _: None, timeout_s=20) as urls:
        assert urls["a"] == f"http://127.0.0.1:{port}"
        assert (mode_of(urls["a"]), mode_of(urls["b"])) == ("stateless", "unknown")
    assert port_is_free(port) and port_is_free(int(urls["b"].rsplit(":", 1)[1]))


def test_running_server_is_used_as_is_and_not_stopped(resources_server: ServerProcess) -> None:
    messages: list[str] = []
    config = command_config(host=resources_server.host, port=resources_server.port)
    with ensure_servers(config, ["mcqa"], echo=messages.append) as urls:
        assert urls == {"mcqa": resources_server.url}
    assert messages == []
    assert resources_server.alive() and mode_of(resources_server.url) == "stateless"
    assert resources_server.log("/reverify_mode")  # it was probed


def test_timeout_reports_the_last_20_log_lines(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    script = f"import time\nfor i in range(25): print('line', i, flush=True)\ntime.sleep(30)  # {token}"
    config = command_config("slow", command=[sys.executable, "-c", script])
    started = time.monotonic()
    with pytest.raises(ServerStartError) as caught:
        with ensure_servers(config, ["slow"], echo=lambda _: None, timeout_s=1.5):
            pytest.fail("must not yield")
    assert 1.5 <= time.monotonic() - started < 10
    expected_lines = "\n".join(f"line {i}" for i in range(5, 25))
    assert (
        str(caught.value)
        == f"resources server 'slow' did not start within 1.5 s; last log lines:\n{expected_lines}"
    )
    assert wait_gone([p.pid for p in processes_with(token)], 2) == []


def test_a_server_that_exits_fails_fast() -> None:
    config = command_config("dead", command=[sys.executable, "-c", "print('no config'); raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(ServerStartError) as caught:
        with ensure_servers(config, ["dead"], echo=lambda _: None, timeout_s=30):
            pass
    assert time.monotonic() - started < 10
    assert str(caught.value) == (
        "resources server 'dead' did not start within 30 s; last log lines:\n"
        "no config\n(the server process exited with code 3)"
    )


def test_server_is_stopped_after_an_exception() -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="boom"):
        with ensure_servers(command_config(), ["mcqa"], echo=lambda _: None, timeout_s=20) as urls:
            pids = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
            assert len(pids) == 2  # the server and its watchdog
            raise RuntimeError("boom")
    assert wait_gone(pids, 1) == []
    assert port_is_free(int(urls["mcqa"].rsplit(":", 1)[1]))


ENTRYPOINT_APP = """
import os, sys
import uvicorn, yaml
sys.path.insert(0, {repo!r})
from tests.reverify.server import create_app
config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
block = config[os.environ["NEMO_GYM_CONFIG_PATH"]]["resources_servers"]["mcqa_impl"]
assert os.path.realpath(os.getcwd()) == os.path.realpath({cwd!r}), os.getcwd()
assert config["head_server"] == {{"host": "127.0.0.1", "port": 11000}}, config["head_server"]
assert config["dry_run"] is False and config["agent"]["responses_api_agents"]
uvicorn.run(create_app(block["answer_mode"]), host=block["host"], port=block["port"], log_level="warning")
"""


@pytest.mark.parametrize("layout", ["directory-argument", "gym-layout-under-cwd"])
def test_entrypoint_gets_the_gym_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    server_dir = tmp_path / "resources_servers" / "mcqa_impl" if layout != "directory-argument" else tmp_path
    server_dir.mkdir(parents=True, exist_ok=True)
    (server_dir / "app.py").write_text(ENTRYPOINT_APP.format(repo=str(REPO_ROOT), cwd=str(server_dir)))
    monkeypatch.chdir(tmp_path)
    config = {
        "my_mcqa": {
            "resources_servers": {"mcqa_impl": {"entrypoint": "app.py", "answer_mode": "unsupported"}}
        },
        "agent": {"responses_api_agents": {"simple_agent": {"resources_server": {"name": "my_mcqa"}}}},
    }
    directory = str(server_dir) if layout == "directory-argument" else None
    with ensure_servers(
        config, ["my_mcqa"], echo=lambda _: None, python=sys.executable, directory=directory, timeout_s=20
    ) as urls:
        assert mode_of(urls["my_mcqa"]) == "unsupported"


PARENT = """
import sys, time
from gymflow.reverify.launch import ensure_servers
config = {"rs": {"resources_servers": {"rs": {"command": sys.argv[1:], "dir": %r}}}}
with ensure_servers(config, ["rs"], echo=lambda m: print(m, flush=True), timeout_s=20) as urls:
    print("READY", urls["rs"], flush=True)
    time.sleep(60)
"""


def start_parent() -> tuple[subprocess.Popen[str], int, list[int]]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT % str(REPO_ROOT), *SERVER_COMMAND],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=server_env(),
        start_new_session=True,
    )
    assert parent.stdout is not None
    deadline = time.monotonic() + 20
    line = ""
    while time.monotonic() < deadline and not line.startswith("READY"):
        line = parent.stdout.readline()
        if not line and parent.poll() is not None:
            break
    assert line.startswith("READY"), line
    port = int(line.split()[1].rsplit(":", 1)[1])
    descendants = [p.pid for p in psutil.Process(parent.pid).children(recursive=True)]
    assert len(descendants) >= 2  # the server and its watchdog
    return parent, port, descendants


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "kill-9"])
def test_parent_interrupted_or_killed_leaves_no_server(sig: signal.Signals) -> None:
    parent, port, descendants = start_parent()
    try:
        os.kill(parent.pid, sig)
        parent.wait(10)
        assert wait_gone(descendants, 5) == []
        assert port_is_free(port)
        if sig == signal.SIGINT:
            assert parent.stdout is not None
            assert "Stopped resources server 'rs'" in parent.stdout.read()
    finally:
        for pid in [parent.pid, *descendants]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.wait(5)
        assert parent.stdout is not None
        parent.stdout.close()


def test_gym_config_file_fixture_block_is_launchable(gym_config_file: Callable[..., Path]) -> None:
    import yaml

    path = gym_config_file({"mcqa": {"command": SERVER_COMMAND, "dir": str(REPO_ROOT)}})
    with ensure_servers(
        yaml.safe_load(path.read_text()), ["mcqa"], echo=lambda _: None, timeout_s=20
    ) as urls:
        assert mode_of(urls["mcqa"]) == "stateless"


def test_lifeline_cleanups_stop_launched_servers_while_open() -> None:
    from gymflow import lifeline

    with ensure_servers(command_config(), ["mcqa"], echo=lambda _: None, timeout_s=20) as urls:
        port = int(urls["mcqa"].rsplit(":", 1)[1])
        lifeline.run_cleanups(10)  # what a CLI signal handler does before exiting
        assert port_is_free(port)
    assert port_is_free(port)


CLI_READY = (REPO_ROOT / "gymflow" / "cli" / "reverify.py").is_file()


@pytest.mark.skipif(
    not CLI_READY, reason="gymflow/cli/reverify.py (the core helper's CLI) does not exist yet"
)
def test_cli_direct_launches_the_configured_server_and_stops_it(tmp_path: Path) -> None:
    import orjson
    import yaml

    from tests.reverify.server_process import mcqa_rows

    materialized, rollouts = mcqa_rows(3, 2, wrong=[(1, 0)])
    (tmp_path / "inputs.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in materialized))
    (tmp_path / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rollouts))
    port = free_port()
    config = {
        **command_config(port=port),
        "mcqa_simple_agent": {
            "responses_api_agents": {"simple_agent": {"resources_server": {"name": "mcqa"}}}
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    gymflow = Path(sys.executable).parent / "gymflow"
    command = [str(gymflow) if gymflow.is_file() else "gymflow", "eval", "reverify", "--direct"]
    result = subprocess.run(
        [*command, "--config", "config.yaml", "--inputs", "inputs.jsonl", "--rollouts", "rollouts.jsonl"]
        + ["--output", "out/reverified.jsonl"],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    console = result.stdout + result.stderr
    assert f"Resources server 'mcqa' is up at http://127.0.0.1:{port}" in console
    assert "Stopped resources server 'mcqa'" in console
    rows = [orjson.loads(line) for line in (tmp_path / "out" / "reverified.jsonl").read_bytes().splitlines()]
    rewards = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in rows}
    assert rewards == {(t, r): 0.0 if (t, r) == (1, 0) else 1.0 for t in range(3) for r in range(2)}
    assert port_is_free(port)
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(port) in (p.info["cmdline"] or [])]
    assert leftovers == []


@pytest.mark.skipif(
    not CLI_READY, reason="gymflow/cli/reverify.py (the core helper's CLI) does not exist yet"
)
def test_cli_reports_a_server_that_does_not_start(tmp_path: Path) -> None:
    import yaml

    token = uuid.uuid4().hex
    script = f"import time\nfor i in range(3): print('booting', i, flush=True)\ntime.sleep(30)  # {token}"
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump(command_config(command=[sys.executable, "-c", script]))
    )
    import orjson

    from tests.reverify.server_process import mcqa_rows

    materialized, rollouts = mcqa_rows(1, 1)  # one routed row: servers are started only for routed rows
    (tmp_path / "inputs.jsonl").write_bytes(orjson.dumps(materialized[0]) + b"\n")
    (tmp_path / "rollouts.jsonl").write_bytes(orjson.dumps(rollouts[0]) + b"\n")
    gymflow = Path(sys.executable).parent / "gymflow"
    command = [str(gymflow) if gymflow.is_file() else "gymflow", "eval", "reverify", "--direct"]
    result = subprocess.run(
        [*command, "--config", "config.yaml", "--inputs", "inputs.jsonl", "--rollouts", "rollouts.jsonl"]
        + ["--output", "out.jsonl", "++server_start_timeout_s=1"],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    expected = "Error: resources server 'mcqa' did not start within 1 s; last log lines:\n"
    assert expected + "booting 0\nbooting 1\nbooting 2" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
    assert wait_gone([p.pid for p in processes_with(token)], 5) == []
