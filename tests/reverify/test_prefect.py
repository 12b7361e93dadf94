"""``eval reverify`` through Prefect's real local API (spec §5): the same rows and aggregate file
as ``--direct``; after a judge outage, a rerun verifies only the batches that had failures."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from gymflow.cli import main
from tests.reverify.cases import write_jsonl
from tests.reverify.server_process import ServerProcess, mcqa_rows, write_gym_config


def _args(root: Path, config: Path, output: Path, *extra: str) -> list[str]:
    return [
        "eval", "reverify", "--config", str(config),
        "--inputs", str(root / "inputs.jsonl"), "--rollouts", str(root / "rollouts.jsonl"),
        "--output", str(output), *extra,
    ]  # fmt: skip


def test_prefect_path_writes_what_direct_writes(
    tmp_path: Path, resources_server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    materialized, rollouts = mcqa_rows(5, 2, wrong=[(1, 0), (3, 1)])
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": resources_server})
    resources_server.set((2, 1), kind="judge_failed")

    assert main(_args(tmp_path, config, tmp_path / "direct.jsonl", "--direct")) == 0
    direct_out = capsys.readouterr().out
    assert main(_args(tmp_path, config, tmp_path / "flow.jsonl")) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    for suffix in (".jsonl", "_failures.jsonl", "_aggregate_metrics.json"):
        assert (tmp_path / f"flow{suffix}").read_bytes() == (tmp_path / f"direct{suffix}").read_bytes(), (
            suffix
        )
    assert captured.out.replace("flow", "direct") == direct_out
    record = (tmp_path / "flow.provenance.json").read_text()
    assert '"kind":"prefect"' in record.replace(" ", "") or '"kind": "prefect"' in record


def test_rerun_after_a_judge_outage_verifies_only_the_failed_batches(
    tmp_path: Path, start_resources_server: Callable[..., ServerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_resources_server()
    materialized, rollouts = mcqa_rows(1250, 2)  # 2,500 rows: batches of 1000, 1000 and 500
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": server})
    output = tmp_path / "out.jsonl"
    # The judge is down for two rows of the second batch (rows 1000-1999 in file order).
    outage = [(600, 0), (700, 1)]
    for key in outage:
        server.set(key, kind="judge_failed")
    assert main(_args(tmp_path, config, output)) == 0
    first = capsys.readouterr().out
    assert "Rollouts missing from the score: 2 of 2500" in first
    assert len(server.log("/verify")) == 2500

    server.reset()  # the judge is back
    assert main(_args(tmp_path, config, output, "--overwrite")) == 0
    capsys.readouterr()
    requests = server.log("/verify")
    verified = {(entry["key"][0], entry["key"][1]) for entry in requests}
    assert len(requests) == 1000  # only the batch that held the failures
    assert set(outage) <= verified
    assert all(500 <= task < 1000 for task, _ in verified)
    assert (tmp_path / "out_failures.jsonl").read_bytes() == b""
    assert len(output.read_bytes().splitlines()) == 2500


def test_no_secret_reaches_the_orchestrators_database(
    tmp_path: Path,
    resources_server: ServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Flow-run parameters are redacted by provenance's rule: the API and the database file hold
    none of a server block's secrets (key names, a URL password, a Bearer header, an env token)."""
    canaries = [f"canary{n}x{tmp_path.name[-6:]}" for n in range(5)]
    monkeypatch.setenv("GYMFLOW_TEST_TOKEN", canaries[4])
    extra = {
        "api_key": canaries[0],
        "openai_api_key": canaries[1],
        "judge_base_url": f"http://user:{canaries[2]}@127.0.0.1:9/v1",
        "extra_headers": {"X-Auth": f"Bearer {canaries[3]}"},
        "judge_token_from_env": "${oc.env:GYMFLOW_TEST_TOKEN}",
    }
    materialized, rollouts = mcqa_rows(2, 1)
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": resources_server}, extra={"mcqa": extra})
    assert main(_args(tmp_path, config, tmp_path / "out.jsonl", "--reuse-server")) == 0
    assert "Flow run: http" in capsys.readouterr().err

    from gymflow.flows import _server
    from tests.prefect_api import local_client

    with local_client() as client:
        runs = client.read_flow_runs(limit=200)
    stored = " ".join(str(run.parameters) for run in runs)
    assert "gym_config" in stored  # the parameters are there, redacted
    database = Path(_server.home()) / "prefect.db"
    raw = database.read_bytes() if database.exists() else b""
    for canary in canaries:
        assert canary not in stored, canary
        assert canary.encode() not in raw, canary
    record = (tmp_path / "out.provenance.json").read_text()
    assert not any(canary in record for canary in canaries)


def test_failed_rows_reach_no_log(
    tmp_path: Path, resources_server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch with failed rows logs counts and classes, never its rows: neither the console nor
    the run's logs in the orchestrator hold a row's content."""
    canary = f"rowcanary{tmp_path.name[-6:]}"
    materialized, rollouts = mcqa_rows(30, 2)
    for row in materialized:
        row["responses_create_params"]["input"][0]["content"] += f" {canary}"
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": resources_server})
    for task in range(0, 30, 3):
        resources_server.set((task, 0), kind="judge_failed")
    # -v: Prefect logs every task's final state at INFO, to the console and the run's logs. In a
    # process of its own: Prefect fixes its log level when first imported, which this one did.
    import subprocess
    import sys
    import time
    from uuid import UUID

    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from tests.prefect_api import local_client

    command = [sys.executable, "-m", "gymflow.cli", *_args(tmp_path, config, tmp_path / "out.jsonl", "-v")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert canary not in done.stdout + done.stderr
    assert "Rollouts missing from the score: 10 of 60" in done.stdout
    url = next(line for line in done.stderr.splitlines() if line.startswith("Flow run: "))
    flow_run_id = url.rstrip("/").rsplit("/", 1)[1]
    only_this_run = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)]))
    deadline = time.monotonic() + 30  # logs reach the server in batches
    with local_client() as client:
        logs = client.read_logs(log_filter=only_this_run)
        while not logs and time.monotonic() < deadline:
            time.sleep(0.5)
            logs = client.read_logs(log_filter=only_this_run)
    assert logs  # the run's logs are there
    assert all(canary not in log.message and len(log.message) < 2000 for log in logs)


def test_stored_batches_keep_their_rows_in_files_and_lost_ones_are_verified_again(
    tmp_path: Path,
    resources_server: ServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "results"
    settings = tmp_path / "gymflow.yaml"
    settings.write_text(f"prefect:\n  result_store: {store}\n")
    monkeypatch.setenv("GYMFLOW_CONFIG", str(settings))
    materialized, rollouts = mcqa_rows(600, 2)  # 1,200 rows: batches of 1000 and 200
    write_jsonl(tmp_path / "inputs.jsonl", materialized)
    write_jsonl(tmp_path / "rollouts.jsonl", rollouts)
    config = write_gym_config(tmp_path / "cfg.yaml", {"mcqa": resources_server})
    output = tmp_path / "out.jsonl"
    resources_server.reset()
    assert main(_args(tmp_path, config, output)) == 0
    expected = output.read_bytes()
    assert len(resources_server.log("/verify")) == 1200

    kept = store / "gymflow-kept"
    batches = sorted(path for path in kept.iterdir() if path.name.startswith("reverify-batch-"))
    assert len(batches) == 2
    assert sum(len((batch / "rows.jsonl").read_bytes().splitlines()) for batch in batches) == 1200
    stored = [path for path in store.rglob("*") if path.is_file() and kept not in path.parents]
    assert stored and max(path.stat().st_size for path in stored) < 100_000  # names, not 1,000 rows

    resources_server.reset()
    assert main(_args(tmp_path, config, output, "--overwrite")) == 0
    assert resources_server.log("/verify") == []  # both batches read from their kept files
    assert output.read_bytes() == expected

    rows = (batches[0] / "rows.jsonl").read_bytes().splitlines()
    lost = {(row["_ng_task_index"], row["_ng_rollout_index"]) for row in map(orjson.loads, rows)}
    shutil.rmtree(batches[0])
    resources_server.reset()
    assert main(_args(tmp_path, config, output, "--overwrite")) == 0
    # Only the batch whose rows were lost is verified again.
    assert {tuple(entry["key"]) for entry in resources_server.log("/verify")} == lost
    assert output.read_bytes() == expected
    capsys.readouterr()
