"""``row_key`` names, for each input line, the key its row gets in ``rollout_verdicts.jsonl``
without checking it: the report is those keys stably sorted (what ``gymflow.healthy`` matches
rows to their verdicts by)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from gymflow.health import HealthOptions, SortKey, row_key, run_health, verdict_key
from tests.health.builders import line, record

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "run" / "rollouts.jsonl"

_ODD_IDENTITIES = [
    line(record(3)),
    "",  # a blank line: no row, but a physical line
    "   ",
    '{"_ng_rollout_index": 1, "ng_trajectory": null}',  # no task: the row's ordinal
    '{"_ng_task_index": true, "_ng_rollout_index": 2.0}',  # (1, 2)
    '{"_ng_task_index": "b", "_ng_rollout_index": 0}',
    '{"_ng_task_index": 2, "_ng_rollout_index": 1, "stage_index": 1}',
    '{"_ng_task_index": 2, "_ng_rollout_index": 1, "stage_index": 0}',
    '{"_ng_task_index": 2, "_ng_rollout_index": 1, "stage_index": null}',
    '{"_ng_task_index": null}',  # unreadable identity: a synthetic task
    "[]",
    "{bad",
    "\ufeff" + line(record(4)),  # a BOM: unreadable
    line(record(3)),  # a duplicate of the first
    '{"_ng_task_index": "__unreadable_record__:input-0:line-10"}',  # collides with line 10
]


def _keys_of(path: Path) -> list[SortKey]:
    keys: list[SortKey] = []
    ordinal = 0
    for number, raw in enumerate(path.read_bytes().splitlines(keepends=True), start=1):
        key = row_key(raw, number, ordinal)
        if key is not None:
            keys.append(key)
            ordinal += 1
    return keys


@pytest.mark.parametrize("source", ["example", "odd identities"])
def test_the_report_is_the_rows_keys_in_stable_order(source: str, tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    if source == "example":  # unreadable and duplicated lines among 40
        shutil.copy(EXAMPLE, rollouts)
    else:
        rollouts.write_text("\n".join(_ODD_IDENTITIES) + "\n", encoding="utf-8")
    run_health(HealthOptions((str(rollouts),), str(tmp_path), workers=1))
    verdicts = [json.loads(raw) for raw in (tmp_path / "rollout_verdicts.jsonl").read_text().splitlines()]
    keys = _keys_of(rollouts)
    assert len(keys) == len(verdicts)
    assert sorted(keys) == [verdict_key(row) for row in verdicts]  # sorted() is stable


def test_blank_lines_have_no_key() -> None:
    assert row_key(b"\n", 1, 0) is None and row_key(b" \t\r\n", 1, 0) is None
    assert row_key(b'{"_ng_task_index": 5}\n', 1, 0) == ((0, 5), (0, 0), (1, "None"))


@pytest.mark.parametrize("seed", range(3))
def test_a_key_read_from_the_identity_members_is_the_whole_lines(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from the identity members' slices (when the C pass vouches for the line), a key is the
    one the whole parsed line gives, on damaged and intact lines, odd identities included."""
    from gymflow._json_agreement import object_members
    from gymflow.health import _runs
    from tests import fuzz_lines

    odd = [text.encode() for text in _ODD_IDENTITIES]
    retyped = [
        b'{"_ng_task_index": %b, "_ng_rollout_index": %b, "stage_index": %b, "x": 1}' % (task, rollout, task)
        for task, rollout in itertools.product(fuzz_lines.ODD_VALUES, repeat=2)
    ]
    lines = [*fuzz_lines.lines(2500, seed), *odd, *retyped]
    fast = [row_key(raw, number, number) for number, raw in enumerate(lines, start=1)]
    with monkeypatch.context() as exact:
        exact.setattr(_runs, "object_members", lambda text, names: None)
        whole = [row_key(raw, number, number) for number, raw in enumerate(lines, start=1)]
    assert fast == whole
    vouched = sum(object_members(raw, _runs._IDENTITY) is not None for raw in lines)
    assert vouched > 300  # the fast way is taken for a good share of them
