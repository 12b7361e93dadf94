"""Every storage operation is bounded by ``storage.timeout_s`` (issue 18, Storage).

The endpoint is a frozen listener on loopback: it accepts TCP connections and never answers, the
fault that left ``eval aggregate`` (in ``storage.glob``) and ``eval reverify`` (in the run lock's
conditional create) waiting forever. Each operation, and each command with ``--direct``, must end
within the budget plus a little slack, with one line that names the URL and no credentials.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gymflow import locking, storage, storage_faults
from gymflow.cli import main
from gymflow.errors import StorageError
from tests.reliability.helpers import health_rows, write_rows
from tests.reverify.server_process import free_port, mcqa_rows, write_gym_config

BUDGET_S = 3.0
SLACK_S = 4.0
"""Beyond the budget: the command's start (config, imports), and the first request of a process
building its S3 client on fsspec's event loop, which a timeout cannot cut short (about 1 s here,
up to 3 s on a loaded machine). Before, these runs took 250 s or never ended."""
SECRET = "frozen-endpoint-secret"


class FrozenEndpoint:
    """A loopback listener that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self.scope = contextlib.ExitStack()  # the storage options of the test, left at its end
        self._thread = threading.Thread(target=self._accept, name="frozen-endpoint", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.server.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[FrozenEndpoint]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "frozen-key-id",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "GYMFLOW_LOCK_WAIT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    endpoint = FrozenEndpoint()
    try:
        with endpoint.scope:
            yield endpoint
    finally:
        endpoint.close()


def _configure(endpoint: FrozenEndpoint) -> None:
    options = {"s3": {"endpoint_url": endpoint.url, "secret": SECRET, "key": "frozen-key-id"}}
    endpoint.scope.enter_context(storage.using(storage_faults.with_timeout_s(options, BUDGET_S)))


def _timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    began = time.monotonic()
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return time.monotonic() - began, exc
    return time.monotonic() - began, None


def _read_all() -> bytes:
    with storage.open_read("s3://frozen/run/rollouts.jsonl") as handle:
        return handle.read()


def _take_lock() -> None:
    with locking.run_lock("s3://frozen/run/out.jsonl", "test"):
        pass


OPERATIONS: dict[str, tuple[Callable[[], Any], str]] = {
    "glob": (lambda: storage.glob("s3://frozen/run/*.jsonl"), "s3://frozen/run/*.jsonl: cannot list it"),
    "open-read": (_read_all, "s3://frozen/run/rollouts.jsonl: cannot open it"),
    "read-range": (
        lambda: storage.read_range("s3://frozen/run/rollouts.jsonl", 0, 100),
        "s3://frozen/run/rollouts.jsonl: cannot read it",
    ),
    "size": (
        lambda: storage.size("s3://frozen/run/rollouts.jsonl"),
        "s3://frozen/run/rollouts.jsonl: cannot stat",
    ),
    "sha256": (
        lambda: storage.sha256("s3://frozen/run/rollouts.jsonl"),
        "s3://frozen/run/rollouts.jsonl: cannot",
    ),
    "exists": (lambda: storage.exists("s3://frozen/run"), "s3://frozen/run: cannot check it"),
    "write-atomic": (
        lambda: storage.write_atomic("s3://frozen/run/r.json", b"{}\n"),
        "s3://frozen/run/r.json: cannot write it",
    ),
    "write-atomic-lines": (
        lambda: storage.write_atomic_lines("s3://frozen/run/r.jsonl", iter([b"{}\n"] * 10)),
        "s3://frozen/run/r.jsonl: cannot write it",
    ),
    "lock-create": (_take_lock, "s3://frozen/run/.out.jsonl.lock: cannot take the run lock"),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_each_storage_operation_ends_within_the_budget(frozen: FrozenEndpoint, operation: str) -> None:
    _configure(frozen)
    call, expected = OPERATIONS[operation]
    elapsed, error = _timed(call)
    assert isinstance(error, StorageError), repr(error)
    message = str(error)
    assert elapsed < BUDGET_S + SLACK_S, (elapsed, message)
    assert message.startswith(expected), message
    assert f"did not answer in time (storage.timeout_s = {BUDGET_S:g} s" in message, message
    assert SECRET not in message and "\n" not in message
    assert frozen.accepted, "the operation never reached the endpoint"


def test_an_endpoint_that_did_not_answer_is_not_waited_on_again_within_the_budget(
    frozen: FrozenEndpoint,
) -> None:
    _configure(frozen)
    first, error = _timed(lambda: storage.size("s3://frozen/run/a.jsonl"))
    assert isinstance(error, StorageError) and first > 1, (first, error)
    again, error = _timed(lambda: storage.glob("s3://frozen/run/*.jsonl"))
    assert isinstance(error, StorageError) and again < 0.5, (again, error)
    assert str(error).startswith("s3://frozen/run/*.jsonl: cannot "), error
    assert "the storage endpoint did not answer in time" in str(error), error


def test_the_default_budget_leaves_room_for_every_attempt() -> None:
    connect, read, attempts = storage_faults.request_limits(storage_faults.DEFAULT_TIMEOUT_S)
    assert attempts == storage_faults.DEFAULT_RETRIES
    # All attempts and botocore's longest backoff fit in the budget, before the wall-clock limit.
    assert attempts * (connect + read) + 3 < storage_faults.DEFAULT_TIMEOUT_S
    assert storage_faults.request_limits(BUDGET_S)[2] == 1  # a small budget: one attempt, all of it


def _gym_config(tmp_path: Path) -> Path:
    # The resources server is never reached: storage fails first.
    return write_gym_config(tmp_path / "gym.yaml", {"mcqa": {"host": "127.0.0.1", "port": free_port()}})


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    local = write_rows(tmp_path / "run" / "rollouts.jsonl", health_rows(10))
    materialized, rollouts = mcqa_rows(2, 2)
    inputs = write_rows(tmp_path / "inputs.jsonl", materialized)
    rollouts_file = write_rows(tmp_path / "rollouts.jsonl", rollouts)
    gym = str(_gym_config(tmp_path))
    return {
        "health-check": ["eval", "health-check", "s3://frozen/run"],
        "aggregate-input": [
            "eval",
            "aggregate",
            "-i",
            "s3://frozen/run/*.jsonl",
            "-o",
            str(tmp_path / "m.jsonl"),
        ],
        "aggregate-output": ["eval", "aggregate", "-i", str(local), "-o", "s3://frozen/out/m.jsonl"],
        "join": ["eval", "join", "s3://frozen/run"],
        "reverify-input": [
            "eval",
            "reverify",
            "--config",
            gym,
            "--inputs",
            "s3://frozen/run/inputs.jsonl",
            "--rollouts",
            "s3://frozen/run/rollouts.jsonl",
            "--output",
            str(tmp_path / "out.jsonl"),
        ],  # fmt: skip
        "reverify-output": [
            "eval",
            "reverify",
            "--config",
            gym,
            "--inputs",
            str(inputs),
            "--rollouts",
            str(rollouts_file),
            "--output",
            "s3://frozen/out/out.jsonl",
        ],  # fmt: skip
        "post": ["eval", "post", "s3://frozen/run"],
    }


COMMANDS = [
    "health-check",
    "aggregate-input",
    "aggregate-output",
    "join",
    "reverify-input",
    "reverify-output",
    "post",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_ends_within_the_budget_with_one_line(
    frozen: FrozenEndpoint,
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "gymflow.yaml"
    config.write_text(
        f"storage:\n  timeout_s: {BUDGET_S}\n  options:\n    s3:\n"
        f"      endpoint_url: {frozen.url}\n      secret: {SECRET}\n      key: frozen-key-id\n"
    )
    monkeypatch.setenv("GYMFLOW_CONFIG", str(config))
    args = [*_commands(tmp_path)[command], "--direct"]
    capsys.readouterr()
    codes: list[int] = []
    elapsed, error = _timed(lambda: codes.append(main(args)))
    err = capsys.readouterr().err
    if isinstance(error, SystemExit):  # a usage-class error (exit 2), printed by argparse
        codes.append(int(error.code or 0))
    else:
        assert error is None, repr(error)
    assert codes and codes[0] != 0, codes
    assert "Traceback" not in err and SECRET not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "s3://frozen/" in lines[0], lines[0]
    assert f"did not answer in time (storage.timeout_s = {BUDGET_S:g} s" in lines[0], lines[0]
    assert elapsed < BUDGET_S + SLACK_S, (elapsed, lines[0])
    assert not list(tmp_path.glob("**/*.tmp")) and not list(tmp_path.glob("out*.jsonl"))


def test_the_run_lock_is_bounded_by_its_request_timeouts_not_the_whole_budget(
    frozen: FrozenEndpoint,
) -> None:
    # A 60 s budget, requests of 0.5 s + 0.5 s, one attempt: each call of the lock is one small
    # request, so it ends with its request's timeouts (plus slack), not after the whole budget,
    # even when the call is not cut by the client's own timeouts (a busy event loop; a frozen
    # server mid-request seen in CI).
    options = {
        "s3": {
            "endpoint_url": frozen.url,
            "secret": SECRET,
            "key": "frozen-key-id",
            "connect_timeout": 0.5,
            "read_timeout": 0.5,
            "retries": 1,
        }
    }
    frozen.scope.enter_context(storage.using(storage_faults.with_timeout_s(options, 60.0)))
    fs, _ = storage.filesystem("s3://frozen/run/.out.jsonl.lock")
    assert storage.limit(fs) == {"timeout": 60.0}
    assert storage.limit(fs, one_request=True) == {"timeout": 1.0}
    elapsed, error = _timed(_take_lock)
    assert isinstance(error, StorageError), repr(error)
    assert str(error).startswith("s3://frozen/run/.out.jsonl.lock: cannot take the run lock"), error
    assert elapsed < 1.0 + SLACK_S, elapsed
