"""OpenLineage run events of each report (issue 20 item 4), received by an HTTP server on loopback
that the test starts: one START and one COMPLETE (or FAIL) per command's run, with datasets named
after the record's URIs and versioned by the SHA-256 the provenance record holds."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gymflow import lineage
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import ServerProcess, gym_config, mcqa_rows, start_server, write_gym_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Receiver:
    """An OpenLineage HTTP endpoint on 127.0.0.1 that keeps every event POSTed to it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.paths.append(self.path)
                received.events.append(json.loads(body))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def _gymflow(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The ``gymflow`` CLI in a process of its own, with none of this machine's OpenLineage or
    gymflow settings but ``env``'s (the library's config-file lookup starts in ``cwd``). Unless
    ``env`` names a config, a run may wait 30 s for its events: a busy machine delays no event."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE", "GYMFLOW_CONFIG"))}
    if "GYMFLOW_CONFIG" not in env:
        patient = cwd / "patient.yaml"
        patient.write_text(json.dumps({"openlineage": {"timeout_s": 30}}))
        env = {**env, "GYMFLOW_CONFIG": str(patient)}
    command = [sys.executable, "-m", "gymflow.cli", *args]
    return subprocess.run(
        command, cwd=cwd, env={**clean, "HOME": str(cwd), **env}, capture_output=True, text=True, timeout=120
    )


def _record(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def _datasets(entries: list[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    return [(d["namespace"], d["name"], d["facets"]["version"]["datasetVersion"]) for d in entries]


def _expected(entries: list[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The record's files as datasets: local ones in the ``file`` namespace, named by their path."""
    return [("file", str(e["uri"]).removeprefix("file://"), str(e["sha256"])) for e in entries]


def _assert_run(events: list[dict[str, Any]], job: str, end: str, kind: str = "direct") -> dict[str, Any]:
    """Two events of one run of ``job``, START then ``end``; the last one."""
    assert [(e["eventType"], e["job"]["name"]) for e in events] == [("START", job), (end, job)]
    start, last = events
    assert start["run"]["runId"] == last["run"]["runId"]
    assert all(e["job"]["namespace"] == lineage.DEFAULT_NAMESPACE for e in events)
    assert start["inputs"] == [] and start["outputs"] == []
    assert start["eventTime"] <= last["eventTime"]
    tags = {t["key"]: t["value"] for t in last["run"]["facets"]["tags"]["tags"]}
    assert tags["gymflow.orchestrator.kind"] == kind
    if kind == "prefect":
        assert tags["gymflow.orchestrator.flow_run_id"] and tags["gymflow.orchestrator.flow_run_url"]
    return last


def test_each_command_emits_start_and_complete_with_the_records_hashes(
    tmp_path: Path, receiver: Receiver
) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "run", run)
    health = _gymflow(["eval", "health-check", str(run), "--direct"], tmp_path, OPENLINEAGE_URL=receiver.url)
    assert health.returncode == 0, health.stderr
    assert "OpenLineage" not in health.stderr
    complete = _assert_run(receiver.events, "gymflow.eval_health_check", "COMPLETE")
    record = _record(run / "quality_summary.provenance.json")
    assert _datasets(complete["inputs"]) == _expected(record["inputs"])
    assert _datasets(complete["outputs"]) == _expected(record["outputs"])
    assert [name for _, name, _ in _datasets(complete["outputs"])] == [
        str(run / "quality_summary.json"),
        str(run / "rollout_verdicts.jsonl"),
    ]
    assert set(receiver.paths) == {"/api/v1/lineage"}

    # The same run again is up to date: a run of its own, with the same datasets and versions.
    receiver.events.clear()
    again = _gymflow(["eval", "health-check", str(run), "--direct"], tmp_path, OPENLINEAGE_URL=receiver.url)
    assert again.returncode == 0 and "up to date" in again.stderr
    cached = _assert_run(receiver.events, "gymflow.eval_health_check", "COMPLETE")
    assert cached["run"]["runId"] != complete["run"]["runId"]
    assert (cached["inputs"], cached["outputs"]) == (complete["inputs"], complete["outputs"])

    receiver.events.clear()
    post = tmp_path / "post"
    shutil.copytree(EXAMPLES / "post_run", post)
    output = post / "rollouts.jsonl"
    args = [
        "eval",
        "aggregate",
        "-i",
        f"{post}/shards/*.jsonl",
        "-o",
        str(output),
        "--no-health-check",
        "--direct",
    ]
    aggregate = _gymflow(args, tmp_path, OPENLINEAGE_URL=receiver.url)
    assert aggregate.returncode == 0, aggregate.stderr
    complete = _assert_run(receiver.events, "gymflow.eval_aggregate", "COMPLETE")
    record = _record(post / "rollouts.provenance.json")
    assert _datasets(complete["inputs"]) == _expected(record["inputs"])
    assert _datasets(complete["outputs"]) == _expected(record["outputs"])
    assert {name for _, name, _ in _datasets(complete["inputs"])} == {
        str(post / "shards" / "rollouts_shard_0.jsonl"),
        str(post / "shards" / "rollouts_shard_1.jsonl"),
    }


def test_a_failing_run_emits_fail_with_its_error(tmp_path: Path, receiver: Receiver) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "run", run)  # its rollouts file has a malformed line
    args = ["eval", "aggregate", "-i", str(run / "rollouts.jsonl"), "-o", str(run / "out.jsonl"), "--direct"]
    failed = _gymflow(args, tmp_path, OPENLINEAGE_URL=receiver.url)
    assert failed.returncode == 1 and "Malformed JSON" in failed.stderr
    fail = _assert_run(receiver.events, "gymflow.eval_aggregate", "FAIL")
    error = fail["run"]["facets"]["errorMessage"]
    assert "Malformed JSON" in error["message"] and error["programmingLanguage"] == "python"
    assert fail["outputs"] == []


def test_the_config_block_selects_the_librarys_file_transport(tmp_path: Path) -> None:
    """``eval join`` this time, its events written by the library's file transport."""
    run = tmp_path / "raw"
    shutil.copytree(EXAMPLES / "raw_run", run)
    events = tmp_path / "events.jsonl"
    config = tmp_path / "gymflow.yaml"
    transport = {"type": "file", "log_file_path": str(events), "append": True}
    block = {"transport": transport, "namespace": "audit", "timeout_s": 30}
    config.write_text(json.dumps({"openlineage": block}))
    done = _gymflow(["eval", "join", str(run), "--direct"], tmp_path, GYMFLOW_CONFIG=str(config))
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in events.read_text().splitlines()]
    states = [(e["eventType"], e["job"]["namespace"], e["job"]["name"]) for e in written]
    assert states == [("START", "audit", "gymflow.eval_join"), ("COMPLETE", "audit", "gymflow.eval_join")]
    record = _record(run / "rollouts_joined.provenance.json")
    assert _datasets(written[1]["inputs"]) == _expected(record["inputs"])
    assert _datasets(written[1]["outputs"]) == _expected(record["outputs"])
    assert len(record["inputs"]) > 1  # the rollouts and every capture file


def test_an_endpoint_that_never_answers_costs_one_warning_and_the_timeout(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "run", run)
    config = tmp_path / "gymflow.yaml"
    config.write_text(json.dumps({"openlineage": {"timeout_s": 0.5}}))
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        done = _gymflow(
            ["eval", "health-check", str(run), "--direct"],
            tmp_path,
            OPENLINEAGE_URL=url,
            GYMFLOW_CONFIG=str(config),
        )
        took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert (run / "quality_summary.provenance.json").is_file()
    warnings = [line for line in done.stderr.splitlines() if "OpenLineage" in line]
    assert warnings == ["OpenLineage events of gymflow.eval_health_check: not sent within 0.5 s"]
    assert took < 15  # the CLI's own start-up and the run, plus at most the half second


def test_unconfigured_nothing_is_imported_or_emitted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "run", run)
    script = (
        "import sys\nfrom gymflow.cli import main\n"
        f"code = main(['eval', 'health-check', {str(run)!r}, '--direct'])\n"
        "assert code == 0, code\n"
        "assert not [m for m in sys.modules if m.startswith('openlineage')], 'openlineage imported'\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE", "GYMFLOW_CONFIG"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**clean, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///data/run/rollouts.jsonl", ("file", "/data/run/rollouts.jsonl")),
        ("file:///data/a b#1%20.jsonl", ("file", "/data/a b#1%20.jsonl")),
        ("s3://bucket/run/rollouts.jsonl", ("s3://bucket", "run/rollouts.jsonl")),
        ("gs://bucket/x.json", ("gs://bucket", "x.json")),
    ],
)
def test_dataset_names_follow_the_openlineage_naming_of_files(uri: str, expected: tuple[str, str]) -> None:
    assert lineage.dataset_name(uri) == expected


def test_job_names_are_the_commands() -> None:
    assert lineage.job_name("eval health-check") == "gymflow.eval_health_check"
    assert lineage.job_name("eval aggregate") == "gymflow.eval_aggregate"


@pytest.fixture
def verifier(tmp_path: Path) -> Iterator[ServerProcess]:
    """The real ``/verify`` test server on 127.0.0.1, for this test only."""
    with start_server(log_dir=tmp_path) as running:
        yield running


def _runs(events: list[dict[str, Any]], kind: str = "direct") -> dict[str, dict[str, Any]]:
    """Each job's run, checked to be START then COMPLETE (in the order the steps ran), by job."""
    jobs = list(dict.fromkeys(e["job"]["name"] for e in events))
    out = {}
    for job in jobs:
        out[job] = _assert_run([e for e in events if e["job"]["name"] == job], job, "COMPLETE", kind)
    assert [e["job"]["name"] for e in events] == [
        job for job in jobs for _ in range(2)
    ]  # one after the other
    return out


def _assert_datasets(complete: dict[str, Any], record_path: Path) -> dict[str, Any]:
    """The COMPLETE event's datasets are the record's files, versioned by their SHA-256."""
    record = _record(record_path)
    assert _datasets(complete["inputs"]) == _expected(record["inputs"])
    assert _datasets(complete["outputs"]) == _expected(record["outputs"])
    return record


@pytest.mark.parametrize("kind", ["direct", "prefect"])
def test_reverify_emits_its_run_with_the_records_hashes(
    kind: str, tmp_path: Path, receiver: Receiver, verifier: ServerProcess
) -> None:
    materialized, rollouts = mcqa_rows(3, 2, wrong=[(1, 0)])
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": verifier})
    verifier.set((2, 1), kind="judge_failed")  # one row lands in the failures sidecar
    output = tmp_path / "out" / "reverified.jsonl"
    args = ["eval", "reverify", "--config", str(config), "--inputs", str(tmp_path / "inputs.jsonl")]
    args += ["--rollouts", str(tmp_path / "rollouts.jsonl"), "--output", str(output)]
    args += ["--direct"] if kind == "direct" else []
    done = _gymflow(args, tmp_path, OPENLINEAGE_URL=receiver.url)
    assert done.returncode == 0, done.stderr
    assert "OpenLineage" not in done.stderr
    assert len(receiver.events) == 2
    runs = _runs(receiver.events, kind)
    assert list(runs) == ["gymflow.eval_reverify"]
    record = _assert_datasets(runs["gymflow.eval_reverify"], output.with_name("reverified.provenance.json"))
    names = {name for _, name, _ in _datasets(runs["gymflow.eval_reverify"]["inputs"])}
    assert {str(tmp_path / "inputs.jsonl"), str(tmp_path / "rollouts.jsonl"), str(config)} <= names
    outputs = [name for _, name, _ in _datasets(runs["gymflow.eval_reverify"]["outputs"])]
    assert {str(output), str(tmp_path / "out" / "reverified_failures.jsonl")} <= set(outputs)
    assert str(tmp_path / "out" / "reverified_aggregate_metrics.json") in outputs
    for entry in record["outputs"]:  # the versions are the bytes on disk
        path = Path(str(entry["uri"]).removeprefix("file://"))
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]


_POST_JOBS = [
    "gymflow.eval_aggregate",
    "gymflow.eval_health_check",
    "gymflow.eval_post_healthy_metrics",
    "gymflow.eval_reverify",
]


def test_post_emits_one_run_per_step_with_the_records_hashes(
    tmp_path: Path, receiver: Receiver, verifier: ServerProcess
) -> None:
    run = tmp_path / "run"
    materialized, rollouts = mcqa_rows(4, 2, wrong=[(1, 0)])
    write_jsonl(run / "shards" / "rollouts_shard_0.jsonl", rollouts[:4])
    write_jsonl(run / "shards" / "rollouts_shard_1.jsonl", rollouts[4:])
    write_jsonl(run / "rollouts_materialized_inputs.jsonl", materialized)
    config = tmp_path / "post.yaml"
    config.write_text(json.dumps({**gym_config({"mcqa": verifier}), "reverify": {"enabled": True}}))
    records = {
        "gymflow.eval_aggregate": run / "rollouts.provenance.json",
        "gymflow.eval_health_check": run / "quality_summary.provenance.json",
        "gymflow.eval_post_healthy_metrics": run / "rollouts_aggregate_metrics.healthy.provenance.json",
        "gymflow.eval_reverify": run / "rollouts_reverified.provenance.json",
    }

    # Through Prefect first: every step does its work inside the flow run.
    done = _gymflow(
        ["eval", "post", str(run), "--config", str(config)], tmp_path, OPENLINEAGE_URL=receiver.url
    )
    assert done.returncode == 0, done.stderr
    assert "OpenLineage" not in done.stderr
    assert len(receiver.events) == 8
    runs = _runs(receiver.events, "prefect")
    assert list(runs) == _POST_JOBS
    for job, record in records.items():
        assert _assert_datasets(runs[job], record)["orchestrator"]["kind"] == "prefect"
    healthy = runs["gymflow.eval_post_healthy_metrics"]
    assert [name for _, name, _ in _datasets(healthy["inputs"])] == [
        str(run / "rollouts.jsonl"),
        str(run / "rollout_verdicts.jsonl"),
        str(config),  # the Gym config groups the rows
    ]
    metrics = run / "rollouts_aggregate_metrics.healthy.json"
    digest = hashlib.sha256(metrics.read_bytes()).hexdigest()
    assert _datasets(healthy["outputs"]) == [("file", str(metrics), digest)]

    # Again in-process: every step is up to date, a run of its own with the same datasets.
    receiver.events.clear()
    args = ["eval", "post", str(run), "--config", str(config), "--direct"]
    again = _gymflow(args, tmp_path, OPENLINEAGE_URL=receiver.url)
    assert again.returncode == 0, again.stderr
    assert "OpenLineage" not in again.stderr
    assert len(receiver.events) == 8
    cached = _runs(receiver.events)
    assert list(cached) == _POST_JOBS
    for job in _POST_JOBS:
        assert cached[job]["run"]["runId"] != runs[job]["run"]["runId"]
        assert (cached[job]["inputs"], cached[job]["outputs"]) == (runs[job]["inputs"], runs[job]["outputs"])
