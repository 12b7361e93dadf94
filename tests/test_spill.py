"""``gymflow.spill``: the same order as ``sorted``, equal items in input order, runs spilled to
the caller's directory beyond RUN_ITEMS and read back one batch at a time."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from gymflow import spill


@dataclass(frozen=True, eq=False)
class _Item:
    key: tuple[int, str]
    position: int

    # the position is not compared: items of one key are equal
    def __lt__(self, other: _Item) -> bool:
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Item) and self.key == other.key

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("run_items", [1, 3, 1_000])
@pytest.mark.parametrize("count", [0, 1, 7, 500])
def test_the_order_of_sorted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_items: int, count: int
) -> None:
    monkeypatch.setattr(spill, "RUN_ITEMS", run_items)
    monkeypatch.setattr(spill, "BATCH", 2)
    rng = random.Random(count)
    # many equal keys: they come out in input order, as ``sorted`` (stable) gives them
    items = [_Item((rng.randrange(5), "x" * rng.randrange(3)), n) for n in range(count)]
    got = list(spill.sorted_spilled(iter(items), str(tmp_path)))
    assert [(i.key, i.position) for i in got] == [(i.key, i.position) for i in sorted(items)]
    spilled = len(list(tmp_path.iterdir()))
    assert spilled == (count // run_items if count > run_items or count == run_items else 0)


def test_nothing_is_written_below_a_run(tmp_path: Path) -> None:
    assert list(spill.sorted_spilled([3, 1, 2], str(tmp_path))) == [1, 2, 3]
    assert not list(tmp_path.iterdir())


def test_batches_held_in_memory_are_compressed_and_read_back() -> None:
    items = [(index, f"row {index % 7}", None, 2**70) for index in range(10_000)]
    held = spill.pack_batches(items, 512)
    assert list(spill.unpack_batches(held)) == items
    plain = io.BytesIO()
    spill.dump_batches(items, plain, 512)
    assert len(held) < len(plain.getvalue()) / 3
    assert list(spill.unpack_batches(spill.pack_batches([]))) == []
