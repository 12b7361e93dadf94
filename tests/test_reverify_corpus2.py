"""The second reverify corpus (``bench/reverify_corpus2.py``): the bodies a bare client posts are
the ones reverify builds, for the rows it verifies, and the corpus has the shapes it claims."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from gymflow.reverify._inputs import build_body, iter_rows, read_materialized, row_key

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import reverify_corpus2  # noqa: E402


def test_bodies_are_reverifys_for_the_rows_it_verifies(tmp_path: Path) -> None:
    verified = reverify_corpus2.write(tmp_path, 1500, seed=4)
    materialized = read_materialized(str(tmp_path / reverify_corpus2.MATERIALIZED), lambda _: None)
    rollouts = str(tmp_path / reverify_corpus2.ROLLOUTS)
    expected, seen, unmatched, duplicates = [], set(), 0, 0
    for number, _, _, row in iter_rows(rollouts):
        key = row_key(rollouts, number, row)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        line = materialized.get(key)
        if line is None:
            unmatched += 1
            continue
        expected.append(build_body(orjson.loads(line), row))
    bodies = [orjson.loads(line) for line in (tmp_path / reverify_corpus2.BODIES).read_bytes().splitlines()]
    assert bodies == expected and len(bodies) == verified
    assert unmatched and duplicates  # both kinds of rows reverify does not send are there
    tasksets = sum("task_input" in orjson.loads(materialized[key]) for key in materialized.spans)
    assert tasksets > len(bodies) // 5
    assert {body["agent_ref"]["name"] for body in bodies} == set(reverify_corpus2.AGENTS)
    text = (tmp_path / reverify_corpus2.ROLLOUTS).read_bytes()
    assert b"\r\n" in text and b"\n\n" in text.replace(b"  \n", b"\n").replace(b"\t\r\n", b"\n")


def test_same_seed_same_files(tmp_path: Path) -> None:
    reverify_corpus2.write(tmp_path / "a", 300, seed=1)
    reverify_corpus2.write(tmp_path / "b", 300, seed=1)
    for name in (reverify_corpus2.MATERIALIZED, reverify_corpus2.ROLLOUTS, reverify_corpus2.BODIES):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
