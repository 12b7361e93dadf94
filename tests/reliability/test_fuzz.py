"""Hostile input for aggregate, join and health (issue 11, attacks 2 and 3).

Generated rows, one of them replaced by an injected value (lone surrogate, 2**70, 1e400, deep
nesting, BOM, NUL, invalid UTF-8, NaN, Infinity) or by a randomly mutated copy. Every command
must end without a traceback: health with one verdict row per non-blank line; aggregate and join
with exactly one error line naming the file and the line (and the field where one applies), or,
for a line they can read, outputs that parse as strict JSON and keep every value exactly.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from gymflow.cli import main
from tests.reliability.helpers import health_rows, strict_json

BIG = 2**70
ROWS = 12
BAD_AT = 7  # 1-based line number of the injected line

INJECTED: dict[str, tuple[bytes, str | None]] = {
    # name: (line, field the error must name; None: no field / the line is readable)
    "lone_surrogate": (b'{"_ng_task_index": 3, "note": "\\ud800"}', "note"),
    "deep_nesting": (b'{"_ng_task_index": 3, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", None),
    "huge_float": (b'{"_ng_task_index": 3, "reward": 1e400}', "reward"),
    "nan": (b'{"_ng_task_index": 3, "reward": NaN}', "reward"),
    "infinity": (b'{"_ng_task_index": 3, "usage": {"t": -Infinity}}', "usage.t"),
    "bom": (b'\xef\xbb\xbf{"_ng_task_index": 3}', None),
    "nul": (b'{"_ng_task_index": 3, "note": "a\x00b"}', None),
    "invalid_utf8": (b'{"_ng_task_index": 3, "note": "\xff\xfe"}', None),
    "truncated": (b'{"_ng_task_index": 3, "note": "abc', None),
}
READABLE = {"big_integer": b'{"_ng_task_index": %d, "_ng_rollout_index": 0, "reward": %d}' % (BIG, BIG)}


def _corpus(path: Path, bad: bytes, at: int = BAD_AT) -> Path:
    lines = [json.dumps(row).encode() for row in health_rows(ROWS)]
    lines.insert(at - 1, bad)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _mutations(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    base = json.dumps({**health_rows(2)[1], "_ng_task_index": 777}).encode()
    out = []
    for _ in range(count):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            position = rng.randrange(len(data))
            if kind < 0.4:
                data[position] = rng.randrange(256)
            elif kind < 0.7:
                data.insert(position, rng.choice(b'"{}[],:\\\x00\xff\xef'))
            else:
                del data[position : position + rng.randint(1, 8)]
        out.append(bytes(data).replace(b"\n", b" "))
    return out


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    return lines[0]


def _aggregate(tmp_path: Path, bad: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    shard = _corpus(tmp_path / "in" / "shard.jsonl", bad)
    out = tmp_path / "out" / "merged.jsonl"
    code = main(["eval", "aggregate", "-i", str(shard), "-o", str(out), "--direct", "--no-health-check"])
    return code, capsys.readouterr().err, shard


def _join(tmp_path: Path, bad: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    rollouts = _corpus(tmp_path / "run" / "rollouts.jsonl", bad)
    code = main(["eval", "join", str(rollouts.parent), "--direct", "--no-capture"])
    return code, capsys.readouterr().err, rollouts


def _health(tmp_path: Path, bad: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[Any]]:
    rollouts = _corpus(tmp_path / "h" / "rollouts.jsonl", bad)
    code = main(["eval", "health-check", str(rollouts.parent), "--direct", "--no-cache", "--workers", "1"])
    capsys.readouterr()
    summary = strict_json((rollouts.parent / "quality_summary.json").read_text())
    verdicts = (rollouts.parent / "rollout_verdicts.jsonl").read_text()
    rows = [strict_json(line) for line in verdicts.splitlines()]
    assert summary["run"]["artifacts"]["records"] == len(rows)
    return code, rows


@pytest.mark.parametrize("name", sorted(INJECTED))
def test_injected_bad_line_is_one_error_line_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    bad, field = INJECTED[name]
    code, err, shard = _aggregate(tmp_path, bad, capsys)
    line = _one_error_line(err)
    assert code == 1 and line.startswith(f"Error: Malformed JSON in '{shard}' at line {BAD_AT}"), line
    if field is not None:
        assert f"field {field!r}" in line, line
    assert not (tmp_path / "out" / "merged.jsonl").exists()

    code, err, rollouts = _join(tmp_path, bad, capsys)
    line = _one_error_line(err)
    assert code == 2 and f"{rollouts}:{BAD_AT}" in line and "nothing was written" in line, line
    if field is not None:
        assert f"field {field!r}" in line, line
    assert not (rollouts.parent / "rollouts_joined.jsonl").exists()

    code, rows = _health(tmp_path, bad, capsys)
    assert code == 0 and len(rows) == ROWS + 1
    unreadable = f"__unreadable_record__:input-0:line-{BAD_AT}"
    assert unreadable in json.dumps(rows), "the bad line must be an unreadable row"


def test_integers_beyond_64_bits_stay_integers_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = READABLE["big_integer"]
    code, err, _ = _aggregate(tmp_path, bad, capsys)
    assert code == 0, err
    merged = (tmp_path / "out" / "merged.jsonl").read_bytes()
    assert b'"_ng_task_index":%d' % BIG in merged and b'"reward":%d' % BIG in merged
    for line in merged.splitlines():
        strict_json(line)
    strict_json((tmp_path / "out" / "merged_aggregate_metrics.json").read_text())

    code, err, rollouts = _join(tmp_path, bad, capsys)
    assert code == 0, err
    joined = (rollouts.parent / "rollouts_joined.jsonl").read_bytes()
    rows = [strict_json(line) for line in joined.splitlines()]
    assert rows[BAD_AT - 1]["_ng_task_index"] == BIG and rows[BAD_AT - 1]["reward"] == BIG

    code, rows = _health(tmp_path, bad, capsys)
    assert code == 0 and len(rows) == ROWS + 1


@pytest.mark.parametrize("seed", range(3))
def test_mutated_rows_give_one_error_line_or_strict_json_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    for number, bad in enumerate(_mutations(6, seed)):
        base = tmp_path / str(number)
        if not bad.strip():
            continue
        code, err, shard = _aggregate(base, bad, capsys)
        if code == 0:
            for raw in (base / "out" / "merged.jsonl").read_bytes().splitlines():
                strict_json(raw)
            strict_json((base / "out" / "merged_aggregate_metrics.json").read_text())
        else:
            line = _one_error_line(err)
            expected = (f"'{shard}' at line {BAD_AT}", "must be an integer", f"and {BAD_AT}")
            assert any(text in line for text in expected), line
        code, err, rollouts = _join(base, bad, capsys)
        if code in (0, 1):  # 1: a row error (the row is written unchanged)
            for raw in (rollouts.parent / "rollouts_joined.jsonl").read_bytes().splitlines():
                strict_json(raw)
        else:
            line = _one_error_line(err)
            assert f"{rollouts}:{BAD_AT}" in line, line
        code, rows = _health(base, bad, capsys)
        assert code == 0 and len(rows) == ROWS + 1
