"""reverify's three readers of a few top-level members (selection's rollout heads, the materialized
index, a body's rollout fields) against the whole row parsed, on damaged and intact rollout lines:
the same values, keys, routes and bodies, and the same errors with the same messages."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymflow._json_agreement import object_members
from gymflow.errors import InputError
from gymflow.reverify import _inputs
from gymflow.reverify._inputs import build_body, read_heads, read_materialized, sent_fields
from tests import fuzz_lines

pytestmark = pytest.mark.timeout(60)

_MATERIALIZED = {"responses_create_params": {"input": []}, "_ng_task_index": 0, "expected_answer": "A"}


def _outcome(read: Callable[[Any], Any], argument: Any) -> tuple[str, Any]:
    try:
        return "read", read(argument)
    except InputError as exc:
        return "refused", str(exc)


def _heads(path: str) -> list[Any]:
    """Each row's head as compared (its values typed), and its raw line and where selection found
    the response (which only a reading of the members can say)."""
    return [
        (
            (
                number,
                offset,
                raw,
                head.has_response,
                fuzz_lines.typed([head.task, head.rollout, head.failure_class]),
                key,
            ),
            (raw, head.response_at),
        )
        for number, offset, raw, head, key in read_heads(path)
    ]


def _index(path: str) -> tuple[dict[Any, int], dict[Any, Any]]:
    index = read_materialized(path, lambda _: None)
    index.close()
    return index.spans, {key: fuzz_lines.typed(dict(fields)) for key, fields in index.routes.items()}


def _body(found: tuple[bytes, int]) -> Any:
    """The body the stream builds from the row's line, with what selection found of it."""
    raw, response_at = found
    body = build_body(_MATERIALIZED, sent_fields(raw, response_at))
    return fuzz_lines.typed(orjson.loads(orjson.dumps(body)))


def _read_all(paths: list[str]) -> list[Any]:
    out = []
    for path in paths:
        kind, heads = _outcome(_heads, path)
        body = None
        if kind == "read":
            compared = [head for head, _ in heads]
            if heads and heads[0][0][3]:  # selection keeps a row with a response
                body = _outcome(_body, heads[0][1])
            heads = compared
        out.append(((kind, heads), _outcome(_index, path), body))
    return out


def _lines(count: int, seed: int) -> list[bytes]:
    """Rollout-like rows (some with a ``task_input``, object or not, as materialized rows have,
    some with the other fields a body takes), four in ten intact and the rest damaged."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        row = fuzz_lines.row(rng)
        if rng.random() < 0.3:
            row["task_input"] = rng.choice([{"task_data": {"q": 1}}, {}, [1], "x", None])
        if rng.random() < 0.2:
            row[rng.choice(["deliverables_dir", "reference_ids"])] = rng.choice(["/d", [1, "r"], None])
        line = fuzz_lines.dumps(row, rng)
        out.append(line if rng.random() < 0.4 else fuzz_lines.mutate(line, rng))
    return [line for line in out if b"\n" not in line]


def test_the_members_read_are_the_whole_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(1500, seed=20261209)
    paths = []
    for number, line in enumerate(lines):
        path = tmp_path / f"{number}.jsonl"
        path.write_bytes(line + b"\n")
        paths.append(str(path))
    found = _read_all(paths)
    monkeypatch.setattr(_inputs, "object_members", lambda text, names: None)
    exact = _read_all(paths)
    for line, fast_read, exact_read in zip(lines, found, exact, strict=True):
        assert fast_read == exact_read, line[:300]
    # Both ways are taken: lines the one pass answers, and refused lines (bad JSON, bad keys).
    answered = sum(object_members(line, (b"response",)) is not None for line in lines)
    refused = sum(heads[0] == "refused" for heads, _, _ in found)
    bodies = sum(body is not None for _, _, body in found)
    assert answered > 250 and refused > 300 and bodies > 400, (answered, refused, bodies)
