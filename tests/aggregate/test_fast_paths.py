"""The scan's fast reading and the merge's buffered copy give what the plain ways give.

* Scan: every mutated line (tests/fuzz_lines.py) read as a one-line shard with the fast reading
  (:func:`gymflow.jsonline.loads_shallow` and the lean row) and with the full exact reading
  forced: the same error message, or the same facts, group, layout flag, perf and key sets.
* Merge: rows larger than a buffer, a last line without its newline, rows re-serialized and rows
  copied verbatim: the merged bytes are the rows in merge order, whether spans of a local output
  are copied by ``copy_file_range``, ``sendfile`` or a buffer, and for an fsspec output.
* Options: frozen mappings, still picklable (issue 12).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from gymflow.aggregate import AggregateOptions, ScoreSpec, scan_shard, write_merged
from gymflow.aggregate import _merge as merge_module
from gymflow.aggregate import _scan as scan_module
from gymflow.errors import InputError
from gymflow.frozen import FrozenDict
from gymflow.jsonline import loads_shallow
from tests.fuzz_lines import SEED, lines

SPEC = ScoreSpec(score_field="reward", answer_key="extracted_answer")


def _scan(path: Path, spec: ScoreSpec | None) -> Any:
    try:
        scan = scan_shard(str(path), 0, spec, {"math_agent": "math_env"})
    except InputError as exc:
        return ("error", str(exc))
    perf = {key: accumulator.result() for key, accumulator in scan.perf.items()}
    return ("rows", scan.rows, perf, scan.row_keys, scan.sha256, scan.nbytes)


def test_fast_scan_agrees_with_the_full_reading_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = tmp_path / "shard.jsonl"
    fast_rows = 0
    for number, line in enumerate(lines(1500, SEED + 1)):
        shard.write_bytes(line + b"\n")
        spec = SPEC if number % 2 else None
        fast = _scan(shard, spec)
        with monkeypatch.context() as patch:
            patch.setattr(scan_module, "loads_shallow", lambda _: None)
            full = _scan(shard, spec)
        assert fast == full, line
        if fast[0] == "rows" and fast[1] and loads_shallow(line + b"\n") is not None:
            fast_rows += 1
    assert fast_rows > 300  # the fast reading did answer for the readable lines


def test_lean_row_keeps_every_value_the_scan_reads(tmp_path: Path) -> None:
    row = {
        "_ng_task_index": 2**70, "_ng_rollout_index": 1, "mask_sample": [0],
        "agent_ref": {"name": "math_agent", "x": [1]}, "ng_perf": {"num_turns": 2, "completion_tokens": 7},
        "response": {"output": [{"text": "long"}], "usage": {"output_tokens": 5, "input_tokens": True}},
        "reward": {"score": 1}, "extracted_answer": {"b": [1], "a": "x"}, "steps": 3, "note": "text",
    }  # fmt: skip
    shard = tmp_path / "s.jsonl"
    shard.write_text(json.dumps(row, separators=(",", ":")) + "\n")
    (scanned,) = scan_shard(str(shard), 0, SPEC, {"math_agent": "math_env"}).rows
    assert scanned.facts.task == 2**70 and scanned.facts.masked and scanned.compact
    assert scanned.facts.fields == {"steps": 3, "output_tokens": 5, "input_tokens": 1}
    assert scanned.facts.info["reward"] == {"score": 1}
    assert scanned.facts.answer == b'{"a":"x","b":[1]}'
    assert (scanned.group.key, scanned.group.is_environment) == ("math_env", True)


def test_merge_copies_rows_in_order_through_small_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(merge_module, "_BATCH", 64)
    rng = random.Random(SEED)
    rows: list[dict[str, Any]] = [
        {"_ng_task_index": task, "_ng_rollout_index": 0, "pad": "x" * rng.randrange(0, 150)}
        for task in range(40)
    ]
    rng.shuffle(rows)
    compact = [json.dumps(row, separators=(",", ":")) for row in rows[:20]]
    spaced = [json.dumps(row) for row in rows[20:]]
    (tmp_path / "a.jsonl").write_text("\n".join(compact))  # no newline after the last line
    (tmp_path / "b.jsonl").write_text("\n".join(spaced) + "\n")
    scans = [scan_shard(str(tmp_path / name), index) for index, name in enumerate(("a.jsonl", "b.jsonl"))]
    digest = write_merged(scans, str(tmp_path / "merged.jsonl"))
    merged = (tmp_path / "merged.jsonl").read_bytes()
    ordered = sorted(rows, key=lambda row: row["_ng_task_index"])
    assert merged == b"".join(json.dumps(row, separators=(",", ":")).encode() + b"\n" for row in ordered)
    assert (digest.sha256, digest.bytes) == (hashlib.sha256(merged).hexdigest(), len(merged))


def _shards_for_copy(tmp_path: Path) -> tuple[list[Any], bytes, int]:
    """Two shards: one already in merge order (its rows coalesce into spans) with a spaced row, a
    CRLF row and no newline at its end; one in reverse order. Returns their scans, the merged
    bytes they must give and how many of those bytes are not copied verbatim."""
    rows = [
        {"_ng_task_index": t, "_ng_rollout_index": r, "t": "ü" * (t % 7)} for t in range(30) for r in (0, 1)
    ]
    compact = [json.dumps(row, ensure_ascii=False, separators=(",", ":")) for row in rows]
    lines_a = compact[:30]
    lines_a[10] = json.dumps(rows[10], ensure_ascii=False)  # spaced: re-serialized
    lines_a[20] += "\r"  # CRLF: re-serialized
    (tmp_path / "a.jsonl").write_bytes("\n".join(lines_a).encode())
    (tmp_path / "b.jsonl").write_bytes("".join(line + "\n" for line in compact[30:][::-1]).encode())
    scans = [scan_shard(str(tmp_path / name), index) for index, name in enumerate(("a.jsonl", "b.jsonl"))]
    expected = "".join(line + "\n" for line in compact).encode()
    rewritten = len(compact[10].encode()) + len(compact[20].encode()) + 2 + 1  # and a's last newline
    return scans, expected, rewritten


@pytest.mark.parametrize("copy_min", [1, 200])
@pytest.mark.parametrize("methods", [["copy_file_range", "sendfile"], ["sendfile"], [], "EXDEV"])
def test_local_merge_copies_spans_by_the_kernel_or_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, methods: list[str] | str, copy_min: int
) -> None:
    from gymflow import storage

    scans, expected, rewritten = _shards_for_copy(tmp_path)
    refused = methods == "EXDEV"
    if refused:  # copy_file_range refused (another file system): sendfile takes over

        def refuse(*_: Any) -> int:
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(os, "copy_file_range", refuse)
        methods = ["copy_file_range", "sendfile"]
    monkeypatch.setattr(storage, "_copy_methods", list(methods))
    monkeypatch.setattr(merge_module, "_COPY_MIN", copy_min)  # 1: every run by the kernel
    spans: list[int] = []
    copy_range = storage.copy_range

    def counted(source: int, target: int, offset: int, length: int) -> None:
        spans.append(length)
        copy_range(source, target, offset, length)

    monkeypatch.setattr(storage, "copy_range", counted)
    digest = write_merged(scans, str(tmp_path / "merged.jsonl"))
    merged = (tmp_path / "merged.jsonl").read_bytes()
    assert merged == expected
    assert (digest.sha256, digest.bytes) == (hashlib.sha256(merged).hexdigest(), len(merged))
    # Adjacent rows of shard a went as 3 runs (broken by the two re-serialized rows), b's 30
    # reversed rows as one run each; runs of 200 bytes or more (a's) by the kernel.
    runs_a = [
        sum(len(line) + 1 for line in expected.splitlines()[i:j]) for i, j in ((0, 10), (11, 20), (21, 30))
    ]
    if copy_min == 1:
        assert (len(spans), sum(spans)) == (33, len(expected) - rewritten)
    else:
        assert spans == [runs_a[0], runs_a[1], runs_a[2] - 1]  # a's last line has no newline
    if refused:
        assert storage._copy_methods == ["sendfile"]
    remote = write_merged(scans, "memory://merge-test/merged.jsonl")  # fsspec: the buffered path
    assert storage.open_read("memory://merge-test/merged.jsonl").read() == expected
    assert (remote.sha256, remote.bytes) == (digest.sha256, digest.bytes)


def test_local_merge_of_a_shard_that_shrank_fails_and_keeps_the_output(tmp_path: Path) -> None:
    scans, _, _ = _shards_for_copy(tmp_path)
    out = tmp_path / "merged.jsonl"
    out.write_bytes(b"before\n")
    data = (tmp_path / "b.jsonl").read_bytes()
    (tmp_path / "b.jsonl").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="changed while it was being aggregated"):
        write_merged(scans, str(out))
    assert out.read_bytes() == b"before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "merged.jsonl"]


def test_options_freeze_their_mappings_and_still_pickle() -> None:
    environments = {"math_agent": "math_env"}
    server_config = {"math_env": {"resources_servers": {"m": {"host": "h", "port": 1, "tags": ["a"]}}}}
    options = AggregateOptions(
        input_glob="s/*.jsonl", output="o.jsonl", agent_environments=environments, server_config=server_config
    )
    environments["other"] = "x"  # the caller's dict is copied, not held
    assert dict(options.agent_environments) == {"math_agent": "math_env"}
    with pytest.raises(TypeError, match="immutable"):
        options.agent_environments["x"] = "y"  # type: ignore[index]
    with pytest.raises(TypeError, match="immutable"):
        options.server_config["math_env"]["resources_servers"]["m"]["host"] = "z"
    assert options.server_config["math_env"]["resources_servers"]["m"]["tags"] == ("a",)
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and isinstance(copy.server_config, FrozenDict)
    assert options.parameters()["agent_environments"] == {"math_agent": "math_env"}
    assert type(AggregateOptions(input_glob="", output="").agent_environments) is FrozenDict
