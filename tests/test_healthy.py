"""``gymflow.healthy`` in-process: rows are matched to their verdicts by the report's key and
position (two agents' rows may share a key), scored as ``eval aggregate`` scores a shard of only
the healthy rows, and verdicts of other rows are refused."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gymflow import healthy as healthy_module
from gymflow import spill
from gymflow.aggregate import AggregateOptions, run_aggregate
from gymflow.errors import InputError
from gymflow.health import HealthOptions, run_health
from gymflow.healthy import HealthyOptions, healthy_metrics_path, reward_lines, run_healthy_metrics
from tests.health.builders import record, trajectory, turn


def _row(task: int, agent: str, reward: float, hollow: bool = False) -> dict[str, Any]:
    traj = trajectory(turns=[turn(answer="")]) if hollow else trajectory()
    return {**record(task, traj=traj), "agent_ref": {"name": agent}, "reward": reward}


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _options(rollouts: Path, verdicts: Path) -> HealthyOptions:
    aggregate = AggregateOptions(input_glob="", output=str(rollouts))
    return HealthyOptions(str(rollouts), str(verdicts), aggregate)


def test_rows_sharing_a_key_keep_their_own_verdicts(tmp_path: Path) -> None:
    # Agents a and b each ran tasks 0 and 1: every (task, rollout) key is held by two rows. With
    # the duplicate check ignored, each row keeps its own verdict; a's task 0 and b's task 1 are
    # hollow.
    rows = [
        _row(0, "a", 1.0, hollow=True),
        _row(0, "b", 0.0),
        _row(1, "a", 1.0),
        _row(1, "b", 1.0, hollow=True),
    ]
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", rows)
    health = run_health(HealthOptions((str(rollouts),), ignored_checks=("rollout_duplicate_identity",)))
    assert health.summary["run"]["verdicts"] == {"healthy": 2, "unhealthy": 2, "unobserved": 0}

    outcome = run_healthy_metrics(_options(rollouts, Path(health.verdicts_url)))
    assert (outcome.rows, outcome.healthy, outcome.up_to_date) == (4, 2, False)
    assert outcome.output == str(tmp_path / "run" / "rollouts_aggregate_metrics.healthy.json")

    only = _write(tmp_path / "only" / "rows.jsonl", [rows[1], rows[2]])
    run_aggregate(
        AggregateOptions(input_glob=str(only), output=str(only.with_name("out.jsonl")), health_check=False)
    )
    assert (
        Path(outcome.output).read_bytes() == (tmp_path / "only" / "out_aggregate_metrics.json").read_bytes()
    )
    rewards = {e["agent_ref"]["name"]: e["agent_metrics"]["mean/reward"] for e in outcome.entries}
    assert rewards == {"a": 1.0, "b": 0.0}  # each agent's healthy row, not the other's

    assert run_healthy_metrics(_options(rollouts, Path(health.verdicts_url))).up_to_date


def test_verdicts_of_other_rows_are_refused(tmp_path: Path) -> None:
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", [_row(0, "a", 1.0), _row(1, "a", 0.0)])
    health = run_health(HealthOptions((str(rollouts),)))
    fewer = _write(tmp_path / "fewer" / "rollouts.jsonl", [_row(0, "a", 1.0)])
    with pytest.raises(InputError, match="judges rows that .* does not hold"):
        run_healthy_metrics(_options(fewer, Path(health.verdicts_url)))
    more = _write(
        tmp_path / "more" / "rollouts.jsonl", [_row(0, "a", 1.0), _row(1, "a", 0.0), _row(2, "a", 1.0)]
    )
    with pytest.raises(InputError, match="has no verdict for line 3 of"):
        run_healthy_metrics(_options(more, Path(health.verdicts_url)))
    assert not Path(healthy_metrics_path(str(tmp_path / "more" / "rollouts_aggregate_metrics.json"))).exists()


def test_reward_lines_name_both_figures_and_their_rollouts() -> None:
    def entry(name: str, mean: float, counts: list[int]) -> dict[str, Any]:
        tasks = [{"num_rollouts": n} for n in counts]
        return {
            "agent_ref": {"name": name},
            "agent_metrics": {"mean/reward": mean},
            "group_level_metrics": tasks,
        }

    everything = [entry("a", 0.5, [2, 2]), entry("b", 0.25, [4])]
    assert reward_lines(everything, [entry("a", 0.75, [1, 2])]) == [
        "mean/reward of a: all 0.5 (4 rollouts), healthy 0.75 (3 rollouts)",
        "mean/reward of b: all 0.25 (4 rollouts), healthy n/a (0 rollouts)",
    ]


@pytest.mark.parametrize("run_items", [1, 2])
def test_rows_sorted_through_spilled_runs_keep_their_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_items: int
) -> None:
    # the same run as above, its rows' keys sorted through runs of one or two keys on disk
    monkeypatch.setattr(spill, "RUN_ITEMS", run_items)
    rows = [
        _row(1, "b", 1.0, hollow=True),
        _row(0, "a", 1.0),
        _row(1, "a", 0.5),
        _row(0, "b", 0.0, hollow=True),
    ]
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", rows)
    health = run_health(HealthOptions((str(rollouts),), ignored_checks=("rollout_duplicate_identity",)))
    outcome = run_healthy_metrics(_options(rollouts, Path(health.verdicts_url)))
    assert (outcome.rows, outcome.healthy) == (4, 2)
    rewards = {e["agent_ref"]["name"]: e["agent_metrics"]["mean/reward"] for e in outcome.entries}
    assert rewards == {"a": 0.75}


def test_verdicts_out_of_report_order_are_refused(tmp_path: Path) -> None:
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", [_row(0, "a", 1.0), _row(1, "a", 0.0)])
    health = run_health(HealthOptions((str(rollouts),)))
    verdicts = Path(health.verdicts_url)
    verdicts.write_text("".join(reversed(verdicts.read_text().splitlines(keepends=True))))
    with pytest.raises(InputError, match=r"line 2: not in report order"):
        run_healthy_metrics(_options(rollouts, verdicts))


def test_healthy_rows_scanned_in_pieces_score_as_one_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 90 rows of three agents, about a third of them hollow (unhealthy), rewards whose float sums
    # depend on their order: scanned in three pieces on worker processes, the metrics are the
    # bytes of one shard holding only the healthy rows, and those of a scan in one piece.
    rng = random.Random(7)
    plan = [(task, agent, rng.random() < 0.33) for task in range(30) for agent in ("a", "b", "c")]
    rng.shuffle(plan)
    rows = [
        _row(task, agent, rng.random() * 10 ** rng.randint(-3, 3), hollow) for task, agent, hollow in plan
    ]
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", rows)
    health = run_health(HealthOptions((str(rollouts),), ignored_checks=("rollout_duplicate_identity",)))
    healthy = sum(not hollow for _, _, hollow in plan)
    assert health.summary["run"]["verdicts"]["healthy"] == healthy

    def scored(workers: int) -> bytes:
        options = _options(rollouts, Path(health.verdicts_url))
        options = replace(options, use_cache=False, aggregate=replace(options.aggregate, workers=workers))
        assert healthy_module._pieces(options) == workers
        outcome = run_healthy_metrics(options)
        assert (outcome.rows, outcome.healthy) == (90, healthy)
        return Path(outcome.output).read_bytes()

    monkeypatch.setattr(healthy_module, "PIECE_MIN_BYTES", 1)
    in_pieces, whole = scored(3), scored(1)
    assert in_pieces == whole

    lines = rollouts.read_text().splitlines(keepends=True)
    only = tmp_path / "only" / "rows.jsonl"
    only.parent.mkdir()
    only.write_text("".join(line for line, (_, _, hollow) in zip(lines, plan, strict=True) if not hollow))
    run_aggregate(
        AggregateOptions(input_glob=str(only), output=str(only.with_name("out.jsonl")), health_check=False)
    )
    assert in_pieces == (tmp_path / "only" / "out_aggregate_metrics.json").read_bytes()


def test_pieces_hold_the_healthy_lines_in_order(tmp_path: Path) -> None:
    rows = [_row(task, "a", 0.5, hollow=task % 4 == 0) for task in range(40)]
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", rows)
    health = run_health(HealthOptions((str(rollouts),)))
    lines = rollouts.read_text().splitlines(keepends=True)
    expected = "".join(line for task, line in enumerate(lines) if task % 4)
    options = _options(rollouts, Path(health.verdicts_url))
    for count in (1, 2, 3, 7):
        picked = healthy_module._pick((options, str(tmp_path), count))
        assert len(picked.pieces) == count
        assert "".join(Path(piece).read_text() for piece in picked.pieces) == expected
        assert (picked.rows, picked.healthy) == (40, 30)


@pytest.mark.parametrize("duplicates", ["checked", "ignored"])
def test_the_health_checks_own_flags_pick_the_rows_its_verdicts_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, duplicates: str
) -> None:
    """The healthy rows a health check just flagged (``HealthOutcome.healthy_rows``, what ``eval
    post`` hands on) are the rows its verdicts pair with: the same metrics bytes and counts, from a
    run checked in several ranges with rows sharing keys, rows without a task index, blank and
    unreadable lines, and without pairing any row's key."""
    rng = random.Random(f"flags-{duplicates}")
    # Each agent's (task, rollout) once, as eval aggregate requires; the two agents share keys.
    rollouts_of = [(task, agent, index) for task in range(60) for agent in "ab" for index in range(3)]
    rng.shuffle(rollouts_of)
    lines: list[str] = []
    for task, agent, index in rollouts_of[:300]:
        kind = rng.random()
        if kind < 0.04:
            lines.append("\n" if rng.random() < 0.5 else "   \n")
            continue
        if kind < 0.07:
            lines.append("{not json\n")
            continue
        row = _row(task, agent, rng.random(), hollow=rng.random() < 0.3)
        if kind < 0.12:
            del row["_ng_task_index"]  # placed by its ordinal (eval aggregate: task 0)
            row["agent_ref"] = {"name": f"c{len(lines)}"}
        row["_ng_rollout_index"] = index
        lines.append(json.dumps(row) + "\n")
    rollouts = tmp_path / "run" / "rollouts.jsonl"
    rollouts.parent.mkdir()
    rollouts.write_text("".join(lines))
    monkeypatch.setattr("gymflow.health._ranges.RANGE_BYTES", 4096)  # many ranges, as a large run
    ignored = ("rollout_duplicate_identity",) if duplicates == "ignored" else ()
    health = run_health(HealthOptions((str(rollouts),), workers=2, ignored_checks=ignored, use_cache=False))
    assert health.healthy_rows is not None and any(health.healthy_rows)

    paired = run_healthy_metrics(replace(_options(rollouts, Path(health.verdicts_url)), use_cache=False))
    by_pairing = Path(paired.output).read_bytes()

    def no_pairing(*_: Any) -> Any:
        raise AssertionError("a row's key was read")

    monkeypatch.setattr(healthy_module, "row_key", no_pairing)
    options = replace(_options(rollouts, Path(health.verdicts_url)), use_cache=False)
    flagged = run_healthy_metrics(replace(options, healthy_rows=health.healthy_rows))
    assert (flagged.rows, flagged.healthy) == (paired.rows, paired.healthy)
    assert flagged.healthy == health.summary["run"]["verdicts"]["healthy"]
    assert Path(flagged.output).read_bytes() == by_pairing


def test_a_file_shorter_than_its_flags_is_refused(tmp_path: Path) -> None:
    rollouts = _write(tmp_path / "run" / "rollouts.jsonl", [_row(0, "a", 1.0), _row(1, "a", 0.0)])
    health = run_health(HealthOptions((str(rollouts),)))
    assert health.healthy_rows == b"\x01\x01"
    fewer = _write(tmp_path / "fewer" / "rollouts.jsonl", [_row(0, "a", 1.0)])
    options = replace(_options(fewer, Path(health.verdicts_url)), healthy_rows=health.healthy_rows)
    with pytest.raises(InputError, match="fewer rows than its health check judged"):
        run_healthy_metrics(options)
