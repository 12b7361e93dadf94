"""reverify.md §2.8 and §4 point 4: --resume with content keys (items 26-31, 53)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.reverify.cases import AGENT, Case, case_fixture, key, read_jsonl, write_jsonl  # noqa: F401
from tests.reverify.server_process import REPO_ROOT

pytestmark = pytest.mark.timeout(60)


def _block(total: int, done: int, terminal: int, maxed: int, todo: int) -> list[str]:
    return [
        "Resumed from cache. Found:",
        f"- {total} total rows to be re-verified",
        f"- {done} rows already done (in main jsonl)",
        f"- {terminal} sidecar-terminal (for example skipped) → not retried",
        f"- {maxed} hit max_attempts → not retried",
        f"- {todo} rows that still need to be run",
    ]


def _full(case: Case) -> list[dict[str, object]]:
    """A complete run into full.jsonl: its rows (with their content keys)."""
    assert case.run(output=case.path("full.jsonl")).code == 0
    case.server.reset()
    return case.out_rows("full.jsonl")


def _verified(case: Case) -> list[tuple[int, int]]:
    return sorted(tuple(e["key"]) for e in case.server.log("/verify"))


def _block_of(lines: list[str]) -> list[str]:
    start = lines.index("Resumed from cache. Found:")
    return lines[start : start + 6]


def test_item_26_resume_without_and_with_everything_done(case: Case) -> None:
    outcome = case.run("--resume")
    assert outcome.code == 0
    assert "Skipping resume_from_cache because cache paths don't exist!" in outcome.lines
    assert _block_of(outcome.lines) == _block(9, 0, 0, 0, 9)
    assert len(case.out_rows()) == 9
    metrics = case.path("out_aggregate_metrics.json")
    expected = metrics.read_bytes()
    metrics.unlink()
    case.server.reset()
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0 and "WARNING: Nothing to be re-verified." in outcome.lines
    assert _block_of(outcome.lines) == _block(9, 9, 0, 0, 0)
    assert case.server.log("/verify") == [] and metrics.read_bytes() == expected


def test_item_27_done_terminal_maxed(case: Case) -> None:
    rows = _full(case)
    write_jsonl(case.output, rows[:3])
    skipped = {**rows[3], "_ng_failure_class": "skipped"}
    attempts = [{**rows[4], "_ng_failure_class": "judge_failed"}] * 3
    write_jsonl(case.path("out_failures.jsonl"), [skipped, *attempts])
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0
    assert _block_of(outcome.lines) == _block(9, 3, 1, 1, 4)
    assert _verified(case) == sorted(key(r) for r in rows[5:])
    assert [key(r) for r in case.out_rows()] == sorted(key(r) for r in rows[:3] + rows[5:])


def test_item_28_limit_before_resume_filter(case: Case) -> None:
    rows = _full(case)
    write_jsonl(case.output, rows[:7])
    outcome = case.run("--resume", "--limit", "4", write=False)
    assert outcome.code == 0
    # as 0.7.0: "already done" counts the keys in the main jsonl, also those beyond --limit
    assert _block_of(outcome.lines) == _block(4, 7, 0, 0, 0)
    assert "WARNING: Nothing to be re-verified." in outcome.lines and case.server.log("/verify") == []


def test_limit_with_done_rows_beyond_it_counts_as_07(case: Case) -> None:
    """0.7.0 (observed): 7 done but not the first two, --limit 4 -> `4 total`, `7 already done`,
    `2 still need to be run`; the two are verified."""
    rows = _full(case)
    write_jsonl(case.output, rows[2:])
    outcome = case.run("--resume", "--limit", "4", write=False)
    assert outcome.code == 0, outcome
    assert _block_of(outcome.lines) == _block(4, 7, 0, 0, 2)
    assert _verified(case) == sorted(key(r) for r in rows[:2])


def test_max_attempts_one_counts_as_07(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.7.0 (observed) with NEMO_GYM_MAX_ROLLOUT_ATTEMPTS=1: the terminal key has hit the cap too
    (`1 sidecar-terminal`, `2 hit max_attempts`); the same 4 rows are run."""
    rows = _full(case)
    write_jsonl(case.output, rows[:3])
    skipped = {**rows[3], "_ng_failure_class": "skipped"}
    attempts = [{**rows[4], "_ng_failure_class": "judge_failed"}] * 3
    write_jsonl(case.path("out_failures.jsonl"), [skipped, *attempts])
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "1")
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0, outcome
    assert _block_of(outcome.lines) == _block(9, 3, 1, 2, 4)
    assert _verified(case) == sorted(key(r) for r in rows[5:])


def test_concurrency_line_only_for_a_given_bound(case: Case) -> None:
    """0.7.0 prints `Verifying with N concurrent requests` only for --concurrency, also when
    nothing is left to verify."""
    outcome = case.run()
    assert outcome.code == 0
    assert not any(line.startswith("Verifying with") for line in outcome.lines)
    outcome = case.run("--resume", "--concurrency", "3", write=False)
    assert outcome.code == 0
    at = outcome.lines.index("WARNING: Nothing to be re-verified.")
    assert outcome.lines[at + 1] == "Verifying with 3 concurrent requests"


def test_item_29_max_attempts_env(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _full(case)
    write_jsonl(case.output, rows[:8])
    write_jsonl(case.path("out_failures.jsonl"), [{**rows[8], "_ng_failure_class": "verify_http_error"}])
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "abc")
    outcome = case.run("--resume", write=False)
    assert (
        "WARNING: could not parse NEMO_GYM_MAX_ROLLOUT_ATTEMPTS='abc' (invalid literal for int() "
        "with base 10: "
        "'abc'); falling back to default 3." in outcome.lines
    )
    assert _block_of(outcome.lines) == _block(9, 8, 0, 0, 1) and _verified(case) == [key(rows[8])]
    write_jsonl(case.output, rows[:8])
    write_jsonl(case.path("out_failures.jsonl"), [{**rows[8], "_ng_failure_class": "verify_http_error"}])
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "1")
    case.server.reset()
    outcome = case.run("--resume", write=False)
    assert _block_of(outcome.lines) == _block(9, 8, 0, 1, 0) and case.server.log("/verify") == []


def test_item_30_retry_terminal_timeouts(case: Case) -> None:
    rows = _full(case)
    write_jsonl(case.output, rows[:7])
    sidecar = [
        {**rows[7], "_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": True},
        {**rows[8], "_ng_failure_class": "skipped", "_ng_failure_terminal": True},
    ]
    write_jsonl(case.path("out_failures.jsonl"), sidecar)
    outcome = case.run("--resume", write=False)
    assert _block_of(outcome.lines) == _block(9, 7, 2, 0, 0)
    config = case.config()
    config.write_text(config.read_text() + "retry_terminal_timeouts: true\n")
    outcome = case.run("--resume", write=False)
    assert _block_of(outcome.lines) == _block(9, 7, 1, 0, 1)
    assert _verified(case) == [key(rows[7])]


def test_item_31_aggregate_over_old_and_new_rows(case: Case) -> None:
    rows = _full(case)
    full_metrics = case.path("full_aggregate_metrics.json").read_bytes()
    write_jsonl(case.output, list(reversed(rows[:5])))
    assert case.run("--resume", write=False).code == 0
    assert [key(r) for r in case.out_rows()] == sorted(key(r) for r in rows)
    assert case.out_rows() == case.out_rows("full.jsonl")
    assert case.path("out_aggregate_metrics.json").read_bytes() == full_metrics


def test_item_53_resume_after_config_change_refused(case: Case) -> None:
    # A server gymflow launches runs with the config's settings, so they are part of its rows' keys
    # (a running server's are not: §3.10 point 4, tests/reverify/test_server_settings.py).
    command = [sys.executable, "-m", "tests.reverify.server", "--host", "{host}", "--port", "{port}"]
    case.config({"mcqa": {"command": command, "dir": str(REPO_ROOT)}}, agents={AGENT: "mcqa"})
    assert case.run().code == 0
    before = case.output.read_bytes()
    outcome = case.run("--resume", "++mcqa.resources_servers.mcqa.grading_mode=lenient_boxed", write=False)
    assert outcome.code == 1
    assert outcome.error == (
        f"Error: Cannot resume: '{case.output}' holds 9 result(s) computed from different inputs or verifier "
        "configuration (first: task 0, rollout 0). Pass --overwrite or choose another --output."
    )
    assert case.output.read_bytes() == before
    # an edited rollout line is a different input as well
    case.rollouts[2]["response"]["id"] = "changed"
    outcome = case.run("--resume")
    assert (
        outcome.code == 1
        and "holds 1 result(s)" in outcome.error
        and "(first: task 1, rollout 0)" in outcome.error
    )


def test_resume_legacy_rows_match_by_key(case: Case) -> None:
    """Rows without ``_ng_reverify_key`` (NeMo Gym's output) count as done by (task, rollout), warned."""
    rows = _full(case)
    legacy = [{k: v for k, v in r.items() if k != "_ng_reverify_key"} for r in rows[:4]]
    write_jsonl(case.output, legacy)
    outcome = case.run("--resume", write=False)
    assert outcome.code == 0
    assert _block_of(outcome.lines) == _block(9, 4, 0, 0, 5)
    assert f"Warning: 4 row(s) of '{case.output}' carry no _ng_reverify_key" in outcome.err
    assert len(read_jsonl(case.output)) == 9
    _ = json
