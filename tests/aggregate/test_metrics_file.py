"""The streamed metrics file: the bytes of one orjson (or json) dump of the entries."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import orjson

from gymflow.aggregate import group_metrics
from gymflow.aggregate._metrics_file import metrics_bytes, write_metrics

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
