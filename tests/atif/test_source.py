"""``atif_items``: manifest and materialized rows (§3.2, §3.3), per-entry order (§3.4, §3.9), paths.

Items 57-60, 65, 67 at the level of the function the reverify core calls.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gymflow.atif import AtifError, atif_items
from gymflow.verify_items import Item
from tests.atif.builders import (
    changed,
    dumps,
    manifest_row,
    materialized_row,
    sha256_file,
    text_trajectory,
    tool_trajectory,
    write_json,
    write_jsonl,
)


class Run:
    """A results directory: materialized inputs, a manifest and trajectories under ``tmp_path``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inputs = write_jsonl(root / "inputs.jsonl", [materialized_row(0, 0), materialized_row(1, 0)])
        self.warnings: list[str] = []
        (root / "relay").mkdir()
        self.manifest = root / "relay" / "manifest.jsonl"

    def trajectory(self, name: str, doc: Any) -> Path:
        path = self.root / "relay" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_json(path, doc)

    def write_manifest(self, rows: list[Any], raw: str | None = None) -> None:
        self.manifest.write_text(raw if raw is not None else "".join(dumps(r) + "\n" for r in rows))

    def items(self, *, limit: int | None = None, allow_outside: bool = False) -> list[Item]:
        return atif_items(
            str(self.manifest),
            str(self.inputs),
            limit=limit,
            allow_outside_manifest=allow_outside,
            warn=self.warnings.append,
        )

    def error(self, **kwargs: Any) -> str:
        with pytest.raises(AtifError) as caught:
            self.items(**kwargs)
        return str(caught.value)


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def two_entries(run: Run, *, pin_first: bool = True) -> tuple[Path, Path]:
    first = run.trajectory("t0.json", text_trajectory("\\boxed{A}", trajectory_id="t0"))
    second = run.trajectory("t1.json", tool_trajectory(trajectory_id="t1"))
    run.write_manifest(
        [
            manifest_row("t0.json", 0, 0, sha256_file(first) if pin_first else None),
            manifest_row("t1.json", 1, 0),
        ]
    )
    return first, second


def test_two_entries_one_pinned(run: Run) -> None:
    first, second = two_entries(run)
    items = run.items()
    assert run.warnings == [
        f"ATIF manifest {run.manifest} has 1 of 2 entries without expected_sha256; Gym will record "
        "each observed source hash but cannot compare those files with a manifest-pinned digest."
    ]
    assert [(i.task, i.rollout, i.mode) for i in items] == [(0, 0, "atif"), (1, 0, "atif")]
    inputs_lines = run.inputs.read_bytes().split(b"\n")
    for item, path, line in zip(items, (first, second), inputs_lines, strict=False):
        provenance = item.body["_ng_atif_provenance"]
        assert provenance == {
            "trajectory_id": json.loads(path.read_text())["trajectory_id"],
            "session_id": "s1",
            "source_sha256": sha256_file(path),
            "schema_version": "ATIF-v1.7",
            "projection_status": "complete",
        }
        assert item.source_sha256 == hashlib.sha256(line + b"\n" + path.read_bytes()).hexdigest()
        assert list(item.body)[-2:] == ["response", "_ng_atif_provenance"]
        assert str(run.root) not in json.dumps(item.body)


def test_all_pinned_no_warning_and_limit(run: Run) -> None:
    first, second = two_entries(run)
    run.write_manifest(
        [
            manifest_row("t0.json", 0, 0, sha256_file(first)),
            manifest_row("t1.json", 1, 0, sha256_file(second)),
        ]
    )
    assert len(run.items()) == 2 and run.warnings == []
    (run.root / "relay" / "t1.json").write_text("not json")  # never read with --limit 1
    assert [i.key for i in run.items(limit=1)] == [(0, 0)]


def test_unpinned_warning_counts_entries_before_limit(run: Run) -> None:
    two_entries(run, pin_first=False)
    run.items(limit=1)
    assert "has 2 of 2 entries without expected_sha256" in run.warnings[0]


def test_hash_mismatch(run: Run) -> None:
    first, _ = two_entries(run)
    run.write_manifest([manifest_row("t0.json", 0, 0, "0" * 64)])
    assert (
        run.error() == f"ATIF source hash mismatch for {first}: expected {'0' * 64}, got {sha256_file(first)}"
    )


def test_hash_is_checked_before_the_post_hash_shapes(run: Run) -> None:
    unresolved = changed(tool_trajectory(), lambda d: d["steps"][1]["observation"]["results"].pop(0))
    path = run.trajectory("t.json", unresolved)
    run.write_manifest([manifest_row("t.json", 0, 0, "1" * 64)])
    assert run.error().startswith(f"ATIF source hash mismatch for {path}")
    run.write_manifest([manifest_row("t.json", 5, 0)])
    assert run.error() == f"manifest entry {path} has no matching materialized input (5, 0)"
    run.write_manifest([manifest_row("t.json", 0, 0)])
    assert run.error() == "step 2 has no observation result for tool call(s) 'c2'"


def test_pre_hash_shapes_come_first(run: Run) -> None:
    run.trajectory("t.json", text_trajectory(continued_trajectory_ref="t0"))
    run.write_manifest([manifest_row("t.json", 0, 0, "1" * 64)])
    assert run.error() == "continued ATIF trajectories are not supported by the initial reverify adapter"


def test_declared_source_indices(run: Run) -> None:
    for source, message in (
        ({"task_index": 0, "rollout_index": "0"}, "Gym ATIF source rollout_index is invalid: '0'"),
        ({"task_index": True}, "Gym ATIF source task_index is invalid: True"),
        ({"task_index": 3}, "Gym ATIF source task_index 3 conflicts with manifest value 0"),
    ):
        run.trajectory("t.json", text_trajectory(extra={"nemo_gym": {"source": source}}))
        run.write_manifest([manifest_row("t.json", 0, 0)])
        assert run.error() == message
    run.trajectory(
        "t.json", text_trajectory(extra={"nemo_gym": {"source": {"task_index": 0, "rollout_index": 0}}})
    )
    assert len(run.items()) == 1


def test_trajectory_read_and_parse_errors(run: Run) -> None:
    run.write_manifest([manifest_row("missing.json", 0, 0)])
    missing = run.root / "relay" / "missing.json"
    assert (
        run.error()
        == f"could not read ATIF trajectory {missing}: [Errno 2] No such file or directory: '{missing}'"
    )
    (run.root / "relay" / "bad.json").write_bytes(b'{"a": \xff}')
    run.write_manifest([manifest_row("bad.json", 0, 0)])
    bad = run.root / "relay" / "bad.json"
    assert run.error() == (
        f"invalid ATIF trajectory {bad}: "
        "'utf-8' codec can't decode byte 0xff in position 6: invalid start byte"
    )
    bad.write_text('{"schema_version": "ATIF-v1.7", "x": NaN}')
    assert run.error() == f"invalid ATIF trajectory {bad}: non-JSON numeric constant 'NaN'"
    bad.write_text('{"s": "\\ud800"}')
    assert run.error() == f"invalid ATIF trajectory {bad}: lone surrogate in a JSON string"
    write_json(bad, changed(text_trajectory(), lambda d: d["steps"][1].update(timestamp="soon")))
    assert run.error() == (
        f"invalid ATIF trajectory {bad}: steps[1].timestamp: invalid ISO 8601 timestamp: "
        "Invalid isoformat string: 'soon'"
    )


def test_bom_and_utf16_trajectories(run: Run) -> None:
    path = run.root / "relay" / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + dumps(text_trajectory()).encode())
    run.write_manifest([manifest_row("t.json", 0, 0)])
    assert run.items()[0].body["_ng_atif_provenance"]["source_sha256"] == sha256_file(path)
    path.write_bytes(dumps(text_trajectory()).encode("utf-16"))
    assert len(run.items()) == 1


@pytest.mark.parametrize(
    ("row", "detail"),
    [
        (
            manifest_row("t.json", sha="A" * 64),
            "expected_sha256: String should match pattern '^[0-9a-f]{64}$'",
        ),
        ({**manifest_row("t.json"), "note": 1}, "note: Extra inputs are not permitted"),
        (manifest_row("t.json", task="0"), "_ng_task_index: Input should be a valid integer"),  # type: ignore[arg-type]
        (manifest_row("t.json", rollout=True), "_ng_rollout_index: Input should be a valid integer"),
        (manifest_row("t.json", task=-1), "_ng_task_index: Input should be greater than or equal to 0"),
        ({**manifest_row("t.json"), "task_index": 0}, "task_index: Extra inputs are not permitted"),
        (manifest_row(""), "trajectory_path is empty"),
        ({"_ng_task_index": 0, "_ng_rollout_index": 0}, "trajectory_path: Field required"),
        ([1], "Input should be an object"),
    ],
)
def test_invalid_manifest_rows(run: Run, row: Any, detail: str) -> None:
    run.write_manifest([], raw="\n" + dumps(row) + "\n")
    assert run.error() == f"invalid ATIF manifest row 2 in {run.manifest}: {detail}"


def test_manifest_json_errors_and_alternative_names(run: Run) -> None:
    run.write_manifest([], raw='{"trajectory_path": "t.json", "a": 1, "a": 2}\n')
    assert run.error() == f"invalid ATIF manifest row 1 in {run.manifest}: duplicate object key 'a'"
    run.trajectory("t.json", text_trajectory())
    run.write_manifest([{"trajectory_path": "t.json", "task_index": 1, "rollout_index": 0}])
    assert [i.key for i in run.items()] == [(1, 0)]
    run.write_manifest([], raw="\ufeff" + dumps(manifest_row("t.json")) + "\n")
    assert len(run.items()) == 1


def test_manifest_without_entries_or_unreadable(run: Run) -> None:
    run.write_manifest([], raw="\n  \n\n")
    assert run.error() == f"ATIF manifest {run.manifest} contains no entries"
    run.manifest.unlink()
    assert run.error() == (
        f"could not read ATIF manifest {run.manifest}: [Errno 2] No such file or directory: '{run.manifest}'"
    )


def test_batch_uniqueness(run: Run) -> None:
    run.trajectory("a.json", text_trajectory(trajectory_id="ta"))
    run.trajectory("b.json", text_trajectory(trajectory_id="ta", session_id="other"))
    run.trajectory("c.json", text_trajectory(trajectory_id="ta"))
    run.trajectory("d.json", text_trajectory(trajectory_id=" "))
    run.trajectory("e.json", text_trajectory(trajectory_id=None))
    (run.root / "relay" / "sub").mkdir()
    a = run.root / "relay" / "a.json"
    run.write_manifest([manifest_row("a.json", 0, 0), manifest_row("missing.json", 0, 0)])
    assert run.error() == "manifest maps materialized rollout (0, 0) more than once"
    run.write_manifest([manifest_row("a.json", 0, 0), manifest_row("sub/../a.json", 1, 0)])
    assert run.error() == f"manifest uses ATIF source path {a} more than once"
    run.write_manifest([manifest_row("a.json", 0, 0), manifest_row("c.json", 1, 0)])
    assert run.error() == f"manifest uses ATIF source content {sha256_file(a)} more than once"
    run.write_manifest([manifest_row("a.json", 0, 0), manifest_row("b.json", 1, 0)])
    assert run.error() == "manifest repeats ATIF trajectory identity ('trajectory_id', 'ta')"
    run.write_manifest([manifest_row("d.json", 0, 0), manifest_row("e.json", 1, 0)])
    message = run.error()
    assert message.startswith("manifest repeats ATIF trajectory identity ('content_sha256', '")


def test_no_ids_provenance_nulls(run: Run) -> None:
    run.trajectory("t.json", text_trajectory(trajectory_id=None, session_id=None))
    run.write_manifest([manifest_row("t.json")])
    provenance = run.items()[0].body["_ng_atif_provenance"]
    assert (provenance["trajectory_id"], provenance["session_id"]) == (None, None)
    run.trajectory("t.json", text_trajectory(trajectory_id=""))
    assert run.items()[0].body["_ng_atif_provenance"]["trajectory_id"] == ""


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"a": 1', ""],
            "invalid materialized input row 1 in {p}: Expecting ',' delimiter: line 1 column 8 (char 7)",
        ),
        (["", "[1, 2]"], "materialized input row 2 in {p} is not an object"),
        (
            ["", dumps(materialized_row(task=True))],
            "materialized input row 1 has invalid _ng_task_index: True",
        ),  # type: ignore[arg-type]
        ([dumps(materialized_row(rollout=-1))], "materialized input row 1 has invalid _ng_rollout_index: -1"),
        (
            [dumps(materialized_row(agent_ref={"name": " "}))],
            "materialized input row 1 has invalid agent_ref.name: ' '",
        ),
        (
            [dumps(materialized_row(agent_ref="x"))],
            "materialized input row 1 has invalid agent_ref.name: None",
        ),
        ([dumps(materialized_row()), dumps(materialized_row())], "duplicate materialized input key (0, 0)"),
        (
            ['{"x": 1e999}'],
            "invalid materialized input row 1 in {p}: JSON number '1e999' exceeds the finite float range",
        ),
    ],
)
def test_materialized_input_messages(run: Run, lines: list[str], message: str) -> None:
    run.inputs.write_text("\n".join(lines) + "\n")
    run.trajectory("t.json", text_trajectory())
    run.write_manifest([manifest_row("t.json")])
    assert run.error() == message.format(p=run.inputs)


def test_materialized_inputs_unreadable_before_manifest(run: Run) -> None:
    run.inputs.unlink()
    run.write_manifest([], raw="")
    assert run.error() == (
        f"could not read materialized inputs {run.inputs}: "
        f"[Errno 2] No such file or directory: '{run.inputs}'"
    )


# -- G: trajectory paths stay inside the manifest's directory -------------------------------------


def test_path_escapes_are_refused(run: Run) -> None:
    outside = write_json(run.root / "outside.json", text_trajectory())
    base = os.path.realpath(run.root / "relay")
    run.write_manifest([], raw="\n" + dumps(manifest_row("../outside.json")) + "\n")
    assert run.error() == (
        f"ATIF manifest row 2 in {run.manifest}: trajectory_path '../outside.json' resolves outside "
        f"the manifest directory {base} (to {outside}); pass --allow-outside-manifest to read it"
    )
    run.write_manifest([manifest_row(str(outside))])
    assert f"trajectory_path '{outside}' resolves outside the manifest directory" in run.error()
    os.symlink(outside, run.root / "relay" / "link.json")
    run.write_manifest([manifest_row("link.json")])
    assert "ATIF manifest row 1 in" in run.error()
    assert "trajectory_path 'link.json' resolves outside the manifest directory" in run.error()
    assert [i.key for i in run.items(allow_outside=True)] == [(0, 0)]


def test_symlink_loop_is_refused(run: Run) -> None:
    relay = run.root / "relay"
    os.symlink(relay / "b.json", relay / "a.json")
    os.symlink(relay / "a.json", relay / "b.json")
    run.write_manifest([manifest_row("a.json")])
    assert run.error() == f"ATIF manifest row 1 in {run.manifest}: trajectory_path 'a.json' is a symlink loop"
    assert run.error(allow_outside=True).endswith("is a symlink loop")


def test_symlinks_and_absolute_paths_inside_are_fine(run: Run) -> None:
    target = run.trajectory("data/t.json", text_trajectory())
    os.symlink(target, run.root / "relay" / "link.json")
    run.write_manifest([manifest_row("link.json")])
    assert len(run.items()) == 1
    run.write_manifest([manifest_row(str(target))])
    assert len(run.items()) == 1


# -- S3 ------------------------------------------------------------------------------------------


def test_manifest_and_trajectories_on_s3(s3_bucket: str, tmp_path: Path) -> None:
    from gymflow import storage

    doc = dumps(tool_trajectory()).encode()
    storage.write_atomic(f"{s3_bucket}/run/relay/t.json", doc)
    rows = dumps(materialized_row()).encode() + b"\n"
    storage.write_atomic(f"{s3_bucket}/run/inputs.jsonl", rows)
    pin = hashlib.sha256(doc).hexdigest()
    storage.write_atomic(f"{s3_bucket}/run/relay/m.jsonl", dumps(manifest_row("t.json", sha=pin)).encode())
    warnings: list[str] = []
    items = atif_items(
        f"{s3_bucket}/run/relay/m.jsonl",
        f"{s3_bucket}/run/inputs.jsonl",
        limit=None,
        allow_outside_manifest=False,
        warn=warnings.append,
    )
    assert warnings == [] and items[0].body["_ng_atif_provenance"]["source_sha256"] == pin
    assert items[0].source_sha256 == hashlib.sha256(rows[:-1] + b"\n" + doc).hexdigest()
    storage.write_atomic(f"{s3_bucket}/run/other.json", doc)
    storage.write_atomic(f"{s3_bucket}/run/relay/m.jsonl", dumps(manifest_row("../other.json")).encode())
    with pytest.raises(AtifError) as caught:
        atif_items(
            f"{s3_bucket}/run/relay/m.jsonl",
            f"{s3_bucket}/run/inputs.jsonl",
            limit=None,
            allow_outside_manifest=False,
            warn=warnings.append,
        )
    assert str(caught.value) == (
        f"ATIF manifest row 1 in {s3_bucket}/run/relay/m.jsonl: trajectory_path '../other.json' "
        f"resolves outside the manifest directory {s3_bucket}/run/relay"
    )
    allowed = atif_items(
        f"{s3_bucket}/run/relay/m.jsonl",
        f"{s3_bucket}/run/inputs.jsonl",
        limit=None,
        allow_outside_manifest=True,
        warn=warnings.append,
    )
    assert allowed[0].body["_ng_atif_provenance"]["source_sha256"] == pin


def test_s3_reads_ahead_but_reports_in_manifest_order(s3_bucket: str) -> None:
    from gymflow import storage

    base = f"{s3_bucket}/run"
    storage.write_atomic(
        f"{base}/inputs.jsonl", "".join(dumps(materialized_row(t, 0)) + "\n" for t in range(6)).encode()
    )
    for task in range(6):
        if task != 4:
            storage.write_atomic(
                f"{base}/t{task}.json", dumps(text_trajectory(trajectory_id=f"t{task}")).encode()
            )

    def run(rows: list[Any]) -> list[Item]:
        storage.write_atomic(f"{base}/m.jsonl", "".join(dumps(r) + "\n" for r in rows).encode())
        return atif_items(
            f"{base}/m.jsonl", f"{base}/inputs.jsonl", limit=None, allow_outside_manifest=False, warn=print
        )

    assert [i.key for i in run([manifest_row(f"t{t}.json", t, 0) for t in (3, 0, 2, 1)])] == [
        (3, 0),
        (0, 0),
        (2, 0),
        (1, 0),
    ]
    with pytest.raises(AtifError) as caught:
        run([manifest_row(f"t{t}.json", t, 0) for t in range(6)])
    assert str(caught.value).startswith(f"could not read ATIF trajectory {base}/t4.json: ")
    storage.write_atomic(f"{base}/t1.json", b"{")
    with pytest.raises(AtifError) as caught:
        run([manifest_row(f"t{t}.json", t, 0) for t in range(6)])
    assert str(caught.value).startswith(f"invalid ATIF trajectory {base}/t1.json: ")
    with pytest.raises(AtifError) as caught:
        run([manifest_row("t0.json", 0, 0), manifest_row("t4.json", 0, 0)])
    assert str(caught.value) == "manifest maps materialized rollout (0, 0) more than once"


def test_prefetch_keeps_order_and_defers_errors() -> None:
    import random
    import time

    from gymflow.atif.manifest import ManifestEntry
    from gymflow.atif.prefetch import fetched_in_order

    entries = [
        ManifestEntry(row=i + 1, trajectory_path=f"t{i}", task=i, rollout=0, expected_sha256=None)
        for i in range(40)
    ]

    def fetch(entry: ManifestEntry) -> tuple[str, bytes]:
        time.sleep(random.random() / 200)
        if entry.task == 30:
            raise AtifError("boom 30")
        return entry.trajectory_path, b""

    seen = []
    with pytest.raises(AtifError, match="boom 30"):
        for entry, outcome in fetched_in_order(entries, fetch, workers=4, window=8):
            seen.append((entry.trajectory_path, outcome()[0]))
    assert seen == [(f"t{i}", f"t{i}") for i in range(30)]
