"""The default mode on a Dask cluster of two workers started by hand (``dask scheduler`` and two
``dask worker`` processes), each in a working directory of its own: inputs given as relative paths,
as absolute ones and on the S3 API server reach the workers as absolute URIs, both workers compute,
and every report is byte-identical to ``--direct``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow import storage
from tests.fixtures.s3 import TEST_KEY_ID, TEST_REGION, TEST_SECRET

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytest.importorskip("prefect_dask", reason="the dask extra is part of the test install")


class Cluster:
    def __init__(self, address: str, workers: list[subprocess.Popen[bytes]]) -> None:
        self.address = address
        self.workers = workers

    def executed(self) -> list[int]:
        """Tasks each worker has executed so far."""
        from distributed import Client

        with Client(self.address, timeout=20) as client:
            counts = client.run(lambda dask_worker: dask_worker.state.executed_count)
        return [counts[name] for name in sorted(counts)]


@pytest.fixture(scope="module")
def prefect_url() -> str:
    from gymflow.flows import _server

    return _server.ensure(90.0)[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, prefect_url: str) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("dask")
    scheduler_file = base / "scheduler.json"
    env = {**os.environ, "PREFECT_API_URL": prefect_url, "DASK_LOGGING__DISTRIBUTED": "error"}
    processes = [
        subprocess.Popen(
            [
                "dask",
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                # Its HTTP routes bind 8787 even without the dashboard: a LocalCluster started by
                # another test at the same time would warn that the port is taken (a failure here).
                "--dashboard-address",
                "127.0.0.1:0",
                "--scheduler-file",
                str(scheduler_file),
            ],
            cwd=base,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = []
        for name in ("one", "two"):
            home = base / name  # each worker in a directory of its own, with its own temp dir
            (home / "tmp").mkdir(parents=True)
            workers.append(
                subprocess.Popen(
                    [
                        "dask",
                        "worker",
                        address,
                        "--nworkers",
                        "1",
                        "--nthreads",
                        "1",
                        "--no-dashboard",
                        "--name",
                        name,
                        "--local-directory",
                        str(home / "tmp"),
                    ],
                    cwd=home,
                    env={**env, "TMPDIR": str(home / "tmp")},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        processes += workers
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield Cluster(address, workers)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def _gymflow(argv: list[str], cwd: Path, config: Path, prefect_url: str) -> str:
    env = {**os.environ, "GYMFLOW_CONFIG": str(config), "PREFECT_API_URL": prefect_url}
    done = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _config(path: Path, dask: str | None, s3: str | None = None) -> Path:
    lines = []
    if dask:
        lines += ["runner:", "  kind: dask", f"  dask_address: {dask}"]
    if s3:
        lines += [
            "storage:",
            "  options:",
            "    s3:",
            f"      endpoint_url: {s3}",
            f"      key: {TEST_KEY_ID}",
            f"      secret: {TEST_SECRET}",
            "      client_kwargs:",
            f"        region_name: {TEST_REGION}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_commands_on_two_dask_workers_with_their_own_directories(
    cluster: Cluster, prefect_url: str, tmp_path: Path
) -> None:
    dask = _config(tmp_path / "dask.yaml", cluster.address)
    plain = _config(tmp_path / "plain.yaml", None)
    before = cluster.executed()
    for mode, config in (("direct", plain), ("dask", dask)):
        work = tmp_path / mode
        shutil.copytree(EXAMPLES / "post_run" / "shards", work / "agg" / "shards")
        shutil.copytree(EXAMPLES / "run", work / "health")
        shutil.copytree(EXAMPLES / "raw_run", work / "raw")
        extra = ["--direct"] if mode == "direct" else []
        # relative inputs: resolved in the client, never in a worker's own working directory
        _gymflow(
            [
                "eval",
                "aggregate",
                "-i",
                "agg/shards/*.jsonl",
                "-o",
                "agg/rollouts.jsonl",
                "--no-health-check",
                *extra,
            ],
            work,
            config,
            prefect_url,
        )
        _gymflow(["eval", "health-check", "health", *extra], work, config, prefect_url)
        # absolute inputs, two ranges (one per worker)
        _gymflow(["eval", "join", str(work / "raw"), "--workers", "2", *extra], tmp_path, config, prefect_url)
    for relative in (
        "agg/rollouts.jsonl",
        "agg/rollouts_aggregate_metrics.json",
        "health/quality_summary.json",
        "health/rollout_verdicts.jsonl",
        "raw/rollouts_joined.jsonl",
    ):
        direct, dasked = (tmp_path / mode / relative for mode in ("direct", "dask"))
        assert dasked.read_bytes() == direct.read_bytes(), relative
    record = json.loads((tmp_path / "dask" / "health" / "quality_summary.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect"
    after = cluster.executed()
    assert all(later > earlier for earlier, later in zip(before, after, strict=True)), (before, after)


def test_s3_inputs_on_dask_workers(
    cluster: Cluster, prefect_url: str, tmp_path: Path, s3_bucket: str, s3_server: str
) -> None:
    for shard in sorted((EXAMPLES / "post_run" / "shards").glob("*.jsonl")):
        storage.write_atomic(f"{s3_bucket}/shards/{shard.name}", shard.read_bytes())
    shutil.copytree(EXAMPLES / "post_run" / "shards", tmp_path / "local" / "shards")
    _gymflow(
        [
            "eval",
            "aggregate",
            "-i",
            "local/shards/*.jsonl",
            "-o",
            "local/rollouts.jsonl",
            "--no-health-check",
            "--direct",
        ],
        tmp_path,
        _config(tmp_path / "plain.yaml", None),
        prefect_url,
    )
    config = _config(tmp_path / "s3.yaml", cluster.address, s3_server)
    _gymflow(
        [
            "eval",
            "aggregate",
            "-i",
            f"{s3_bucket}/shards/*.jsonl",
            "-o",
            f"{s3_bucket}/rollouts.jsonl",
            "--no-health-check",
        ],
        tmp_path,
        config,
        prefect_url,
    )
    with storage.open_read(f"{s3_bucket}/rollouts.jsonl") as handle:
        assert handle.read() == (tmp_path / "local" / "rollouts.jsonl").read_bytes()
