"""End to end: ``gymflow eval reverify --input-format atif … --direct`` against the loopback server.

Items 54, 57, 58, 61, 62, 66, 67, the MCP refusal of §3.8, resume after ``kill -9``, and the
README example as written. Each run is a real ``gymflow`` process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.atif.builders import (
    changed,
    dumps,
    manifest_row,
    materialized_row,
    sha256_file,
    text_trajectory,
    tool_trajectory,
    write_json,
    write_jsonl,
)
from tests.reverify.server_process import REPO_ROOT, ServerProcess, server_env

CLI = [sys.executable, "-c", "import sys; from gymflow.cli import entrypoint; entrypoint()"]
PROVENANCE_FIELDS = ["trajectory_id", "session_id", "source_sha256", "schema_version", "projection_status"]


def gymflow(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd or REPO_ROOT, env=server_env(), capture_output=True, text=True, timeout=timeout
    )


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Relay:
    """Materialized inputs for ``n`` tasks, one trajectory per task, a manifest and a config."""

    def __init__(self, root: Path, config: Path, n: int = 2) -> None:
        self.root = root
        self.config = config
        self.inputs = write_jsonl(
            root / "run_materialized_inputs.jsonl",
            [materialized_row(task, 0, expected_answer="AB"[task % 2]) for task in range(n)],
        )
        self.paths = [
            write_json(
                root / "relay" / f"t{task}.json",
                text_trajectory(f"\\boxed{{{'AB'[task % 2]}}}", trajectory_id=f"t{task}"),
            )
            for task in range(n)
        ]
        self.manifest = root / "relay" / "manifest.jsonl"
        self.write_manifest(pin=[0])
        self.output = root / "out" / "reverified.jsonl"

    def write_manifest(self, pin: list[int] = [], rows: list[Any] | None = None) -> None:  # noqa: B006
        if rows is None:
            rows = [
                manifest_row(p.name, task, 0, sha256_file(p) if task in pin else None)
                for task, p in enumerate(self.paths)
            ]
        self.manifest.write_text("".join(dumps(row) + "\n" for row in rows))

    def args(self, *extra: str) -> list[str]:
        return [
            "eval", "reverify", "--input-format", "atif", "--config", str(self.config),
            "--inputs", str(self.inputs), "--atif-manifest", str(self.manifest),
            "--output", str(self.output), "--direct", *extra,
        ]  # fmt: skip

    def run(self, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return gymflow(*self.args(*extra), timeout=timeout)

    @property
    def sidecar(self) -> Path:
        return self.output.with_name("reverified_failures.jsonl")

    def outputs(self) -> list[Path]:
        return sorted(self.output.parent.glob("*")) if self.output.parent.exists() else []


@pytest.fixture
def relay(tmp_path: Path, resources_server: ServerProcess, gym_config_file: Callable[..., Path]) -> Relay:
    (tmp_path / "relay").mkdir()
    return Relay(tmp_path, gym_config_file({"mcqa": resources_server}))


def reverify_key(source_sha256: str, block: dict[str, Any], name: str = "mcqa") -> str:
    """§4 point 4, for ``name.resources_servers`` = ``{name: block}``."""
    kept = {name: {k: v for k, v in block.items() if k not in ("host", "port", "base_url")}}
    verifier = json.dumps({"resources_server": name, "config": kept}, sort_keys=True, separators=(",", ":"))
    text = f"gymflow-reverify-key/1\natif\n{source_sha256}\n{hashlib.sha256(verifier.encode()).hexdigest()}"
    return hashlib.sha256(text.encode()).hexdigest()


def test_two_entries_one_pinned(relay: Relay, resources_server: ServerProcess) -> None:
    done = relay.run()
    assert done.returncode == 0, done.stderr
    assert (
        f"Warning: ATIF manifest {relay.manifest} has 1 of 2 entries without expected_sha256; "
        "Gym will record each observed source hash but cannot compare those files with a "
        "manifest-pinned digest."
    ) in done.stderr
    rows = sorted(read_rows(relay.output), key=lambda r: r["_ng_task_index"])
    assert [(r["_ng_task_index"], r["reward"]) for r in rows] == [(0, 1.0), (1, 1.0)]
    assert relay.sidecar.read_bytes() == b""
    lines = relay.inputs.read_bytes().splitlines()
    for row, path, line in zip(rows, relay.paths, lines, strict=True):
        assert list(row["_ng_atif_provenance"]) == PROVENANCE_FIELDS
        assert row["_ng_atif_provenance"] == {
            "trajectory_id": path.stem,
            "session_id": "s1",
            "source_sha256": sha256_file(path),
            "schema_version": "ATIF-v1.7",
            "projection_status": "complete",
        }
        source = hashlib.sha256(line + b"\n" + path.read_bytes()).hexdigest()
        assert row["_ng_reverify_key"] == reverify_key(source, {"entrypoint": "app.py"})
    sent = resources_server.log("/verify")
    assert len(sent) == 2
    for entry in sent:
        assert "_ng_atif_provenance" not in entry["body"]
        assert str(relay.root) not in json.dumps(entry["body"])
        assert entry["body"]["response"]["id"].startswith("atif_")
    assert str(relay.root) not in relay.output.read_text()


def test_hash_mismatch_writes_nothing(relay: Relay, resources_server: ServerProcess) -> None:
    relay.write_manifest(rows=[manifest_row("t0.json", 0, 0, "f" * 64)])
    done = relay.run()
    assert done.returncode == 1
    path = os.path.realpath(relay.paths[0])
    assert (
        f"Error: ATIF source hash mismatch for {path}: expected {'f' * 64}, got {sha256_file(relay.paths[0])}"
        in (done.stderr)
    )
    assert relay.outputs() == [] and resources_server.log("/verify") == []


def test_unknown_server_is_refused(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess], gym_config_file: Callable[..., Path]
) -> None:
    (tmp_path / "relay").mkdir()
    server = start_resources_server("unknown")
    relay = Relay(tmp_path, gym_config_file({"mcqa": server}))
    done = relay.run()
    assert done.returncode == 1
    assert (
        "Error: ATIF reverification requires stateless verifiers; resource server(s) ['mcqa'] reported "
        "reverify_mode=UNSUPPORTED or UNKNOWN."
    ) in done.stderr
    assert relay.outputs() == [] and server.log("/verify") == []
    assert relay.run("--force").returncode == 2


def test_rejected_shape_writes_nothing(relay: Relay, resources_server: ServerProcess) -> None:
    write_json(
        relay.paths[1],
        changed(
            text_trajectory(),
            lambda d: d["steps"][1].update(
                message=[{"type": "image", "source": {"media_type": "image/png", "path": "x.png"}}]
            ),
        ),
    )
    relay.write_manifest()
    done = relay.run()
    assert done.returncode == 1
    assert "Error: multimodal ATIF content cannot be projected losslessly for reverification" in done.stderr
    assert relay.outputs() == [] and resources_server.log() == []


def test_tool_calls_refused_for_mcp_server(
    tmp_path: Path, resources_server: ServerProcess, gym_config_file: Callable[..., Path]
) -> None:
    (tmp_path / "relay").mkdir()
    relay = Relay(
        tmp_path,
        gym_config_file({"mcqa": resources_server}, extra={"mcqa": {"expose_tools_over_mcp": "yes"}}),
    )
    write_json(relay.paths[1], tool_trajectory(trajectory_id="t1"))
    relay.write_manifest()
    done = relay.run("--reuse-server")  # the running server is taken as configured
    assert done.returncode == 1, done.stderr
    assert (
        "Error: Relay ATIF tool calls cannot be reverified against MCP-exposed resources server 'mcqa': "
        "ATIF proves call/result correlation but does not carry Gym's canonical (server_name, tool_name) "
        "provenance. Use a non-MCP stateless verifier or a text-only trajectory."
    ) in done.stderr
    assert relay.outputs() == [] and resources_server.log("/verify") == []


def test_no_persist_results_go_to_the_sidecar(relay: Relay, resources_server: ServerProcess) -> None:
    resources_server.set(None, kind="no_persist")
    done = relay.run()
    assert done.returncode == 0, done.stderr
    assert read_rows(relay.output) == []
    failed = read_rows(relay.sidecar)
    assert sorted(r["_ng_task_index"] for r in failed) == [0, 1]
    for row in failed:
        assert row["_ng_failure_class"] == "kill_shaped"
        assert list(row["_ng_atif_provenance"]) == PROVENANCE_FIELDS
        assert "_ng_reverify_key" in row
    assert "Metrics cover: 0 of 2" in done.stdout + done.stderr


def test_limit_projects_only_the_first_entries(relay: Relay, resources_server: ServerProcess) -> None:
    relay.paths[1].write_text("{ not json")  # never read
    done = relay.run("--limit", "1")
    assert done.returncode == 0, done.stderr
    assert [r["_ng_task_index"] for r in read_rows(relay.output)] == [0]
    assert [e["key"] for e in resources_server.log("/verify")] == [[0, 0]]


def test_resume_reverifies_only_the_failed_entry(relay: Relay, resources_server: ServerProcess) -> None:
    relay.write_manifest()
    resources_server.set((1, 0), kind="status", status=422)
    first = relay.run()
    assert first.returncode == 0, first.stderr
    assert [r["_ng_task_index"] for r in read_rows(relay.output)] == [0]
    assert [r["_ng_task_index"] for r in read_rows(relay.sidecar)] == [1]
    resources_server.reset()
    again = relay.run("--resume")
    assert again.returncode == 0, again.stderr
    assert [e["key"] for e in resources_server.log("/verify")] == [[1, 0]]
    assert sorted(r["_ng_task_index"] for r in read_rows(relay.output)) == [0, 1]
    write_json(relay.paths[0], text_trajectory("\\boxed{B}", trajectory_id="t0"))
    edited = relay.run("--resume")
    assert edited.returncode == 1
    assert (
        f"Error: Cannot resume: '{relay.output}' holds 1 result(s) computed from different inputs or "
        "verifier configuration (first: task 0, rollout 0). Pass --overwrite or choose another --output."
    ) in edited.stderr


def test_resume_refuses_rows_without_a_content_key(relay: Relay, resources_server: ServerProcess) -> None:
    relay.output.parent.mkdir()
    relay.output.write_text(dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}) + "\n")
    done = relay.run("--resume")
    assert done.returncode == 1
    assert f"Error: Cannot resume: '{relay.output}' holds 1 result(s) without _ng_reverify_key" in done.stderr
    assert resources_server.log("/verify") == []


def test_path_outside_the_manifest_directory(relay: Relay, resources_server: ServerProcess) -> None:
    outside = write_json(relay.root / "elsewhere.json", text_trajectory("\\boxed{A}", trajectory_id="x"))
    relay.write_manifest(rows=[manifest_row("../elsewhere.json", 0, 0)])
    refused = relay.run()
    assert refused.returncode == 1
    assert (
        f"Error: ATIF manifest row 1 in {relay.manifest}: trajectory_path '../elsewhere.json' resolves"
        in (refused.stderr)
    )
    assert relay.outputs() == [] and resources_server.log() == []
    allowed = relay.run("--allow-outside-manifest")
    assert allowed.returncode == 0, allowed.stderr
    [row] = read_rows(relay.output)
    assert row["_ng_atif_provenance"]["source_sha256"] == sha256_file(outside)


def test_resume_after_kill_9(relay: Relay, resources_server: ServerProcess) -> None:
    """Kill the run while a key past the first 1000 rows hangs, then ``--resume`` verifies only what the
    output does not hold yet."""
    n = 1100
    relay.inputs = write_jsonl(
        relay.inputs, [materialized_row(task, 0, expected_answer="A") for task in range(n)]
    )
    relay.paths = []
    for task in range(n):
        relay.paths.append(
            write_json(
                relay.root / "relay" / f"t{task}.json",
                text_trajectory("\\boxed{A}", trajectory_id=f"t{task}"),
            )
        )
    relay.write_manifest()
    resources_server.set((1050, 0), kind="hang", hang_s=30)
    proc = subprocess.Popen(
        [*CLI, *relay.args()],
        cwd=REPO_ROOT,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if relay.output.exists() and relay.output.read_bytes().count(b"\n") >= 1000:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.1)
        else:
            pytest.fail("the first batch was not written within 45 s")
        while len(resources_server.log("/verify")) < n and time.monotonic() < deadline:
            time.sleep(0.1)  # the second batch is in flight, (1050, 0) hangs
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    before = {r["_ng_task_index"] for r in read_rows(relay.output)}
    # Rows are recorded as they complete (per row, or per batch on the Prefect path): at least the
    # first batch is in, the hanging key is not.
    assert 1000 <= len(before) < n and 1050 not in before
    resources_server.reset()
    done = relay.run("--resume", timeout=90)
    assert done.returncode == 0, done.stderr
    rows = read_rows(relay.output)
    assert sorted(r["_ng_task_index"] for r in rows) == list(range(n))
    assert all(r["reward"] == 1.0 for r in rows)
    resent = {e["key"][0] for e in resources_server.log("/verify")}
    assert resent == set(range(n)) - before


def test_readme_example_runs_as_written(tmp_path: Path) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## ATIF input (`--input-format atif`)", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    argv = shlex.split(block.group(1).replace("\\\n", " "))
    assert argv[:3] == ["gymflow", "eval", "reverify"]
    out = argv.index("--output") + 1
    argv[out] = str(tmp_path / "reverified.jsonl")
    done = gymflow(*argv[1:], timeout=90)
    assert done.returncode == 0, done.stderr
    rows = read_rows(tmp_path / "reverified.jsonl")
    assert sorted((r["_ng_task_index"], r["reward"]) for r in rows) == [(0, 1.0), (1, 1.0)]
    assert all(list(r["_ng_atif_provenance"]) == PROVENANCE_FIELDS for r in rows)
    assert "1 of 2 entries without expected_sha256" in done.stderr
