"""Whole-file join: atomic output, provenance, cache, bad input, health contract, S3, CLI, Prefect."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.join_corpus import write_run
from gymflow import provenance, storage
from gymflow.cli import main
from gymflow.errors import InputError
from gymflow.evidence import validate_trajectory
from gymflow.join import current_key, default_output, resolve_settings, run_join
from tests.asset_events import asset_events
from tests.join.helpers import L, bundle, inv, jsonl, ref, row


def _rows(path: Path | str) -> list[dict[str, Any]]:
    with storage.open_read(str(path)) as f:
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


@pytest.fixture
def raw_run(tmp_path: Path) -> Path:
    write_run(tmp_path / "run", 24, seed=3, calls=3, call_bytes=200, variants=True)
    return tmp_path / "run"


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_direct_join_writes_beside_the_input_and_keeps_it(raw_run: Path) -> None:
    before = (raw_run / "rollouts.jsonl").read_bytes()
    result = run_join(resolve_settings(str(raw_run)))
    assert (raw_run / "rollouts.jsonl").read_bytes() == before
    joined = _rows(raw_run / "rollouts_joined.jsonl")
    inputs = _rows(raw_run / "rollouts.jsonl")
    assert len(joined) == len(inputs) == result.summary["rows"] == 24
    for original, out in zip(inputs, joined, strict=True):
        assert {k: out[k] for k in ("_ng_task_index", "_ng_rollout_index")} == {
            k: original[k] for k in ("_ng_task_index", "_ng_rollout_index")
        }
        assert out.get("reward") == original.get("reward")  # nothing lost from the input rows
        assert set(original) - {"ng_perf"} <= set(out)
        if isinstance(out.get("ng_trajectory"), dict):
            validate_trajectory(out["ng_trajectory"])  # health.md §2.4
    summary = result.summary
    assert (summary["merged"], summary["projected"], summary["projection_failed"]) == (23, 22, 1)
    assert summary["gap_counts"]["model_call_capture_incomplete"] == 1
    assert summary["perf_summary"]["overall_observability_coverage"] == summary["perf_rows"] / 24
    assert not list(raw_run.glob(".*tmp")) and not list(raw_run.glob(".*parts*"))


def test_parallel_direct_join_writes_the_same_bytes(raw_run: Path, tmp_path: Path) -> None:
    serial = run_join(resolve_settings(str(raw_run), output=str(tmp_path / "serial.jsonl")))
    parallel = run_join(
        resolve_settings(str(raw_run), output=str(tmp_path / "parallel.jsonl")),
        workers=2,
        parallel_min_bytes=0,
    )
    assert (tmp_path / "parallel.jsonl").read_bytes() == (tmp_path / "serial.jsonl").read_bytes()
    assert parallel.summary == serial.summary
    serial_record = provenance.read_record(serial.record_url)
    parallel_record = provenance.read_record(parallel.record_url)
    assert serial_record is not None and parallel_record is not None
    assert parallel_record["inputs"] == serial_record["inputs"]
    assert parallel_record["cache_key"] == serial_record["cache_key"]
    (raw_run / "rollouts.jsonl").write_bytes((raw_run / "rollouts.jsonl").read_bytes() + b"[]\n")
    with pytest.raises(InputError, match="not a JSON object"):
        run_join(resolve_settings(str(raw_run)), workers=2, parallel_min_bytes=0)
    assert not (raw_run / "rollouts_joined.jsonl").exists()


def test_capture_files_no_row_reads_count_for_the_cache_key_only(
    raw_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files no row reads are hashed by the workers in chunks (three here), left out of the
    record's inputs, and a change to one of them makes the join run again."""
    monkeypatch.setattr("gymflow.join._command.CAPTURES_PER_HASH", 2)
    calls = raw_run / "model-calls"
    for i in range(5):
        (calls / f"9{i}-0.capture.jsonl").write_bytes(jsonl(L(f"extra-{i}")))
    settings = resolve_settings(str(raw_run))
    first = run_join(settings, workers=2, parallel_min_bytes=0)
    record = provenance.read_record(first.record_url)
    assert record is not None
    listed = {item["uri"].rsplit("/", 1)[1] for item in record["inputs"]}
    assert "0-0.capture.jsonl" in listed and not any(name.startswith("9") for name in listed)
    assert record["cache_key"] == current_key(settings)  # every file of the directory, hashed here
    assert run_join(settings, workers=2, parallel_min_bytes=0).up_to_date
    (calls / "93-0.capture.jsonl").write_bytes(jsonl(L("changed")))
    assert not run_join(settings, workers=2, parallel_min_bytes=0).up_to_date


def test_provenance_lists_every_capture_file_read(raw_run: Path) -> None:
    result = run_join(resolve_settings(str(raw_run)))
    record = provenance.read_record(result.record_url)
    assert record is not None
    assert result.record_url == str(raw_run / "rollouts_joined.provenance.json")
    uris = [item["uri"] for item in record["inputs"]]
    assert uris[0] == storage.to_uri(str(raw_run / "rollouts.jsonl"))
    on_disk = sorted(storage.to_uri(str(p)) for p in (raw_run / "model-calls").iterdir())
    assert sorted(uris[1:]) == on_disk  # every row's files were read, markers included
    assert record["outputs"] == [provenance.digest(str(raw_run / "rollouts_joined.jsonl")).to_json()]
    assert record["orchestrator"] == {"kind": "direct"}
    assert record["parameters"]["capture"] is True and record["parameters"]["perf"] is True
    assert all(check.status == "ok" for check in provenance.verify(result.record_url))


def test_rerun_is_a_cache_hit_until_a_capture_file_changes(raw_run: Path) -> None:
    settings = resolve_settings(str(raw_run))
    first = run_join(settings)
    output = (raw_run / "rollouts_joined.jsonl").read_bytes()
    assert run_join(settings).up_to_date
    capture = raw_run / "model-calls" / "0-0.capture.jsonl"
    capture.write_bytes(capture.read_bytes().replace(b'"status_code":200', b'"status_code":201', 1))
    again = run_join(settings)
    assert not again.up_to_date and again.record_url == first.record_url
    assert (raw_run / "rollouts_joined.jsonl").read_bytes() != output
    assert not run_join(settings, use_cache=False).up_to_date


def test_line_that_is_not_an_object_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_bytes(jsonl(row(0, 0), "[1, 2]", row(0, 1)))
    (tmp_path / "rollouts_joined.jsonl").write_bytes(b"previous\n")
    with pytest.raises(InputError, match="not a JSON object"):
        run_join(resolve_settings(str(tmp_path)))
    assert (tmp_path / "rollouts_joined.jsonl").read_bytes() == b"previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollouts.jsonl", "rollouts_joined.jsonl"]


def test_cli_exit_codes_and_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = tmp_path / "model-calls"
    calls.mkdir()
    (calls / "0-0.capture.jsonl").write_bytes(jsonl(L("c1"), L("c2", latency=-1)))
    bad_id = row(0, 1, _ng_rollout_id=".hidden", reward=0.5)
    good = row(0, 0, ng_agent_observations=bundle(inv("root", ref("c1"))))
    (tmp_path / "rollouts.jsonl").write_bytes(jsonl(good, "", bad_id))
    code, out, err = cli(["eval", "join", str(tmp_path), "--direct", "--json"], capsys)
    assert code == 1
    summary = json.loads(out)
    assert list(summary)[:7] == [
        "rows", "merged", "projected", "projection_failed", "perf_rows", "row_errors", "perf_summary"
    ]  # fmt: skip
    assert (summary["rows"], summary["row_errors"], summary["projection_failed"]) == (2, 1, 1)
    assert "row error:" in err and ".hidden" in err
    joined = (tmp_path / "rollouts_joined.jsonl").read_bytes().splitlines()
    assert json.loads(joined[1]) == bad_id  # written unchanged
    (tmp_path / "rollouts.jsonl").write_bytes(b'{"ok": 1}\n"text"\n')
    code, out, err = cli(["eval", "join", str(tmp_path), "--direct", "--no-cache"], capsys)
    assert code == 2 and "not a JSON object" in err
    for args, message in [
        ([str(tmp_path / "nope")], "Run directory not found"),
        ([str(tmp_path), "--rollouts-file", "missing.jsonl"], "Rollout JSONL not found"),
        ([str(tmp_path), "--output", str(tmp_path / "rollouts.jsonl")], "never edits its input in place"),
        ([str(tmp_path), "--no-capture", "--capture-dir", "x"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", "join", *args, "--direct"])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_cli_missing_capture_dir_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "rollouts.jsonl").write_bytes(jsonl(row(0, 0), row(0, 1)))
    summary_path = tmp_path / "summary.json"
    code, out, err = cli(["eval", "join", str(tmp_path), "--direct", "--summary", str(summary_path)], capsys)
    assert code == 0
    assert "warning: capture directory" in err and "does not exist" in err
    assert out.startswith("Joined 2 rows: 2 merged")
    assert "model_call_capture_no_records 2" in out
    assert json.loads(summary_path.read_text())["gap_counts"] == {
        "conversation_unavailable": 2,
        "model_call_capture_no_records": 2,
        "model_calls_unavailable": 2,
        "turns_unavailable": 2,
    }


def test_cli_options(raw_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "elsewhere.jsonl"
    code, out, _ = cli(
        ["eval", "join", str(raw_run), "--direct", "--no-capture", "--no-perf", "--output", str(out_path)],
        capsys,
    )
    assert code == 0 and f"Joined rollouts: {out_path}" in out
    rows = _rows(out_path)
    assert not any("ng_model_call_capture" in r for r in rows)
    assert rows[0]["ng_perf"] == _rows(raw_run / "rollouts.jsonl")[0]["ng_perf"]  # untouched
    assert (tmp_path / "elsewhere.provenance.json").exists()
    assert default_output("s3://b/run/rollouts.jsonl") == "s3://b/run/rollouts_joined.jsonl"
    renamed = raw_run / "other.jsonl"
    renamed.write_bytes((raw_run / "rollouts.jsonl").read_bytes())
    assert cli(["eval", "join", str(raw_run), "--direct", "--rollouts-file", "other.jsonl"], capsys)[0] == 0
    assert (raw_run / "other_joined.jsonl").exists()


def test_joined_output_passes_health_check(raw_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["eval", "join", str(raw_run), "--direct"], capsys)[0] == 0
    code, out, _ = cli(
        ["eval", "health-check", str(raw_run), "--rollouts-file", "rollouts_joined.jsonl", "--direct"], capsys
    )
    assert code == 0 and out.startswith("Rollout health: 24 checked")
    verdicts = [json.loads(line) for line in (raw_run / "rollout_verdicts.jsonl").read_text().splitlines()]
    assert not any(v["verdict"] == "unreadable" or "record_unreadable" in json.dumps(v) for v in verdicts)
    assert sum(v["verdict"] == "healthy" for v in verdicts) >= 15


def test_join_on_s3(raw_run: Path, s3_bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_url = f"{s3_bucket}/runs/raw"
    for path in [raw_run / "rollouts.jsonl", *(raw_run / "model-calls").iterdir()]:
        storage.write_atomic(f"{run_url}/{path.relative_to(raw_run).as_posix()}", path.read_bytes())
    code, out, _ = cli(["eval", "join", run_url, "--direct"], capsys)
    assert code == 0 and f"Joined rollouts: {run_url}/rollouts_joined.jsonl" in out
    local = run_join(resolve_settings(str(raw_run)))
    assert local.summary["rows"] == 24
    with storage.open_read(f"{run_url}/rollouts_joined.jsonl") as f:
        assert f.read() == (raw_run / "rollouts_joined.jsonl").read_bytes()
    record = provenance.read_record(f"{run_url}/rollouts_joined.provenance.json")
    assert record is not None
    assert len(record["inputs"]) == 1 + len(os.listdir(raw_run / "model-calls"))
    assert all(item["uri"].startswith(run_url) for item in record["inputs"])
    assert main(["provenance", "verify", f"{run_url}/rollouts_joined.jsonl"]) == 0


def test_prefect_flow_writes_the_same_bytes(
    raw_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_join(resolve_settings(str(raw_run), output=str(tmp_path / "direct.jsonl")))
    code, out, err = cli(["eval", "join", str(raw_run), "--workers", "2"], capsys)
    assert code == 0 and out.startswith("Joined 24 rows")
    assert "WARNING" not in err and "Traceback" not in err  # e.g. Prefect's process-pool forwarding
    assert (raw_run / "rollouts_joined.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()
    record = json.loads((raw_run / "rollouts_joined.provenance.json").read_text())
    assert record["orchestrator"]["kind"] == "prefect" and record["orchestrator"]["flow_run_id"]
    assert len(record["inputs"]) == 1 + len(os.listdir(raw_run / "model-calls"))
    assert sorted(p.name for p in raw_run.iterdir() if p.name.startswith(".")) == []
    joined = asset_events(raw_run / "rollouts_joined.jsonl")
    assert joined == ["prefect.asset.materialization.succeeded"]
    assert asset_events(raw_run / "rollouts.jsonl") == ["prefect.asset.referenced"]
