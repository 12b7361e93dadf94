"""Health spec §10, H57-H73 and H78-H80: duplicates, task reduction, ignored checks, D1-D3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymflow.errors import UnknownCheckError
from gymflow.health import CHECK_IDS, ROLLOUT_CHECK_IDS, normalize_ignored
from tests.health.builders import call, health, record, trajectory, turn

HOLLOW = trajectory(turns=[turn(answer=None)])
FAILING = trajectory(calls=[call(status=500)])
DUP = "rollout_duplicate_identity"


def coverage(out: object, check: str) -> tuple[int, int, int]:
    entry = out.run["artifacts"]["coverage"][check]  # type: ignore[attr-defined]
    return entry["evaluated"], entry["unobserved"], entry["ignored"]


def test_h57_identical_records_are_duplicates(tmp_path: Path) -> None:
    out = health(tmp_path, [record(7), record(7)])
    for i in range(2):
        assert out.row(i)["verdict"] == "unhealthy"
        assert out.row(i)["findings"] == [{"check": DUP, "detail": {"duplicate_count": 2}}]
    task = out.summary["tasks"]["7"]
    assert (task["repeats"], task["unhealthy"]) == (1, 1)
    assert coverage(out, "task_consistently_unhealthy") == (0, 1, 0)


def test_h58_duplicate_finding_comes_last(tmp_path: Path) -> None:
    out = health(tmp_path, [record(7, traj=HOLLOW), record(7), record(7)])
    assert out.checks(0) == ["agent_turn_hollow", DUP]
    assert out.findings(DUP, 0)[0]["detail"] == {"duplicate_count": 3}
    assert {r["verdict"] for r in out.rows} == {"unhealthy"}


def test_h59_stage_is_part_of_identity(tmp_path: Path) -> None:
    out = health(tmp_path, [record(7, stage_index=1), record(7, stage_index=0), record(7, stage_index=1)])
    assert [r["stage_index"] for r in out.rows] == [0, 1, 1]
    assert [out.findings(DUP, i) != [] for i in range(3)] == [False, True, True]
    assert list(out.rows[0]) == [
        "_ng_task_index",
        "_ng_rollout_index",
        "rollout_id",
        "verdict",
        "findings",
        "unobserved",
        "stage_index",
    ]
    assert out.summary["tasks"]["7"]["unobserved"] == 1
    order = health(
        tmp_path / "o",
        [record(8, stage_index="z"), record(8), record(8, stage_index="A"), record(8, stage_index=3)],
    )
    assert [r.get("stage_index") for r in order.rows] == [3, "A", None, "z"]


def test_h60_unreadable_lines_collide_only_with_their_synthetic_name(tmp_path: Path) -> None:
    out = health(tmp_path / "a", ["[]", "[]"])
    assert all(DUP not in out.checks(i) for i in range(2))
    out = health(tmp_path / "b", ["[]", record("__unreadable_record__:input-0:line-1")])
    assert all(DUP in out.checks(i) for i in range(2))


def test_h61_consistently_unhealthy_tasks(tmp_path: Path) -> None:
    out = health(
        tmp_path,
        [
            record(1, 0, traj=HOLLOW),
            record(1, 1, traj=HOLLOW),
            record(2, 0),
            record(2, 1, traj=HOLLOW),
            record(3, 0, traj=HOLLOW),
            record(3, 1, traj=None),
            record(4, 0, traj=HOLLOW),
            record(4, 1, traj=HOLLOW),
            record(4, 2, traj=None),
        ],
    )
    tasks = out.summary["tasks"]
    assert tasks["1"]["flags"] == ["task_consistently_unhealthy"]
    assert tasks["2"]["flags"] == []
    assert tasks["3"]["flags"] == []
    assert tasks["4"]["flags"] == ["task_consistently_unhealthy"]
    assert coverage(out, "task_consistently_unhealthy") == (3, 1, 0)
    assert out.run["issues"]["task_consistently_unhealthy"] == 2


def test_h62_no_successful_model_calls(tmp_path: Path) -> None:
    support = trajectory(
        calls=[call(status=500), call("s1", "rs")],
        invocations=[{"invocation_id": "inv-0", "model_calls": [{"model_call_id": "s1"}]}],
    )
    out = health(
        tmp_path,
        [
            record(1, traj=FAILING),
            record(2, 0, traj=FAILING),
            record(2, 1, traj=trajectory(turns=[turn(refs=[])])),
            record(3, traj=support),
            record(4, traj=trajectory(calls=[call(status=None)])),
            record(5, traj=trajectory(calls=[call(status=100)])),
        ],
    )
    flags = {key: task["flags"] for key, task in out.summary["tasks"].items()}
    no_success = "task_no_successful_model_calls"
    assert flags == {"1": [no_success], "2": [], "3": [no_success], "4": [], "5": [no_success]}
    assert coverage(out, no_success) == (4, 1, 0)


def test_h63_model_call_gap_does_not_stop_the_task_check(tmp_path: Path) -> None:
    traj = trajectory(calls=[call(status=500)], gaps=[{"code": "model_calls_unavailable"}])
    out = health(tmp_path, [record(traj=traj)])
    assert out.row()["verdict"] == "unobserved"
    assert out.summary["tasks"]["0"]["flags"] == ["task_no_successful_model_calls"]


def test_h64_missing_reference_makes_the_repeat_incomplete(tmp_path: Path) -> None:
    traj = trajectory(turns=[turn(refs=[{"model_call_id": "c1"}, {"model_call_id": "zz"}])])
    out = health(tmp_path, [record(traj=traj)])
    assert coverage(out, "task_no_successful_model_calls") == (0, 1, 0)


def test_h65_copies_take_the_best_success_count(tmp_path: Path) -> None:
    out = health(tmp_path, [record(2, traj=FAILING), record(2)])
    assert out.summary["tasks"]["2"]["flags"] == []
    assert coverage(out, "task_no_successful_model_calls") == (1, 0, 0)


def test_h66_invalid_trajectories(tmp_path: Path) -> None:
    out = health(tmp_path, [record(1, 0, traj="bad"), record(1, 1, traj="bad")])
    assert [r["verdict"] for r in out.rows] == ["unhealthy", "unhealthy"]
    assert out.summary["tasks"]["1"]["flags"] == ["task_consistently_unhealthy"]
    assert coverage(out, "task_no_successful_model_calls") == (0, 1, 0)


def test_h67_int_and_str_tasks_share_a_key(tmp_path: Path) -> None:
    out = health(tmp_path, [record("1", traj=HOLLOW), record(1)])
    assert [(r["_ng_task_index"], r["verdict"]) for r in out.rows] == [(1, "healthy"), ("1", "unhealthy")]
    assert out.summary["tasks"] == {
        "1": {"repeats": 1, "healthy": 0, "unhealthy": 1, "unobserved": 0, "flags": []}
    }


def test_h68_ignored_checks(tmp_path: Path) -> None:
    from gymflow.health import HealthOptions, run_health

    traj = trajectory(turns=[turn(answer=None)], calls=[call(completion=0)])
    out = health(
        tmp_path,
        [record(usage=(3, 0), traj=traj)],
        ignore="model_call_zero_completion_tokens,agent_turn_hollow",
    )
    assert out.row()["verdict"] == "healthy"
    assert coverage(out, "model_call_zero_completion_tokens") == (0, 0, 1)
    outcome = run_health(
        HealthOptions(
            (str(tmp_path / "run" / "rollouts.jsonl"),),
            ignored_checks=(
                "agent_turn_hollow",
                "model_call_zero_completion_tokens",
            ),
        )
    )
    assert outcome.console_line.endswith(" (ignored: agent_turn_hollow, model_call_zero_completion_tokens)")


def test_h69_ignoring_record_unreadable(tmp_path: Path) -> None:
    out = health(tmp_path, ["[]", record(traj="bad")], ignore="record_unreadable")
    assert [r["verdict"] for r in out.rows] == ["unobserved", "unobserved"]
    assert coverage(out, "record_unreadable") == (0, 0, 2)


def test_h70_ignoring_duplicates(tmp_path: Path) -> None:
    out = health(tmp_path, [record(1, 0, traj=HOLLOW), record(1, 0), record(1, 1, traj=HOLLOW)], ignore=DUP)
    assert [r["verdict"] for r in out.rows] == ["unhealthy", "healthy", "unhealthy"]
    task = out.summary["tasks"]["1"]
    assert (task["unhealthy"], task["unobserved"]) == (1, 1)
    assert coverage(out, "task_consistently_unhealthy") == (0, 1, 0)


def test_h71_ignoring_check_execution_error(tmp_path: Path) -> None:
    traj = trajectory(calls=[call(response={"choices": 5}, finish_reason="length")])
    out = health(tmp_path, [record(traj=traj)], ignore="check_execution_error")
    assert out.row()["verdict"] == "unobserved"
    assert out.row()["unobserved"] == ["model_call_runaway_generation"]


def test_h72_ignoring_task_checks(tmp_path: Path) -> None:
    ignore = "task_consistently_unhealthy,task_no_successful_model_calls"
    out = health(tmp_path, [record(1, 0, traj=FAILING), record(1, 1, traj=FAILING), record(2)], ignore=ignore)
    assert all(task["flags"] == [] for task in out.summary["tasks"].values())
    assert coverage(out, "task_consistently_unhealthy") == (0, 0, 2)
    assert coverage(out, "task_no_successful_model_calls") == (0, 0, 2)


def test_h73_normalising_ignored_ids() -> None:
    assert normalize_ignored("model_call_failed, ,model_call_failed,agent_turn_hollow") == (
        "model_call_failed",
        "agent_turn_hollow",
    )
    valid = ", ".join(CHECK_IDS)
    with pytest.raises(UnknownCheckError) as raised:
        normalize_ignored(["zzz", "aaa"])
    assert str(raised.value) == f"Unknown rollout health check(s): aaa, zzz; valid ids: {valid}"


def test_h78_invalid_identity_costs_one_row(tmp_path: Path) -> None:
    out = health(tmp_path, [record(0), record(None)])
    assert len(out.rows) == 2
    bad = out.rows[1]
    assert bad["_ng_task_index"] == "__unreadable_record__:input-0:line-2"
    assert bad["findings"][0]["detail"] == {
        "reason": "rollout identity is unreadable",
        "error": "ValidationError",
        "fields": ["_ng_task_index"],
    }
    assert bad["unobserved"] == [c for c in ROLLOUT_CHECK_IDS if c != "record_unreadable"]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"_ng_task_index": 1.5}, ["_ng_task_index"]),
        ({"_ng_rollout_index": [1]}, ["_ng_rollout_index"]),
        ({"_ng_task_index": {"a": 1}, "stage_index": [0]}, ["_ng_task_index", "stage_index"]),
        ({"_ng_task_index": 1e20, "stage_index": 1.5}, ["_ng_task_index", "stage_index"]),
    ],
)
def test_d1_each_invalid_identity_value(
    tmp_path: Path, fields: dict[str, object], expected: list[str]
) -> None:
    out = health(tmp_path, [record(0, **fields)])
    assert out.row()["findings"][0]["detail"]["fields"] == expected


def test_h79_integers_beyond_64_bits(tmp_path: Path) -> None:
    out = health(tmp_path, [record(0, usage=(18446744073709551615, 2)), record(1)])
    assert out.run["stats"]["tokens"]["prompt"] == 18446744073709551618


def test_h80_repeated_gaps_counted_once(tmp_path: Path) -> None:
    gap = {"code": "model_call_reference_unmatched", "invocation_id": "root", "detail": "x"}
    out = health(tmp_path, [record(traj=trajectory(gaps=[gap, dict(gap)]))])
    assert len(out.findings("trajectory_capture_mismatch")) == 1
    assert out.run["issues"]["trajectory_capture_mismatch"] == 1


@pytest.mark.parametrize("remembered", [0, 1, 4096], ids=["none", "one-shape", "default"])
def test_task_entries_do_not_depend_on_how_many_task_shapes_are_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remembered: int
) -> None:
    """Tasks of one shape (their repeats) share an entry looked up, not computed again; past the
    bound (``_KNOWN_TASKS``) an entry is computed each time. The reports are the same bytes."""
    from gymflow.health import _report

    shapes: list[list[Any]] = [[HOLLOW, HOLLOW], [None], [FAILING, None, HOLLOW], [HOLLOW, None]]
    rows = [
        record(task, rollout, traj=traj)
        for task in range(12)
        for rollout, traj in enumerate(shapes[task % 3 if task < 9 else 3])
    ]
    reference = health(tmp_path / "reference", rows)
    monkeypatch.setattr(_report, "_KNOWN_TASKS", remembered)
    out = health(tmp_path / "bounded", rows)
    assert out.summary == reference.summary
    assert out.summary["tasks"]["0"]["flags"] == ["task_consistently_unhealthy"]
    assert out.summary["tasks"]["9"]["flags"] == []
    written = (tmp_path / "bounded" / "run" / "quality_summary.json").read_bytes()
    assert written == (tmp_path / "reference" / "run" / "quality_summary.json").read_bytes()
