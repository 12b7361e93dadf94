"""Issue 18: a failed S3 write keeps the work. When the endpoint dies mid-run, the verified rows stay in
the local staging files the error names, and ``--resume`` continues from them (real moto server)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gymflow import locking, storage
from gymflow.reverify._paths import staging_dir
from tests.fixtures.s3 import TEST_KEY_ID, TEST_REGION, TEST_SECRET
from tests.reverify.cases import Case, case_fixture, key  # noqa: F401
from tests.reverify.server_process import mcqa_rows

pytestmark = pytest.mark.timeout(120)


@dataclass
class Endpoint:
    """A moto S3 server of this test alone: stopped and started again on the same port (moto keeps
    its buckets in this process, so a restart finds them)."""

    server: Any
    port: int
    bucket: str

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Endpoint]:
    import s3fs  # type: ignore[import-untyped]
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for name, value in {
        "AWS_ACCESS_KEY_ID": TEST_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": TEST_SECRET,
        "AWS_DEFAULT_REGION": TEST_REGION,
        "AWS_ENDPOINT_URL": url,
        "AWS_CONFIG_FILE": "/nonexistent/gymflow-test-aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/gymflow-test-aws-credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    scope = storage.using(
        {"s3": {"endpoint_url": url, "connect_timeout": 1, "read_timeout": 2, "retries": 1}}
    )
    scope.__enter__()
    s3fs.S3FileSystem.clear_instance_cache()
    bucket = f"gymflow-test-{uuid.uuid4().hex[:12]}"
    fs, _ = storage.filesystem(f"s3://{bucket}")
    fs.mkdir(bucket)
    ep = Endpoint(server, port, f"s3://{bucket}")
    try:
        yield ep
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        scope.__exit__(None, None, None)
        try:
            with urllib.request.urlopen(
                urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=5
            ):
                pass
        finally:
            ep.stop()


def _stop_after(endpoint: Endpoint, staged: Path, rows: int) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if staged.is_file() and staged.read_bytes().count(b"\n") >= rows:
                endpoint.stop()
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _args(case: Case, bucket: str) -> tuple[str, ...]:
    inputs, rollouts, output = (f"{bucket}/run/{n}" for n in ("inputs.jsonl", "rollouts.jsonl", "out.jsonl"))
    for url, rows in ((inputs, case.materialized), (rollouts, case.rollouts)):
        storage.write_atomic(url, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return (
        "--direct",
        "--config",
        str(case.config()),
        "--inputs",
        inputs,
        "--rollouts",
        rollouts,
        "--output",
        output,
    )


def _remote_rows(url: str) -> list[dict[str, Any]]:
    with storage.open_read(url) as handle:
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]


def test_endpoint_dies_mid_run_rows_kept_and_resumed(case: Case, endpoint: Endpoint) -> None:
    case.materialized, case.rollouts = mcqa_rows(15, 2)
    case.server.set(None, latency_ms=20)
    case.server.set((0, 1), kind="status", status=422)  # one failure row, staged in the sidecar
    args = _args(case, endpoint.bucket)
    output = f"{endpoint.bucket}/run/out.jsonl"
    staging = Path(staging_dir(output))
    staged, staged_sidecar = staging / "out.jsonl", staging / "out_failures.jsonl"
    watcher = _stop_after(endpoint, staged, 5)
    outcome = case.cli(*args, "--concurrency", "2")
    watcher.join()
    assert outcome.code == 1, outcome
    assert "Traceback" not in outcome.err
    errors = [line for line in outcome.err.splitlines() if line.startswith("Error: ")]
    assert errors == [outcome.error], outcome.err
    assert outcome.error.endswith(
        f"The verified rows are kept in '{staged}' and the failures in '{staged_sidecar}': run the same "
        "command with --resume to continue from them."
    )
    kept = [json.loads(line) for line in staged.read_text().splitlines()]
    assert len(kept) == 29  # every row was verified; only the put failed
    # a fresh run is refused: the staged rows are not thrown away silently
    endpoint.start()
    case.server.reset()
    # The dead endpoint kept the run's lease object. A new process takes it over at once (its holder
    # pid is gone); this test runs in the same process, so it removes the lease itself.
    fs, lock = storage.filesystem(locking.lock_path(output))
    fs.rm_file(lock)
    outcome = case.cli(*args)
    assert outcome.code == 1 and outcome.error.startswith(f"Error: Output file already exists: '{staged}'")
    # --resume continues from the staged files, verifies only the failed row, and puts everything
    outcome = case.cli(*args, "--resume")
    assert outcome.code == 0, outcome
    assert f"Continuing from the rows an earlier run staged in '{staging}'" in outcome.out
    assert "- 29 rows already done (in main jsonl)" in outcome.lines
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [(0, 1)]
    rows = _remote_rows(output)
    assert sorted(key(r) for r in rows) == sorted(key(r) for r in case.rollouts)
    assert not staging.exists() and not staging.parent.exists()  # put: the staging is gone


def test_overwrite_discards_staged_rows(case: Case, endpoint: Endpoint) -> None:
    args = _args(case, endpoint.bucket)
    output = f"{endpoint.bucket}/run/out.jsonl"
    staging = Path(staging_dir(output))
    staging.mkdir(parents=True)
    (staging / "out.jsonl").write_text('{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 0.5}\n')
    outcome = case.cli(*args, "--overwrite")
    assert outcome.code == 0, outcome
    assert f"Deleted existing output file: '{staging / 'out.jsonl'}'" in outcome.lines
    assert len(_remote_rows(output)) == 9 and not staging.exists()
