"""Spilled rows (direct runs: files) give the same merged file and metrics as rows packed in
memory (the runs' bytes, which a cached scan's result holds)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gymflow import spill
from gymflow.aggregate import AggregateOptions, ReduceSettings, reduce_parts, scan_part
from gymflow.aggregate import _scan as scan_module
from gymflow.aggregate import _spill as spill_module
from gymflow.aggregate._metrics_writing import metrics_bytes
from gymflow.aggregate._run import merge_job, write_merged_file
from gymflow.aggregate._spill import GroupStore

from .rows import row, usage, write_jsonl


def _shards(root: Path) -> str:
    """Three unsorted shards, two groups, masked rows, a missing last newline."""
    rng = random.Random(5)
    rows = [
        row(t, r, rng.choice([0.0, 1.0, 0.5]), agent_ref={"name": rng.choice(["a", "b"])},
            response=usage(t + r), **({"mask_sample": True} if rng.random() < 0.1 else {}))
        for t in range(40) for r in range(3)
    ]  # fmt: skip
    rng.shuffle(rows)
    for index in range(3):
        write_jsonl(root / "s" / f"{index}.jsonl", rows[index::3])
    last = root / "s" / "2.jsonl"
    last.write_bytes(last.read_bytes().rstrip(b"\n"))
    return str(root / "s" / "*.jsonl")


def _aggregate(glob: str, output: Path, spill_dir: str | None) -> tuple[bytes, bytes, int]:
    options = AggregateOptions(input_glob=glob, output=str(output), settings=ReduceSettings())
    shards = sorted(Path(glob).parent.glob("*.jsonl"))
    parts = [scan_part(str(shard), index, options, None, spill_dir) for index, shard in enumerate(shards)]
    kind = bytes if spill_dir is None else str
    assert all(isinstance(run, kind) and not part.scan.rows for part in parts for run in part.scan.runs)
    runs = sum(len(part.scan.runs) for part in parts)
    write_merged_file(merge_job(parts, str(output)))
    reduction = reduce_parts(parts, options)
    return output.read_bytes(), metrics_bytes(reduction.entries), runs


def test_spilled_runs_give_the_bytes_of_packed_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    glob = _shards(tmp_path)
    held = _aggregate(glob, tmp_path / "held.jsonl", None)  # one run per shard, in memory
    (tmp_path / "spill").mkdir()
    monkeypatch.setattr(scan_module, "RUN_ROWS", 7)  # several runs per shard
    spilled = _aggregate(glob, tmp_path / "spilled.jsonl", str(tmp_path / "spill"))
    assert held[2] == 3 and spilled[2] > 3 * 5
    assert spilled[:2] == held[:2]
    assert held[0].count(b"\n") == 120
    # Beyond spill.RUN_ITEMS facts in all, every group's facts go to a scratch store mid-reduce.
    monkeypatch.setattr(spill, "RUN_ITEMS", 10)
    stores: list[GroupStore] = []

    def counted() -> GroupStore:
        stores.append(GroupStore())
        return stores[-1]

    monkeypatch.setattr(spill_module, "GroupStore", counted)
    stored = _aggregate(glob, tmp_path / "stored.jsonl", str(tmp_path / "spill"))
    assert len(stores) == 2 and stored[:2] == held[:2]


def test_no_scratch_store_outlives_a_failed_reduce(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import os
    import tempfile

    from gymflow.errors import InputError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spill, "RUN_ITEMS", 2)  # the groups' facts in scratch stores
    for index in range(2):
        write_jsonl(tmp_path / "s" / f"{index}.jsonl", [row(t, 0, 1.0) for t in range(5)])
    (tmp_path / "spill").mkdir()
    with pytest.raises(InputError, match="Duplicate rollout"):
        _aggregate(str(tmp_path / "s" / "*.jsonl"), tmp_path / "m.jsonl", str(tmp_path / "spill"))
    gc.collect()
    assert [name for name in os.listdir(tmp_path) if name.startswith("gymflow-")] == []
