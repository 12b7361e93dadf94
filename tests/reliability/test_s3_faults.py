"""Storage faults against a real S3 API (moto's server, as a process of its own so it can be
stopped or frozen): one-line errors within the configured timeouts, nothing half-written that
verifies (issue 11, attack 5)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.reliability.helpers import env, health_rows, run, start, wait_for, write_rows

CONNECT_S, READ_S, RETRIES = 1.0, 1.5, 2
KEY_ID, SECRET = "gymflow-fault-key", "gymflow-fault-secret"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Moto:
    """A moto S3 server process on 127.0.0.1."""

    def __init__(self, auth: bool = False) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra = {"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **extra},
        )
        assert wait_for(self._answers, 30, 0.1), "moto server did not start"

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):
                return True
        except OSError:
            return False

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def moto() -> Iterator[Moto]:
    server = Moto()
    try:
        yield server
    finally:
        server.stop()


def _config(tmp_path: Path, endpoint: str) -> dict[str, str]:
    config = tmp_path / "gymflow.yaml"
    config.write_text(
        "storage:\n  options:\n    s3:\n"
        f"      endpoint_url: {endpoint}\n      connect_timeout: {CONNECT_S}\n"
        f"      read_timeout: {READ_S}\n      retries: {RETRIES}\n"
    )
    return env(
        GYMFLOW_CONFIG=str(config),
        AWS_ACCESS_KEY_ID=KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        GYMFLOW_LOCK_WAIT="1",
        PYTHONFAULTHANDLER="1",
    )


def _upload_run(server: Moto, tmp_path: Path, rows: int = 300, padding: int = 0) -> str:
    client = server.client()
    client.create_bucket(Bucket="faults")
    local = write_rows(tmp_path / "local" / "rollouts.jsonl", health_rows(rows, padding=padding))
    client.upload_file(str(local), "faults", "run/rollouts.jsonl")
    return "s3://faults/run"


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith("WARNING")]
    assert len(lines) == 1, lines
    return lines[0]


def _bound(calls: int = 3) -> float:
    """An upper bound for ``calls`` storage operations that all time out, plus process start-up."""
    return calls * RETRIES * 2 * (CONNECT_S + READ_S) + 15


def test_wrong_credentials_are_one_line(tmp_path: Path) -> None:
    server = Moto(auth=True)  # every key is refused until IAM users exist
    try:
        variables = _config(tmp_path, server.url)
        for args in (
            ["eval", "health-check", "s3://faults/run", "--direct"],
            ["eval", "join", "s3://faults/run", "--direct"],
            ["eval", "aggregate", "-i", "s3://faults/run/*.jsonl", "-o", "s3://faults/o.jsonl", "--direct"],
        ):
            code, _, err = run(args, env=variables, timeout=_bound())
            line = _one_line(err)
            assert code != 0 and ("credentials were refused" in line or "check the credentials" in line), line
    finally:
        server.stop()


def test_missing_bucket_for_the_output_is_one_line(tmp_path: Path, moto: Moto) -> None:
    variables = _config(tmp_path, moto.url)
    shard = write_rows(tmp_path / "shards" / "s.jsonl", health_rows(10))
    args = ["eval", "aggregate", "-i", str(shard), "-o", "s3://no-such-bucket/out/m.jsonl", "--direct"]
    code, _, err = run([*args, "--no-health-check"], env=variables, timeout=_bound())
    line = _one_line(err)
    assert code == 1 and "s3://no-such-bucket/out" in line and "bucket does not exist" in line, line
    code, _, err = run(
        ["eval", "join", "s3://no-such-bucket/run", "--direct"], env=variables, timeout=_bound()
    )
    assert code == 2 and "Traceback" not in err and "no-such-bucket" in err


def _connected(process: subprocess.Popen[bytes], port: int) -> bool:
    try:
        connections = psutil.Process(process.pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.raddr and c.raddr.port == port for c in connections)


def _uploading(staging: Path) -> bool:
    return any(name.startswith("gymflow-upload-") for name in os.listdir(staging))


@pytest.mark.parametrize("fault", ["stopped", "frozen", "frozen-writing"])
def test_server_fault_mid_run_is_one_line_within_the_timeouts(tmp_path: Path, moto: Moto, fault: str) -> None:
    writing = fault == "frozen-writing"
    # 20 MB to read: the fault must come while the run still talks to the server (at 4 MB a
    # loaded machine could finish the run between two polls for its connection).
    run_url = _upload_run(moto, tmp_path, rows=3000 if writing else 1000, padding=0 if writing else 20000)
    staging = tmp_path / "staging"
    staging.mkdir()
    variables = {**_config(tmp_path, moto.url), "TMPDIR": str(staging)}
    process = start(["eval", "health-check", run_url, "--direct", "--no-cache"], env=variables)
    try:
        if writing:  # the reports are staged locally, then uploaded
            assert wait_for(lambda: _uploading(staging), 60, 0.002), process.communicate()
        else:
            assert wait_for(lambda: _connected(process, moto.port), 30), process.communicate()
        began = time.monotonic()
        if fault == "stopped":
            moto.process.kill()
        else:
            os.kill(moto.process.pid, signal.SIGSTOP)
        try:
            out, err = process.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGABRT)
            out, err = process.communicate()
            raise AssertionError(err.decode()[-8000:]) from None
        elapsed = time.monotonic() - began
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    line = _one_line(err.decode())
    assert process.returncode == 1, (process.returncode, line)
    said = ("cannot be reached", "did not answer in time", "dropped the connection mid-transfer")
    assert "s3://faults/run" in line and any(words in line for words in said), line
    # At most two storage calls in flight that time out on every attempt (the read and the
    # input hashing beside it), their backoff, and the bounded lease release.
    assert elapsed < 2 * RETRIES * (CONNECT_S + READ_S) + 3 + 3, elapsed
    print(f"{fault}: error after {elapsed:.1f} s")
    if fault.startswith("frozen"):
        os.kill(moto.process.pid, signal.SIGCONT)
        client = moto.client()
        names = [item["Key"] for item in client.list_objects_v2(Bucket="faults").get("Contents", [])]
        assert "run/quality_summary.provenance.json" not in names, names
