"""reverify.md §2.9: --judge-failed-only and --append (items 32-38)."""

from __future__ import annotations

import pytest

from tests.reverify.cases import Case, case_fixture, key, read_jsonl, write_jsonl  # noqa: F401

pytestmark = pytest.mark.timeout(60)

TWO_SOURCES = (
    "WARNING: judge-failed-only recovery merges rewards from TWO sources — the successful rollouts in "
    "--rollouts were scored by the ORIGINAL run's verifier/judge, while the recovered rows are scored by "
    "the CURRENT "
    "verification config. If any crucial parameter (judge model, judge prompt/params, verifier config, etc.) "
    "changed between the original run and this recovery, the merged rewards are inconsistent. Ensure the "
    "verification config matches the original run."
)


def _recovery_inputs(case: Case, failures: list[dict[str, object]] | None = None) -> None:
    """9 stored successes (5 with reward 1.0) and one judge failure for (4, 1), as a run leaves them."""
    for index, row in enumerate(case.rollouts):
        row["reward"] = 1.0 if index < 5 else 0.0
    case.materialized, rollouts = case.materialized, case.rollouts
    failed = {
        "_ng_task_index": 4,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": "mcqa_simple_agent"},
        "response": dict(case.rollouts[-1]["response"]),
        "reward": 0.0,
        "_ng_failure_class": "judge_failed",
    }
    case.write()
    write_jsonl(case.path("rollouts_failures.jsonl"), [failed] if failures is None else failures)
    _ = rollouts


def test_item_32_recovery(case: Case) -> None:
    _recovery_inputs(case)
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 0, outcome
    assert TWO_SOURCES in outcome.lines
    assert f"Recovery mode: seeded 9 successful rollout(s) into {case.output}" in outcome.lines
    rows = case.out_rows()
    assert len(rows) == 10 and [key(r) for r in rows] == sorted(key(r) for r in rows)
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [(4, 1)]
    assert case.metrics()[0]["agent_metrics"]["mean/reward"] == 0.6
    assert read_jsonl(case.path("rollouts_failures.jsonl"))[0]["_ng_failure_class"] == "judge_failed"


def test_item_33_no_judge_failures(case: Case) -> None:
    _recovery_inputs(case)
    rows = read_jsonl(case.path("rollouts_failures.jsonl"))
    write_jsonl(case.path("rollouts_failures.jsonl"), [{**rows[0], "_ng_failure_class": "agent_run_error"}])
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 0
    assert "Recovery mode: seeded 9 successful rollout(s) into " + str(case.output) in outcome.lines
    assert "WARNING: Nothing to be re-verified." in outcome.lines and case.server.log("/verify") == []
    assert len(case.out_rows()) == 9


def test_item_34_first_attempt_only_and_seeded_keys(case: Case) -> None:
    _recovery_inputs(case)
    [failed] = read_jsonl(case.path("rollouts_failures.jsonl"))
    attempts = [{**failed, "response": {**failed["response"], "id": f"attempt-{n}"}} for n in range(3)]
    also_seeded = {**case.rollouts[0], "_ng_failure_class": "judge_failed"}
    write_jsonl(case.path("rollouts_failures.jsonl"), [*attempts, also_seeded])
    assert case.run("--judge-failed-only", write=False).code == 0
    log = case.server.log("/verify")
    assert [tuple(e["key"]) for e in log] == [(4, 1)]
    assert log[0]["body"]["response"]["id"] == "attempt-0"


def test_item_35_append_in_place(case: Case) -> None:
    _recovery_inputs(case)
    outcome = case.run("--judge-failed-only", "--append", output=case.rollouts_path, write=False)
    assert outcome.code == 0, outcome
    assert f"Recovery mode: seeded 0 successful rollout(s) into {case.rollouts_path}" in outcome.lines
    assert len(read_jsonl(case.rollouts_path)) == 10
    case.server.reset()
    outcome = case.run("--judge-failed-only", "--append", output=case.rollouts_path, write=False)
    assert outcome.code == 0 and "WARNING: Nothing to be re-verified." in outcome.lines
    assert case.server.log("/verify") == [] and len(read_jsonl(case.rollouts_path)) == 10


def test_item_36_append_to_missing_output(case: Case) -> None:
    _recovery_inputs(case)
    outcome = case.run("--judge-failed-only", "--append", write=False)
    assert outcome.code == 0
    assert f"Recovery mode: seeded 9 successful rollout(s) into {case.output}" in outcome.lines
    assert len(case.out_rows()) == 10


def test_item_37_multistage_refused(case: Case) -> None:
    _recovery_inputs(case)
    [failed] = read_jsonl(case.path("rollouts_failures.jsonl"))
    write_jsonl(case.path("rollouts_failures.jsonl"), [{**failed, "stage_index": 1}])
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 1
    assert outcome.error == (
        "Error: --judge-failed-only does not support multi-stage rows; resume the multi-stage rollout "
        "collection so stage identity and adaptive references are preserved"
    )
    assert not case.output.exists() and not case.path("out_failures.jsonl").exists()


def test_item_38_missing_source_sidecar(case: Case) -> None:
    _recovery_inputs(case)
    case.path("rollouts_failures.jsonl").unlink()
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 1
    assert outcome.error == (
        f"Error: judge-failed-only source not found: '{case.path('rollouts_failures.jsonl')}'"
    )
    assert not case.output.exists()


def test_recovery_resume_combines(case: Case) -> None:
    """A still-flaky judge: the failed recovery lands in the output's sidecar; --resume retries it."""
    _recovery_inputs(case)
    case.server.set((4, 1), kind="judge_failed", times=1)
    assert case.run("--judge-failed-only", write=False).code == 0
    assert len(case.out_rows()) == 9
    assert read_jsonl(case.path("out_failures.jsonl"))[0]["_ng_failure_class"] == "judge_failed"
    outcome = case.run("--judge-failed-only", "--resume", write=False)
    assert outcome.code == 0
    assert len(case.out_rows()) == 10


def test_recovery_resume_prints_as_07(case: Case) -> None:
    """0.7.0 (observed) seeds first, then reads the cache: the seeded rows count as done and no
    `Skipping resume_from_cache` line is printed (the output exists by then)."""
    _recovery_inputs(case)
    outcome = case.run("--judge-failed-only", "--resume", write=False)
    assert outcome.code == 0, outcome
    seeded = f"Recovery mode: seeded 9 successful rollout(s) into {case.output}"
    at = outcome.lines.index(seeded)
    assert outcome.lines.index(TWO_SOURCES) < at
    assert outcome.lines[at + 1 : at + 7] == [
        "Resumed from cache. Found:",
        "- 1 total rows to be re-verified",
        "- 9 rows already done (in main jsonl)",
        "- 0 sidecar-terminal (for example skipped) → not retried",
        "- 0 hit max_attempts → not retried",
        "- 1 rows that still need to be run",
    ]
    assert not any(line.startswith("Skipping resume_from_cache") for line in outcome.lines)
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [(4, 1)]


def test_invalid_judge_rows_migrated_then_recovered(case: Case) -> None:
    """§2.9 step 5: with retry_invalid_judge_responses, --rollouts rows holding an invalid judge
    response move into its sidecar (idempotently) and are re-verified."""
    _recovery_inputs(case, failures=[])
    rows = read_jsonl(case.rollouts_path)
    rows[2].update(invalid_judge_response=True, _ng_failure_terminal=True)
    write_jsonl(case.rollouts_path, rows)
    case.config()
    assert case.config_path is not None
    case.config_path.write_text(case.config_path.read_text() + "retry_invalid_judge_responses: true\n")
    outcome = case.run("--judge-failed-only", write=False)
    assert outcome.code == 0, outcome
    remaining = read_jsonl(case.rollouts_path)
    assert [key(r) for r in remaining] == [key(r) for r in rows if r is not rows[2]]
    [moved] = read_jsonl(case.path("rollouts_failures.jsonl"))
    assert key(moved) == key(rows[2]) and moved["_ng_failure_class"] == "judge_invalid"
    assert moved["_ng_migrated_invalid_judge_response"] is True and "_ng_failure_terminal" not in moved
    assert f"Recovery mode: seeded 8 successful rollout(s) into {case.output}" in outcome.lines
    assert [tuple(e["key"]) for e in case.server.log("/verify")] == [key(rows[2])]
    assert len(case.out_rows()) == 9
    before = case.rollouts_path.read_bytes(), case.path("rollouts_failures.jsonl").read_bytes()
    assert case.run("--judge-failed-only", "--append", write=False).code == 0
    assert (case.rollouts_path.read_bytes(), case.path("rollouts_failures.jsonl").read_bytes()) == before
