"""The rollouts index pages, filters and opens rows of a generated run of 2,500 rollouts exactly
as a scan of the files would (``bench.view`` writes the same run at 160,000 rows)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.view import CHECKS, REPEATS, write_synthetic_run
from gymflow.view import PAGE_SIZE, Filters, RunReports, _index, load_run, server_page

ROWS = 2_500


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> RunReports:
    run = tmp_path_factory.mktemp("paging") / "run"
    write_synthetic_run(run, ROWS)
    return load_run(str(run))


def _expected(n: int) -> tuple[str, str | None]:
    if n % 7 == 3:
        return "unhealthy", CHECKS[n % 4]
    return ("unobserved" if n % 11 == 5 else "healthy"), None


def test_index_has_every_row_with_its_reward_and_reverified_reward(reports: RunReports) -> None:
    index = reports.index
    assert index is not None and len(index) == ROWS
    for n in (0, 1, 3, 30, 2_499):
        row = index.row(n)
        assert (row.task, row.rollout) == (str(n // REPEATS), str(n % REPEATS))
        assert row.reward == (1.0 if n % 3 else 0.0)
        expected_after = None if n % 10 else ((1.0 - row.reward) if n % 30 == 0 else row.reward)
        assert row.reverified == expected_after
        assert (row.verdict, row.checks[0] if row.checks else None) == _expected(n)
    assert len(list(index.changed())) == len(range(0, ROWS, 30))


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(verdict="unhealthy"),
        Filters(check="model_call_failed"),
        Filters(task="17"),
        Filters(verdict="healthy", task="17"),
        Filters(verdict="unhealthy", check="agent_turn_hollow"),
        Filters(verdict="healthy", check="agent_turn_hollow"),
    ],
    ids=lambda f: ",".join(f"{k}={v}" for k, v in f.active().items()) or "all",
)
def test_every_page_of_every_filter_matches_a_scan(reports: RunReports, filters: Filters) -> None:
    index = reports.index
    assert index is not None
    expected = [
        n
        for n in range(ROWS)
        if (filters.verdict is None or _expected(n)[0] == filters.verdict)
        and (filters.check is None or _expected(n)[1] == filters.check)
        and (filters.task is None or str(n // REPEATS) == filters.task)
    ]
    seen: list[int] = []
    first = index.page(filters, 0, PAGE_SIZE)
    assert first.total == len(expected)
    for number in range(first.pages):
        page = index.page(filters, number, PAGE_SIZE)
        assert page.number == number and len(page.rows) <= PAGE_SIZE
        seen.extend(row.number for row in page.rows)
    assert seen == expected
    beyond = index.page(filters, first.pages + 5, PAGE_SIZE)  # a page past the end is the last
    assert beyond.number == first.pages - 1


def test_a_row_opens_its_findings_and_its_own_record(reports: RunReports) -> None:
    index = reports.index
    assert index is not None
    unhealthy = 1_732  # 1732 % 7 == 3
    findings = index.verdict_row(unhealthy)["findings"]
    assert findings == [{"check": CHECKS[unhealthy % 4], "locator": {"turn": 1}, "detail": {"n": unhealthy}}]
    record = index.record(unhealthy)
    assert record is not None
    assert (record["_ng_task_index"], record["_ng_rollout_index"]) == divmod(unhealthy, REPEATS)
    page = server_page(reports, "rollout", rollout=unhealthy)
    assert CHECKS[unhealthy % 4] in page and f"mc-{unhealthy // REPEATS}-{unhealthy % REPEATS}" in page


def test_the_rollouts_page_shows_one_page_and_its_position(reports: RunReports) -> None:
    html = server_page(reports, "rollouts", filters=Filters(verdict="unhealthy"), page_number=2)
    unhealthy = len(range(3, ROWS, 7))
    assert f"Rollouts 201–300 of {unhealthy} matching (verdict = unhealthy); {ROWS} in the run." in html
    assert f"page 3 of {-(-unhealthy // PAGE_SIZE)}" in html
    assert len(re.findall(r"<tr data-verdict=", html)) == PAGE_SIZE
    assert 'data-verdict="healthy"' not in html
    # the reverify page counts the rewards that changed, per task as old x new
    reverify = server_page(reports, "reverify")
    assert f"Rewards that changed ({len(range(0, ROWS, 30))})" in reverify


def test_duplicate_identities_pair_with_their_records_in_file_order(tmp_path: Path) -> None:
    """Verdict rows are sorted stably by identity (health.md §7.2): the k-th verdict of an identity
    judges the k-th record of that identity, and an unreadable line pairs with no record."""
    run = tmp_path / "run"
    run.mkdir()

    def row(task: object, reward: float) -> dict[str, object]:
        return {"_ng_task_index": task, "_ng_rollout_index": 0, "reward": reward}

    def verdict(task: object, check: str | None) -> dict[str, object]:
        findings = [{"check": check}] if check else []
        return {"_ng_task_index": task, "_ng_rollout_index": 0, "verdict": "x", "findings": findings}

    huge = 123456789012345678901234567890  # beyond 64 bits: still its own identity
    records = [row(1, 0.25), row(0, 0.5), row(1, 0.75), row(huge, 0.125)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n")
    duplicate = "rollout_duplicate_identity"
    unreadable = "__unreadable_record__:input-0:line-4"
    verdicts = [
        verdict(0, None),
        verdict(1, duplicate),
        verdict(1, duplicate),
        verdict(huge, None),
        verdict(unreadable, "record_unreadable"),
    ]
    (run / "rollout_verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    index = load_run(str(run)).index
    assert index is not None
    assert [index.row(n).reward for n in range(5)] == [0.5, 0.25, 0.75, 0.125, None]
    assert index.row(3).task == str(huge) and index.record(4) is None
    assert index.by_check["rollout_duplicate_identity"] == [1, 2]
    # report.html holds the first rows only: the same rows, paired the same way, and the count of all
    for held in (1, 2, 3, 4, 5):
        first = load_run(str(run), held=held).index
        assert first is not None and (len(first), first.total) == (held, 5)
        assert [first.row(n) for n in range(held)] == [index.row(n) for n in range(held)]
        assert [first.record(n) for n in range(held)] == [index.record(n) for n in range(held)]


def test_held_rows_read_the_rollouts_only_up_to_their_last_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report.html's rows: once each held row has its record (the k-th of its identity for the
    k-th verdict), the rest of the rollouts is not read."""
    run = tmp_path / "run"
    run.mkdir()
    tasks = [2, 0, 1, 0, 0, 3, 4, 5]
    (run / "rollouts.jsonl").write_text(
        "".join(
            json.dumps({"_ng_task_index": t, "_ng_rollout_index": 0, "reward": n}) + "\n"
            for n, t in enumerate(tasks)
        )
    )
    verdicts = [{"_ng_task_index": t, "_ng_rollout_index": 0, "verdict": "healthy"} for t in sorted(tasks)]
    (run / "rollout_verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    read: list[bytes] = []
    identity = _index._identity

    def counted(line: bytes) -> Any:
        read.append(line)
        return identity(line)

    monkeypatch.setattr(_index, "_identity", counted)
    expected = [1, 3, 4, 2, 0, 5, 6, 7]  # each verdict's record, by its reward
    for held, lines in ((0, 0), (1, 2), (2, 4), (3, 5), (4, 5), (5, 5), (6, 6), (8, 8)):
        read.clear()
        first = load_run(str(run), held=held).index
        assert first is not None and [first.row(n).reward for n in range(held)] == expected[:held]
        assert len(read) == lines


def test_a_reverified_run_is_indexed_whole_even_when_rows_are_held(reports: RunReports) -> None:
    """What changed on reverify is counted over every row, so the limit does not apply."""
    index = load_run(reports.run, held=10).index
    assert index is not None and len(index) == index.total == ROWS
