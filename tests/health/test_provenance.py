"""Provenance of health reports (provenance spec §2, §4): reruns, changes, edits, interruptions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow import provenance
from gymflow.cli import main
from gymflow.health import HealthOptions, _ranges, run_health
from tests.health.builders import record, trajectory, turn, write_lines


@pytest.fixture
def rollouts(tmp_path: Path) -> Path:
    return write_lines(
        tmp_path / "rollouts.jsonl", [record(0), record(1, traj=trajectory(turns=[turn(answer=None)]))]
    )


def _forbid_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the rollouts were evaluated again")

    monkeypatch.setattr(_ranges, "evaluate_range", no_work)


def test_same_inputs_twice_does_no_work(
    rollouts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_health(HealthOptions((str(rollouts),)))
    before = {
        name: (tmp_path / name).read_bytes() for name in ("quality_summary.json", "rollout_verdicts.jsonl")
    }
    record_before = (tmp_path / "quality_summary.provenance.json").read_bytes()
    _forbid_work(monkeypatch)
    second = run_health(HealthOptions((str(rollouts),)))
    assert second.up_to_date and not first.up_to_date
    assert second.console_line == first.console_line
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert (tmp_path / "quality_summary.provenance.json").read_bytes() == record_before


def test_one_changed_byte_reruns(rollouts: Path, tmp_path: Path) -> None:
    run_health(HealthOptions((str(rollouts),)))
    old = json.loads((tmp_path / "quality_summary.provenance.json").read_text())
    rollouts.write_bytes(rollouts.read_bytes().replace(b'"answer": "ok"', b'"answer": "OK"', 1))
    outcome = run_health(HealthOptions((str(rollouts),)))
    new = json.loads((tmp_path / "quality_summary.provenance.json").read_text())
    assert not outcome.up_to_date
    assert new["inputs"][0]["sha256"] != old["inputs"][0]["sha256"]
    assert new["inputs"][0]["bytes"] == old["inputs"][0]["bytes"]
    assert new["cache_key"] != old["cache_key"]
    assert new["parameters"] == old["parameters"]
    assert new["outputs"] == old["outputs"]  # same verdicts: the reports did not change


def test_edited_report_is_detected_and_redone(
    rollouts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_health(HealthOptions((str(rollouts),)))
    summary = tmp_path / "quality_summary.json"
    original = summary.read_bytes()
    summary.write_bytes(original.replace(b'"healthy": 1', b'"healthy": 2'))
    assert main(["provenance", "verify", str(summary)]) == 1
    out = capsys.readouterr().out
    assert f"changed  {summary.as_uri()}" in out and f"ok  {rollouts.as_uri()}" in out
    assert not run_health(HealthOptions((str(rollouts),))).up_to_date
    assert summary.read_bytes() == original
    assert main(["provenance", "verify", str(summary)]) == 0


def test_interrupted_before_the_record_redoes_the_work(
    rollouts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(provenance, "write_record", killed)
        with pytest.raises(KeyboardInterrupt):
            run_health(HealthOptions((str(rollouts),)))
    assert (tmp_path / "quality_summary.json").exists()
    assert not (tmp_path / "quality_summary.provenance.json").exists()
    assert not run_health(HealthOptions((str(rollouts),))).up_to_date
    assert (tmp_path / "quality_summary.provenance.json").exists()


def test_record_lists_inputs_outputs_and_parameters(rollouts: Path, tmp_path: Path) -> None:
    run_health(HealthOptions((str(rollouts),), ignored_checks=("agent_turn_hollow",), workers=1))
    rec = json.loads((tmp_path / "quality_summary.provenance.json").read_text())
    assert rec["command"] == "eval health-check"
    assert rec["orchestrator"] == {"kind": "direct"}
    assert [item["uri"] for item in rec["inputs"]] == [rollouts.as_uri()]
    assert [item["uri"] for item in rec["outputs"]] == [
        (tmp_path / "quality_summary.json").as_uri(),
        (tmp_path / "rollout_verdicts.jsonl").as_uri(),
    ]
    assert rec["parameters"] == {
        "ignored_checks": ["agent_turn_hollow"],
        "inputs": [str(rollouts)],
        "workers": 1,
    }
    assert provenance.verify(str(tmp_path / "quality_summary.provenance.json"))


def test_an_input_of_another_size_is_redone_without_waiting_for_its_hash(
    rollouts: Path, tmp_path: Path
) -> None:
    run_health(HealthOptions((str(rollouts),)))
    with rollouts.open("ab") as handle:
        handle.write(b"[]\n")
    outcome = run_health(HealthOptions((str(rollouts),)))
    assert not outcome.up_to_date
    assert outcome.summary["run"]["artifacts"]["records"] == 3
    rec = json.loads((tmp_path / "quality_summary.provenance.json").read_text())
    assert rec["inputs"][0]["bytes"] == rollouts.stat().st_size
    assert main(["provenance", "verify", str(tmp_path / "quality_summary.json")]) == 0
