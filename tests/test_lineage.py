"""OpenLineage run events of each report (issue 20 item 4), received by an HTTP server on loopback
that the test starts: one START and one COMPLETE (or FAIL) per command's run, with datasets named
after the record's URIs and versioned by the SHA-256 the provenance record holds."""

from __future__ import annotations

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


def _assert_run(events: list[dict[str, Any]], job: str, end: str) -> dict[str, Any]:
    """Two events of one run of ``job``, START then ``end``; the last one."""
    assert [(e["eventType"], e["job"]["name"]) for e in events] == [("START", job), (end, job)]
    start, last = events
    assert start["run"]["runId"] == last["run"]["runId"]
    assert all(e["job"]["namespace"] == lineage.DEFAULT_NAMESPACE for e in events)
    assert start["inputs"] == [] and start["outputs"] == []
    assert start["eventTime"] <= last["eventTime"]
    tags = {t["key"]: t["value"] for t in last["run"]["facets"]["tags"]["tags"]}
    assert tags["gymflow.orchestrator.kind"] == "direct"
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
