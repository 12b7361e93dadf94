"""Reading a metrics file back in bounded memory: the same entries as parsing it whole, each group
list cut to its first GROUP_ROWS (or none), with the file's group counts and the rollouts they
cover; at every chunk boundary, for both writers' layouts and any other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow.aggregate import _metrics_reading
from gymflow.aggregate._metrics_reading import covered, read_metrics_file


def _group(task: int) -> dict[str, Any]:
    return {
        "_ng_task_index": task,
        "num_rollouts": task % 3 + 1,
        "mean/reward": task / 7,
        # a raw newline is never inside a string: this one is escaped in the file
        "sample": {"text": "line\n      {\n    ]", "nested": [[1, {"a": []}], {"b": [task]}], "big": 2**63},
    }


def _entries(groups: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "agent_ref": {"name": f"agent{n}"},
            "agent_metrics": {"mean/reward": 0.5, "pass@1": [1, 2]},
            "key_metrics": {"mean/reward": 0.5},
            "group_level_metrics": [_group(t) for t in range(count)],
            "repeat_level_metrics": [{"_ng_rollout_index": 0, "sample_count": count}],
        }
        for n, count in enumerate(groups)
    ]


def _expected(value: list[Any], rows: int) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    entries = [dict(e) for e in value if isinstance(e, dict)]
    totals = [len(e.get("group_level_metrics") or []) for e in entries]
    rollouts = [sum(g["num_rollouts"] for g in e.get("group_level_metrics") or []) for e in entries]
    for entry in entries:
        if isinstance(entry.get("group_level_metrics"), list):
            entry["group_level_metrics"] = entry["group_level_metrics"][:rows]
    return entries, totals, rollouts


@pytest.mark.parametrize("chunk", [1, 7, 64, 8 << 20])
@pytest.mark.parametrize("groups", [[0], [3], [4], [5], [9, 0, 4], [0, 0]])
@pytest.mark.parametrize("writer", ["orjson", "json"])
def test_same_as_parsing_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, groups: list[int], writer: str
) -> None:
    monkeypatch.setattr(_metrics_reading, "_CHUNK", chunk)
    monkeypatch.setattr(_metrics_reading, "GROUP_ROWS", 4)
    value = _entries(groups)
    path = tmp_path / "m.json"
    path.write_bytes(
        orjson.dumps(value, option=orjson.OPT_INDENT_2)
        if writer == "orjson"
        else json.dumps(value, indent=2).encode()
    )
    got = read_metrics_file(str(path))
    assert got is not None
    assert (got.entries, got.group_totals, got.rollouts) == _expected(value, 4)


def test_other_layouts_are_parsed_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_metrics_reading, "GROUP_ROWS", 2)
    value: list[Any] = [*_entries([5]), "not an entry"]
    path = tmp_path / "m.json"
    path.write_bytes(orjson.dumps(value))
    got = read_metrics_file(str(path))
    assert got is not None
    assert (got.entries, got.group_totals, got.rollouts) == _expected(value, 2)


@pytest.mark.parametrize("text", [b"", b"{}", b'[\n  {\n    "a": ', b"not json", b'{"a": [1]}'])
def test_unreadable_or_not_a_list_is_none(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(text)
    assert read_metrics_file(str(path)) is None


def test_missing_is_none(tmp_path: Path) -> None:
    assert read_metrics_file(str(tmp_path / "absent.json")) is None


@pytest.mark.parametrize("writer", ["orjson", "json"])
def test_without_groups_every_count_stays(tmp_path: Path, writer: str) -> None:
    # an empty list, a list, a non-object entry and a list again: counts go to their own entries
    value: list[Any] = [*_entries([0, 5]), "not an entry", *_entries([3])]
    path = tmp_path / "m.json"
    path.write_bytes(
        orjson.dumps(value, option=orjson.OPT_INDENT_2)
        if writer == "orjson"
        else json.dumps(value, indent=2).encode()
    )
    got = read_metrics_file(str(path), groups=0)
    assert got is not None
    assert (got.entries, got.group_totals, got.rollouts) == _expected(value, 0)
    assert covered(got.entries, got.rollouts) == got.rollouts == [0, 1 + 2 + 3 + 1 + 2, 1 + 2 + 3]
    assert covered(_expected(value, 9)[0], None) == got.rollouts
