"""The streamed metrics file: the bytes of one orjson (or json) dump of the entries."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import orjson

from gymflow.aggregate import group_metrics
from gymflow.aggregate._metrics_writing import metrics_bytes, write_metrics

from .rows import W1, facts, row, usage


def _entries(rows: list[dict[str, Any]], label: str = "agent") -> list[dict[str, Any]]:
    blocks = group_metrics(facts(rows), label).blocks()
    return [{"agent_ref": {"name": label}, "_ng_environment_server": "env", **blocks}]


def _plain(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {key: list(value) if key == "group_level_metrics" else value for key, value in e.items()}
        for e in entries
    ]


def test_streamed_file_equals_one_orjson_dump(tmp_path: Path) -> None:
    rows = [*W1, row(2, 0, {"nested": [1, {"a": "é"}]}, label="ü", response=usage(3))]
    entries = _entries(rows, "ägent") + _entries([]) + _entries([row(0, 0, 1.0, mask_sample=True)])
    expected = orjson.dumps(_plain(entries), option=orjson.OPT_INDENT_2)
    assert metrics_bytes(entries) == expected
    assert metrics_bytes([]) == b"[]"
    path = tmp_path / "m.json"
    assert write_metrics(str(path), entries) == (hashlib.sha256(expected).hexdigest(), len(expected))
    assert path.read_bytes() == expected


def test_integer_beyond_64_bits_falls_back_to_json_for_the_whole_file(tmp_path: Path) -> None:
    entries = _entries([row(0, 0, 2**70, response=usage(1)), row(0, 1, 1.0, response=usage(2))], "ägent")
    expected = json.dumps(_plain(entries), indent=2).encode()
    assert metrics_bytes(entries) == expected
    path = tmp_path / "m.json"
    assert write_metrics(str(path), entries) == (hashlib.sha256(expected).hexdigest(), len(expected))
    assert path.read_bytes() == expected
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_shared_values_keep_their_type_and_sign() -> None:
    rows = [row(0, 0, -0.0, n=7, response=usage(7)), row(0, 1, 0.0, n=7.0, response=usage(7))]
    first, second = facts(rows)
    assert [(type(v), str(v)) for v in first.field_values] == [(float, "-0.0"), (int, "7"), (int, "7")]
    assert [(type(v), str(v)) for v in second.field_values] == [(float, "0.0"), (float, "7.0"), (int, "7")]
    assert first.info == {"rollout_id": "0:0", "_ng_task_index": 0, "_ng_rollout_index": 0, "reward": -0.0,
                          "output_tokens": 7, "n": 7}  # fmt: skip


def test_a_row_place_beyond_the_packed_range_reads_back() -> None:
    from gymflow.aggregate._scan import ScanRow, resolve_group

    (item,) = facts([row(0, 0, 1.0)])
    group = resolve_group({}, {})
    for line, offset, length in ((3, 10, 20), (2**60, 2**50, 2**41), (1, 2**48 - 1, 2**40 - 1)):
        placed = ScanRow(item, group, 0, line, offset, length, True)
        assert (placed.line, placed.offset, placed.length) == (line, offset, length)
