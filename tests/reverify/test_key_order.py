"""Rows sent in key order and appended in key order (gymflow.reverify._order): a fresh run over a
shuffled rollouts file finds its output sorted at the end and does not rewrite it; a row that
stays out too long makes the run give the order up, and the end sorts as before."""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gymflow import storage
from gymflow.reverify._order import HELD_BYTES, HELD_ROWS_MIN, Entry, KeyOrder
from tests.reverify.cases import Case, case_fixture, key  # noqa: F401
from tests.reverify.server_process import mcqa_rows

pytestmark = pytest.mark.timeout(60)


def _entry(task: int, line: bytes = b"x\n") -> Entry:
    return ("output", {"_ng_task_index": task, "_ng_rollout_index": 0}, line)


def _tasks(entries: Iterable[Entry]) -> list[int]:
    return [entry[1]["_ng_task_index"] for entry in entries]


def test_rows_are_released_once_every_earlier_key_has_completed() -> None:
    order = KeyOrder([(task, 0) for task in range(5)], concurrency=4)
    assert order.add((2, 0), _entry(2)) == []
    assert order.add((1, 0), _entry(1)) == []
    assert _tasks(order.add((0, 0), _entry(0))) == [0, 1, 2]
    assert _tasks(order.add((4, 0), _entry(4))) == []
    assert _tasks(order.add((3, 0), _entry(3))) == [3, 4]
    assert not order.given_up
    assert order.release() == []


def test_a_row_that_does_not_complete_gives_the_order_up_at_the_bound() -> None:
    order = KeyOrder([(task, 0) for task in range(200)], concurrency=1)
    arrivals = list(range(1, HELD_ROWS_MIN + 2))
    random.Random(3).shuffle(arrivals)
    released: list[int] = []
    for task in arrivals:
        released += _tasks(order.add((task, 0), _entry(task)))
    assert released == sorted(arrivals)
    assert order.given_up


def test_held_bytes_are_bounded() -> None:
    order = KeyOrder([(0, 0), (1, 0)], concurrency=64)
    assert _tasks(order.add((1, 0), _entry(1, b"y" * (HELD_BYTES + 1)))) == [1]
    assert order.given_up


def test_a_key_the_run_did_not_send_is_held_until_released() -> None:
    order = KeyOrder([(0, 0)], concurrency=1)
    assert order.add((9, 9), _entry(9)) == []
    assert _tasks(order.add((0, 0), _entry(0))) == [0]
    assert _tasks(order.release()) == [9]


def _shuffled(case: Case, tasks: int, seed: int) -> None:
    case.materialized, case.rollouts = mcqa_rows(tasks, 2)
    random.Random(seed).shuffle(case.rollouts)
    random.Random(seed + 1).shuffle(case.materialized)


def _rewrites(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files rewritten whole through ``storage.write_atomic_lines`` (the end's sort)."""
    written: list[str] = []
    original = storage.write_atomic_lines

    def spy(url: str, chunks: Iterable[bytes]) -> Any:
        written.append(Path(url).name)
        return original(url, chunks)

    monkeypatch.setattr(storage, "write_atomic_lines", spy)
    return written


def test_a_shuffled_rollouts_file_is_sent_and_written_in_key_order(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    _shuffled(case, 150, seed=11)
    case.server.set(None, latency_ms=2)
    for task in range(0, 150, 7):  # some answers come later: completion order is not send order
        case.server.set((task, 1), latency_ms=6)
    rewrites = _rewrites(monkeypatch)
    outcome = case.run("--concurrency", "8")
    assert outcome.code == 0, outcome
    rows = case.out_rows()
    assert [key(r) for r in rows] == sorted(key(r) for r in case.rollouts)
    assert "out.jsonl" not in rewrites  # appended in order: nothing to sort at the end
    sent = [tuple(e["key"]) for e in case.server.log("/verify")]
    place = {k: i for i, k in enumerate(sorted(sent))}
    assert max(abs(place[k] - i) for i, k in enumerate(sent)) < 8  # key order, up to what is in flight


def test_a_slow_row_gives_the_order_up_and_the_end_sorts(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    _shuffled(case, 150, seed=5)
    case.server.set((0, 0), latency_ms=1500)  # every other row completes before it: past the bound
    rewrites = _rewrites(monkeypatch)
    outcome = case.run("--concurrency", "4")
    assert outcome.code == 0, outcome
    assert [key(r) for r in case.out_rows()] == sorted(key(r) for r in case.rollouts)
    assert rewrites.count("out.jsonl") == 1
