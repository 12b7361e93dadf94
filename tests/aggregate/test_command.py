"""aggregate.md §6 items about selection, loading, merge, sidecars, groups and the command."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gymflow import provenance, storage
from gymflow.aggregate import AggregateOptions, ReduceSettings, ScoreSpec, select_shards
from gymflow.cli import main
from gymflow.errors import InputError, StorageError
from gymflow.pipeline import aggregate_then_health, direct_runner
from gymflow.run_context import RunContext

from .rows import mcqa_rows, row, write_jsonl


def run(input_glob: str, output: str, **kwargs: Any) -> tuple[Any, list[str]]:
    """``eval aggregate --direct``: the aggregate step, then the health step (gymflow.pipeline)."""
    lines: list[str] = []
    kwargs.setdefault("health_check", False)
    kwargs.setdefault("workers", 1)  # the process pool costs a second per run; one test covers it
    outcome, _, run.health_error = aggregate_then_health(  # type: ignore[attr-defined]
        AggregateOptions(input_glob=input_glob, output=output, **kwargs),
        direct_runner(RunContext()),
        lines.append,
    )
    return outcome, lines


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def two_shards(tmp_path: Path) -> Path:
    rows = mcqa_rows()
    write_jsonl(tmp_path / "s" / "a.jsonl", rows[1:8:2], trailer="\n  \n")  # (0..3, 1)
    write_jsonl(tmp_path / "s" / "b.jsonl", rows[0:10:2])  # (0..4, 0); (4, 1) left no row
    return tmp_path


def test_01_sidecars_skipped_matches_sorted(tmp_path: Path) -> None:
    for name in ("b.jsonl", "a.jsonl", "a_failures.jsonl", "a_materialized_inputs.jsonl"):
        write_jsonl(tmp_path / "s" / name, [])
    assert select_shards(f"{tmp_path}/s/*.jsonl") == [f"{tmp_path}/s/a.jsonl", f"{tmp_path}/s/b.jsonl"]


def test_02_comma_patterns_order_dedup_and_no_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("t/z.jsonl", "s/a.jsonl", "s/b.jsonl"):
        write_jsonl(tmp_path / name, [])
    monkeypatch.chdir(tmp_path)
    assert select_shards(" t/*.jsonl , s/*.jsonl,,s/a.jsonl ") == ["t/z.jsonl", "s/a.jsonl", "s/b.jsonl"]
    for pattern in (",,", "nomatch/*.jsonl"):
        with pytest.raises(InputError, match=re.escape(f"No shards matched input_glob='{pattern}'")):
            select_shards(pattern)


def test_03_only_the_two_stems_are_skipped(tmp_path: Path) -> None:
    for name in ("a.jsonl", "a_aggregate_metrics.json", "c.txt", "a_failures.jsonl"):
        write_jsonl(tmp_path / "s" / name, [])
    names = [Path(p).name for p in select_shards(f"{tmp_path}/s/*")]
    assert names == ["a.jsonl", "a_aggregate_metrics.json", "c.txt"]


def test_05_malformed_line_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = tmp_path / "s" / "a.jsonl"
    shard.parent.mkdir()
    shard.write_text(json.dumps(row(0, 0, 1.0)) + "\n{bad\n")
    with pytest.raises(InputError, match=rf"^Malformed JSON in '{shard}' at line 2: "):
        run(str(shard), str(tmp_path / "out.jsonl"))
    assert main(["eval", "aggregate", "-i", str(shard), "-o", str(tmp_path / "out.jsonl"), "--direct"]) == 1
    err = capsys.readouterr().err
    assert f"Malformed JSON in '{shard}' at line 2" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_bad_index_names_file_line_and_field(tmp_path: Path) -> None:
    shard = write_jsonl(tmp_path / "a.jsonl", [row(0, 0, 1.0), row("1", 0, 1.0)])  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"line 2: _ng_task_index must be an integer, got \"1\""):
        run(str(shard), str(tmp_path / "out" / "m.jsonl"))


def test_06_blank_lines_skipped_4_plus_5(two_shards: Path) -> None:
    outcome, lines = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/merged.jsonl", workers=2)
    assert "Loaded 9 rollout record(s) from 2 shard(s)" in lines
    assert lines[:3] == [
        "Aggregating 2 shard(s):",
        f"  - {two_shards}/s/a.jsonl",
        f"  - {two_shards}/s/b.jsonl",
    ]
    assert len(read_jsonl(f"{two_shards}/out/merged.jsonl")) == 9


def _note(event: str, value: int) -> None:
    with open(os.environ["GYMFLOW_TEST_EVENTS"], "a") as f:
        f.write(f"{event} {value}\n")


def _noted_write(job: Any) -> Any:
    """The merged file's writer, noting the process it runs in (module-level: a spawned worker
    imports it by name)."""
    from gymflow.aggregate._run import write_merged_file

    _note("write", os.getpid())
    return write_merged_file(job)


def test_a_reader_writes_the_merged_file_beside_the_reduce(
    two_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With reader processes, one of them writes the merged file while this process reduces (the
    two overlap); they are all gone once both are done, before the provenance record is written.
    Without them, the merged file is written here, before the reduce."""
    import multiprocessing

    from gymflow.aggregate import _command
    from gymflow.aggregate import _run as aggregate_run
    from gymflow.aggregate._reduce import reduce_shards

    log = two_shards / "events"  # a file: the reader process appends to it too
    monkeypatch.setenv("GYMFLOW_TEST_EVENTS", str(log))

    def reducing(*args: Any) -> Any:
        _note("reduce", os.getpid())
        return reduce_shards(*args)

    def record(job: Any) -> None:
        _note("record", len(multiprocessing.active_children()))
        aggregate_run.write_record(*job)

    monkeypatch.setattr(_command, "WRITE_MERGED", replace(_command.WRITE_MERGED, function=_noted_write))
    monkeypatch.setattr(aggregate_run, "reduce_shards", reducing)
    monkeypatch.setattr(_command, "WRITE_RECORD", replace(_command.WRITE_RECORD, function=record))
    here = os.getpid()
    merged: list[bytes] = []
    for workers in (2, 1):
        log.unlink(missing_ok=True)
        out = f"{two_shards}/out-{workers}/merged.jsonl"
        run(f"{two_shards}/s/*.jsonl", out, workers=workers)
        events = (line.split() for line in log.read_text().splitlines())
        seen = [(event, int(value)) for event, value in events]
        assert len(read_jsonl(out)) == 9
        merged.append(Path(out).read_bytes())
        where = dict(seen[:-1])
        assert seen[-1] == ("record", 0) and where["reduce"] == here
        if workers == 2:
            assert where["write"] != here  # in a reader process
        else:
            assert where["write"] == here and seen[0][0] == "write"
    assert merged[0] == merged[1]


def _failing_write(job: Any) -> Any:
    raise StorageError(f"{job[1]}: cannot write it: disk full")


def test_a_failed_reduce_still_leaves_the_merged_file_whole(
    two_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reduce failing while a reader writes the merged file: the run waits for the file (whole,
    renamed into place, no temporary left), then raises the reduce's error; no process is left."""
    import multiprocessing

    from gymflow.aggregate import _run as aggregate_run

    def failing(*args: Any) -> Any:
        raise ValueError("the reduce failed")

    monkeypatch.setattr(aggregate_run, "reduce_shards", failing)
    with pytest.raises(ValueError, match="the reduce failed"):
        run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/merged.jsonl", workers=2)
    assert len(read_jsonl(f"{two_shards}/out/merged.jsonl")) == 9
    assert sorted(p.name for p in (two_shards / "out").iterdir()) == ["merged.jsonl"]
    assert multiprocessing.active_children() == []


def test_a_failed_merged_write_on_a_reader_is_its_own_error(
    two_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write failing in the reader process raises its own error, unchanged, and leaves no output."""
    from gymflow.aggregate import _command

    monkeypatch.setattr(_command, "WRITE_MERGED", replace(_command.WRITE_MERGED, function=_failing_write))
    output = f"{two_shards}/out/merged.jsonl"
    with pytest.raises(StorageError, match=f"^{re.escape(output)}: cannot write it: disk full$"):
        run(f"{two_shards}/s/*.jsonl", output, workers=2)
    assert not Path(output).exists()


@pytest.mark.parametrize(
    ("forkable", "threshold", "readers"),
    [(True, None, True), (False, 0, True), (False, None, False)],
    ids=["forked-any-size", "spawned-above-threshold", "spawned-below-threshold"],
)
def test_readers_start_by_default_when_forked_or_over_enough_bytes(
    two_shards: Path, monkeypatch: pytest.MonkeyPatch, forkable: bool, threshold: int | None, readers: bool
) -> None:
    """Without --workers, default_workers() readers read the shards when they can be forked,
    whatever their size; readers that would be spawned only over READERS_MIN_BYTES of shards in
    all (below it, starting them would cost more than they save: the shards are read here)."""
    from gymflow import parallel
    from gymflow.aggregate import _command

    monkeypatch.setattr(_command, "can_fork", lambda: forkable)
    if threshold is not None:
        monkeypatch.setattr(_command, "READERS_MIN_BYTES", threshold)
    monkeypatch.setattr(_command, "default_workers", lambda: 2)
    started: list[int] = []
    pool = parallel.pool

    def counting(workers: int) -> Any:
        started.append(workers)
        return pool(workers)

    monkeypatch.setattr(parallel, "pool", counting)
    run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/merged.jsonl", workers=None)
    assert started == ([2] if readers else [])
    assert len(read_jsonl(f"{two_shards}/out/merged.jsonl")) == 9


def test_07_merged_sorted_compact_and_kept_when_metrics_fail(two_shards: Path) -> None:
    out = two_shards / "out" / "merged.jsonl"
    run(f"{two_shards}/s/*.jsonl", str(out))
    merged = read_jsonl(out)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in merged] == sorted(
        (t, r) for t in range(5) for r in range(2) if (t, r) != (4, 1)
    )
    assert all(": " not in line and ", " not in line for line in out.read_text().splitlines())
    # A duplicate makes the metrics step fail: the merged file is still written (§1.3, item 43).
    write_jsonl(two_shards / "s" / "c.jsonl", [row(0, 0, 0.0, agent_ref={"name": "mcqa_simple_agent"})])
    out2 = two_shards / "out2" / "merged.jsonl"
    with pytest.raises(
        InputError, match=r"^Duplicate rollout \(group 'mcqa_simple_agent', task 0, rollout 0\) in "
    ):
        run(f"{two_shards}/s/*.jsonl", str(out2))
    assert len(read_jsonl(out2)) == 10
    assert not (two_shards / "out2" / "merged_aggregate_metrics.json").exists()


def test_08_output_inside_the_glob_is_not_reread(two_shards: Path) -> None:
    out = f"{two_shards}/s/merged.jsonl"
    run(f"{two_shards}/s/*", out, health_check=True)
    assert (two_shards / "s" / "quality_summary.json").exists()
    outcome, lines = run(f"{two_shards}/s/*", out, use_cache=False, health_check=True)
    assert outcome.shards == [f"{two_shards}/s/a.jsonl", f"{two_shards}/s/b.jsonl"]
    assert "Loaded 9 rollout record(s) from 2 shard(s)" in lines
    assert len(read_jsonl(out)) == 9


def test_09_10_no_config_groups_by_agent(two_shards: Path) -> None:
    outcome, _ = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/m.jsonl")
    (entry,) = outcome.entries
    assert entry["agent_ref"] == {"name": "mcqa_simple_agent"} and "_ng_environment_server" not in entry
    assert entry["key_metrics"]["mean/reward"] == pytest.approx(5 / 9)


def test_09_resources_only_config_writes_metrics(two_shards: Path, tmp_path: Path) -> None:
    config = tmp_path / "gym.yaml"
    config.write_text("mcqa:\n  resources_servers:\n    mcqa:\n      entrypoint: app.py\n")
    out = two_shards / "out" / "m.jsonl"
    status = main(
        [
            "eval",
            "aggregate",
            "-i",
            f"{two_shards}/s/*.jsonl",
            "-o",
            str(out),
            "--config",
            str(config),
            "--direct",
            "--no-health-check",
        ]
    )
    assert status == 0
    assert (
        json.loads((two_shards / "out" / "m_aggregate_metrics.json").read_text())[0]["agent_ref"]["name"]
        == "mcqa_simple_agent"
    )


def test_11_merge_shards_false(two_shards: Path) -> None:
    out = f"{two_shards}/out/merged.jsonl"
    outcome, lines = run(f"{two_shards}/s/*.jsonl", out, merge_shards=False)
    assert "Merged rollouts: <not merged>" in lines
    assert not Path(out).exists()
    assert Path(f"{two_shards}/out/merged_aggregate_metrics.json").exists()


def _failure(task: int, rollout: int, klass: str) -> dict[str, Any]:
    return row(
        task,
        rollout,
        0.0,
        agent_ref={"name": "mcqa_simple_agent"},
        mask_sample=True,
        failure_kind=klass,
        failure_reason="boom",
        _ng_failure_class=klass,
        _ng_failure_message="boom",
    )


def test_12_failure_classes_counted_as_zero(two_shards: Path) -> None:
    sidecar = write_jsonl(two_shards / "s" / "b_failures.jsonl", [_failure(4, 1, "agent_run_error")])
    before = sidecar.read_bytes()
    settings = ReduceSettings(count_failure_classes_as_zero=("agent_run_error",))
    outcome, lines = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/m.jsonl", settings=settings)
    assert "Counting 1 failure row(s) as scored zeros: ['agent_run_error']" in lines
    agent = outcome.entries[0]["agent_metrics"]
    assert agent["mean/reward"] == 0.5 and "coverage/masked_rollouts" not in agent
    infos = [i for g in outcome.entries[0]["group_level_metrics"] for i in g["rollout_infos"]]
    assert {"rollout_id": "4:1", "_ng_task_index": 4, "_ng_rollout_index": 1, "reward": 0.0} in infos
    assert sidecar.read_bytes() == before
    assert len(read_jsonl(f"{two_shards}/out/m.jsonl")) == 9


def test_dropped_failures_coverage_lines(two_shards: Path) -> None:
    write_jsonl(two_shards / "s" / "b_failures.jsonl", [_failure(4, 1, "judge_failed")])
    _, lines = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/m.jsonl")
    assert lines[-2:] == [
        "Rollouts missing from the score: 1 of 10 materialized (1 judge_failed routed this run; "
        "see the shards' _failures.jsonl sidecars)",
        "Metrics cover: 9 of 10 rollouts",
    ]


def test_13_missing_rollouts_counted_as_zero(two_shards: Path) -> None:
    materialized = [
        {
            "_ng_task_index": t,
            "_ng_rollout_index": r,
            "agent_ref": {"name": "mcqa_simple_agent"},
            "question": "q",
        }
        for t in range(5)
        for r in range(2)
        if r == 1
    ]
    write_jsonl(two_shards / "s" / "b_materialized_inputs.jsonl", materialized)
    settings = ReduceSettings(count_missing_rollouts_as_zero=True)
    outcome, lines = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/out/m.jsonl", settings=settings)
    assert "Counting 1 materialized rollout(s) with no row as scored zeros" in lines
    assert "[WARNING]" not in " ".join(lines)
    assert lines[-1] == "Scored as zero because they left no row: 1 of 10 rollouts"
    assert outcome.entries[0]["agent_metrics"]["mean/reward"] == 0.5


def test_14_health_on_by_default_off_and_failing(
    two_shards: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    out = two_shards / "on" / "m.jsonl"
    _, lines = run(f"{two_shards}/s/*.jsonl", str(out), health_check=True)
    assert (out.parent / "quality_summary.json").exists() and (out.parent / "rollout_verdicts.jsonl").exists()
    assert lines[-2].startswith("Rollout health: 9 checked")
    assert lines[-1] == f"Quality summary: {out.parent}/quality_summary.json"
    off = two_shards / "off" / "m.jsonl"
    run(f"{two_shards}/s/*.jsonl", str(off), health_check=False)
    assert not (off.parent / "quality_summary.json").exists()

    import gymflow.health

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("check exploded")

    monkeypatch.setattr(gymflow.health, "run_health", broken)
    bad = two_shards / "bad" / "m.jsonl"
    outcome, _ = run(f"{two_shards}/s/*.jsonl", str(bad), health_check=True)
    assert (
        "Rollout health checks failed after aggregation; aggregate artifacts are still available."
        in caplog.text
    )
    assert run.health_error == "RuntimeError: check exploded"  # type: ignore[attr-defined]
    assert (bad.parent / "m_aggregate_metrics.json").exists()


def test_15_two_groups_sorted_and_byte_identical(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s" / "a.jsonl", mcqa_rows("zeta_agent", 2, 2) + mcqa_rows("alpha_agent", 2, 2))
    out1, out2 = tmp_path / "o1" / "m.jsonl", tmp_path / "o2" / "m.jsonl"
    first, _ = run(f"{tmp_path}/s/*.jsonl", str(out1))
    run(f"{tmp_path}/s/*.jsonl", str(out2))
    assert [e["agent_ref"]["name"] for e in first.entries] == ["alpha_agent", "zeta_agent"]
    assert (tmp_path / "o1" / "m_aggregate_metrics.json").read_bytes() == (
        tmp_path / "o2" / "m_aggregate_metrics.json"
    ).read_bytes()
    assert out1.read_bytes() == out2.read_bytes()


def test_environment_stamp_groups_and_labels(tmp_path: Path) -> None:
    rows = [
        row(0, 0, 1.0, agent_ref={"name": "a"}, _ng_environment_server="env1"),
        row(0, 0, 0.0, agent_ref={"name": "a"}, _ng_environment_server="env2"),
        row(1, 0, 1.0, agent_ref={"name": "b"}, _ng_environment_server="env3"),
    ]
    write_jsonl(tmp_path / "s.jsonl", rows)
    outcome, _ = run(str(tmp_path / "s.jsonl"), str(tmp_path / "o" / "m.jsonl"))
    assert [(e["agent_ref"]["name"], e["_ng_environment_server"]) for e in outcome.entries] == [
        ("b", "env3"),
        ("env1", "env1"),
        ("env2", "env2"),
    ]


def test_43_duplicate_identity_across_shards_names_both(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "s" / "a.jsonl", [row(0, 0, 1.0, agent_ref={"name": "x"})])
    b = write_jsonl(tmp_path / "s" / "b.jsonl", [row(0, 0, 0.0, agent_ref={"name": "x"})])
    with pytest.raises(InputError) as error:
        run(f"{tmp_path}/s/*.jsonl", str(tmp_path / "o" / "m.jsonl"))
    assert str(error.value) == f"Duplicate rollout (group 'x', task 0, rollout 0) in '{a}' and '{b}'"
    assert not (tmp_path / "o" / "m_aggregate_metrics.json").exists()


def test_empty_shards_and_shards_without_numbers(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s" / "a.jsonl", [], trailer="\n\n")
    write_jsonl(
        tmp_path / "s" / "b.jsonl", [{"_ng_task_index": 0, "agent_ref": {"name": "x"}, "answer": "A"}]
    )
    outcome, lines = run(f"{tmp_path}/s/*.jsonl", str(tmp_path / "o" / "m.jsonl"))
    assert "Loaded 1 rollout record(s) from 2 shard(s)" in lines
    (entry,) = outcome.entries
    assert entry["agent_metrics"] == {"num_repeats": 1} and entry["key_metrics"] == {}
    assert entry["group_level_metrics"][0]["rollout_infos"] == [
        {"rollout_id": "0:0", "_ng_task_index": 0, "_ng_rollout_index": 0}
    ]
    write_jsonl(tmp_path / "e" / "only.jsonl", [])
    empty, _ = run(f"{tmp_path}/e/*.jsonl", str(tmp_path / "oe" / "m.jsonl"))
    assert empty.entries == []
    assert json.loads((tmp_path / "oe" / "m_aggregate_metrics.json").read_text()) == []


def test_41_pass_majority_through_the_command(tmp_path: Path) -> None:
    from .test_metrics import w9_rows

    write_jsonl(tmp_path / "s.jsonl", w9_rows())
    settings = ReduceSettings(pass_majority=ScoreSpec(answer_key="extracted_answer"))
    outcome, _ = run(str(tmp_path / "s.jsonl"), str(tmp_path / "o" / "m.jsonl"), settings=settings)
    assert outcome.entries[0]["agent_metrics"]["pass@2/accuracy"] == 61.111111111111114


def test_provenance_noop_rerun_and_changed_shard(two_shards: Path) -> None:
    out = f"{two_shards}/out/m.jsonl"
    first, _ = run(f"{two_shards}/s/*.jsonl", out)
    record = provenance.read_record(first.record_path)
    assert record is not None and record["command"] == "eval aggregate"
    assert [e["uri"] for e in record["outputs"]] == [storage.to_uri(out), storage.to_uri(first.metrics_path)]
    assert len(record["inputs"]) == 2
    before = Path(out).read_bytes()
    second, lines = run(f"{two_shards}/s/*.jsonl", out)
    assert second.up_to_date and not any(line.startswith("Loaded") for line in lines)
    assert Path(out).read_bytes() == before
    shard = two_shards / "s" / "b.jsonl"
    shard.write_text(shard.read_text().replace('"reward": 0.0', '"reward": 1.0', 1))
    third, _ = run(f"{two_shards}/s/*.jsonl", out)
    assert not third.up_to_date
    new = provenance.read_record(third.record_path)
    assert new is not None
    assert [e["sha256"] for e in new["inputs"]][0] == record["inputs"][0]["sha256"]
    assert [e["sha256"] for e in new["inputs"]][1] != record["inputs"][1]["sha256"]


def test_cli_flag_validation(two_shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", "aggregate", "-i", f"{two_shards}/s/*.jsonl", "-o", f"{two_shards}/o/m.jsonl", "--direct"]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--health-check-ignore", "zzz"])
    assert exit_info.value.code == 2
    assert (
        "invalid configuration: health_check_ignored_checks (Value error, Unknown rollout health check(s): "
        "zzz; valid ids: check_execution_error, record_unreadable, " in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        main([*base, "--health-check-workers", "0"])
    assert (
        "invalid configuration: health_check_workers (Input should be greater than or equal to 1)."
        in capsys.readouterr().err
    )
    assert not (two_shards / "o").exists()


def test_cli_direct_prints_the_banner(two_shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = f"{two_shards}/o/m.jsonl"
    assert (
        main(
            [
                "eval",
                "aggregate",
                "-i",
                f"{two_shards}/s/*.jsonl",
                "-o",
                out,
                "--direct",
                "--no-health-check",
                "+merge_shards=true",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert 'Key metrics for mcqa_simple_agent:\n{\n    "mean/reward"' in text
    assert text.endswith(
        f"Finished rollout aggregation! View results at:\nMerged rollouts: {out}\n"
        f"Aggregate metrics: {two_shards}/o/m_aggregate_metrics.json\n"
    )


def test_04_s3_glob_merge_metrics_health_and_provenance(two_shards: Path, s3_bucket: str) -> None:
    fs, _ = storage.filesystem(s3_bucket)
    for name in ("a.jsonl", "b.jsonl"):
        fs.put_file(str(two_shards / "s" / name), f"{s3_bucket}/run/reverified_{name}")
    local, _ = run(f"{two_shards}/s/*.jsonl", f"{two_shards}/local/m.jsonl")
    remote, lines = run(
        f"{s3_bucket}/run/reverified_*.jsonl", f"{s3_bucket}/out/merged.jsonl", health_check=True
    )
    assert remote.shards == [f"{s3_bucket}/run/reverified_a.jsonl", f"{s3_bucket}/run/reverified_b.jsonl"]
    assert remote.entries == local.entries
    assert (
        storage.open_read(f"{s3_bucket}/out/merged.jsonl").read()
        == Path(f"{two_shards}/local/m.jsonl").read_bytes()
    )
    for name in (
        "merged_aggregate_metrics.json",
        "merged.provenance.json",
        "quality_summary.json",
        "rollout_verdicts.jsonl",
        "quality_summary.provenance.json",
    ):
        assert storage.isfile(f"{s3_bucket}/out/{name}"), name
    assert all(check.status == "ok" for check in provenance.verify(f"{s3_bucket}/out/merged.provenance.json"))
    again, _ = run(f"{s3_bucket}/run/reverified_*.jsonl", f"{s3_bucket}/out/merged.jsonl")
    assert again.up_to_date


def test_integers_beyond_64_bits(tmp_path: Path) -> None:
    """A compact merged row keeps its exact bytes; metrics see the value as a float (as pandas would)."""
    huge = 2**64 + 5
    shard = tmp_path / "s.jsonl"
    shard.write_text('{"_ng_task_index":0,"reward":1.0,"tokens":' + str(huge) + "}\n")  # compact: copied
    outcome, _ = run(str(shard), str(tmp_path / "o" / "m.jsonl"))
    assert outcome.entries[0]["agent_metrics"]["max/tokens"] == float(huge)
    assert json.loads((tmp_path / "o" / "m.jsonl").read_text())["tokens"] == huge
    metrics = json.loads((tmp_path / "o" / "m_aggregate_metrics.json").read_text())
    assert metrics[0]["agent_metrics"]["mean/tokens"] == float(huge)


def test_config_environment_server_fronting_an_agent_groups_rows(two_shards: Path, tmp_path: Path) -> None:
    config = tmp_path / "gym.yaml"
    config.write_text(
        "mcqa_env:\n  environment_servers:\n    legacy_agent:\n      agent: {name: mcqa_simple_agent}\n"
        "      resources_server: {name: mcqa}\n"
    )
    out = two_shards / "env" / "m.jsonl"
    args = ["eval", "aggregate", "-i", f"{two_shards}/s/*.jsonl", "-o", str(out), "--config", str(config)]
    assert main([*args, "--direct", "--no-health-check", "--workers", "1"]) == 0
    (entry,) = json.loads((out.parent / "m_aggregate_metrics.json").read_text())
    assert entry["agent_ref"] == {"name": "mcqa_simple_agent"}
    assert entry["_ng_environment_server"] == "mcqa_env"


def test_output_edited_by_hand_is_redone(two_shards: Path) -> None:
    out = two_shards / "o" / "m.jsonl"
    first, _ = run(f"{two_shards}/s/*.jsonl", str(out))
    original = out.read_bytes()
    out.write_bytes(original.replace(b'"reward":1.0', b'"reward":0.5', 1))
    assert main(["provenance", "verify", first.record_path]) == 1
    again, lines = run(f"{two_shards}/s/*.jsonl", str(out))
    assert not again.up_to_date and out.read_bytes() == original
    assert main(["provenance", "verify", again.record_path]) == 0
