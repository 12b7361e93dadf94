"""Rollout id and store: evidence.md §13 C01-C10, plus the reader's file-level behaviour."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gymflow.join import CaptureStore, RowError, RowKeyError, capture_key, projection_identity
from gymflow.join._capture_store import read_local
from tests.join.helpers import L, bundle, codes, inv, join, jsonl, outcome, ref, row, store


def test_c01_single_call_attachment() -> None:
    out = join(row(3, 1), store(**{"3-1": jsonl(L("c1", usage={"input_tokens": 5, "output_tokens": 2}))}))
    capture = out["ng_model_call_capture"]
    assert capture["rollout_id"] == "3-1"
    assert capture["metrics"] == {
        "tokens_in": 5,
        "tokens_out": 2,
        "tokens_reasoning": None,
        "tokens_total": 7,
        "cached_tokens": None,
        "latency_total_ms": 50.0,
        "num_calls": 1,
    }
    assert list(capture["metrics"]) == [
        "tokens_in",
        "tokens_out",
        "tokens_reasoning",
        "tokens_total",
        "cached_tokens",
        "latency_total_ms",
        "num_calls",
    ]
    assert "gaps" not in capture
    assert codes(out["ng_trajectory"]["gaps"]) == ["turns_unavailable", "conversation_unavailable"]
    assert "ng_perf" not in out


def test_c02_attempt_index_selects_the_file() -> None:
    files = store(**{"3-1-a2": jsonl(L("retry")), "3-1": jsonl(L("first"))})
    out = join(row(3, 1, _ng_attempt_index=2), files)
    assert out["ng_model_call_capture"]["rollout_id"] == "3-1-a2"
    assert [c["model_call_id"] for c in out["ng_model_call_capture"]["calls"]] == ["retry"]
    out = join(row(3, 1, _ng_attempt_index=0), files)
    assert out["ng_model_call_capture"]["rollout_id"] == "3-1"
    out = join(
        row(3, 1, _ng_rollout_id="run7.x_1", _ng_attempt_index=1), store(**{"run7.x_1-a1": jsonl(L("c"))})
    )
    assert out["ng_model_call_capture"]["rollout_id"] == "run7.x_1-a1"
    assert (out["ng_trajectory"]["task_id"], out["ng_trajectory"]["rollout_id"]) == ("3", "run7.x_1-a1")


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"_ng_task_index": 3, "_ng_rollout_index": 1}, "3-1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 2}, "3-1-a2"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": "2"}, "3-1-a2"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 0}, "3-1"),
        ({"_ng_rollout_id": "run7.x_1", "_ng_attempt_index": 1}, "run7.x_1-a1"),
        ({"_ng_task_index": 3}, None),
        ({"_ng_task_index": 3, "_ng_rollout_index": None}, None),
    ],
)
def test_capture_key(fields: dict[str, object], key: str | None) -> None:
    assert capture_key(dict(fields)) == key


@pytest.mark.parametrize(
    "fields",
    [
        {"_ng_rollout_id": ".hidden"},
        {"_ng_rollout_id": "a/b"},
        {"_ng_rollout_id": 7},
        {"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": "x"},
        {"_ng_task_index": "a b", "_ng_rollout_index": 1},
    ],
)
def test_malformed_keys_raise(fields: dict[str, object]) -> None:
    with pytest.raises(RowKeyError):
        capture_key(dict(fields))


def test_c03_malformed_explicit_id_is_a_row_error() -> None:
    original = row(3, 1, _ng_rollout_id=".hidden", ng_agent_observations=bundle(inv("root")))
    result = outcome(original, store(**{"3-1": jsonl(L("c1"))}))
    assert result.error is not None and ".hidden" in result.error
    assert result.row is original and result.row == row(
        3, 1, _ng_rollout_id=".hidden", ng_agent_observations=bundle(inv("root"))
    )
    with pytest.raises(RowError):
        join(original, store())


def test_c04_no_indices_projection_fails_with_key_error() -> None:
    out = join({"ng_agent_observations": bundle(inv("root"))})
    assert "ng_model_call_capture" not in out
    assert out["ng_agent_observations"]["gaps"] == [
        {"code": "trajectory_projection_failed", "detail": "KeyError"}
    ]
    assert "ng_trajectory" not in out and "ng_perf" not in out


def test_c05_explicit_id_without_task_index() -> None:
    out = join({"_ng_rollout_id": "solo"}, store(solo=jsonl(L("c1"))))
    capture = out["ng_model_call_capture"]
    assert capture["rollout_id"] == "solo"
    assert capture["gaps"] == [{"code": "trajectory_projection_failed", "detail": "KeyError"}]
    assert capture["calls"][0]["request"] == {"input": [{"role": "user", "content": "q"}]}  # payloads kept
    assert "ng_trajectory" not in out


def test_c06_task_id_fallbacks() -> None:
    out = join(row(4, 0, problem_id="p-9", instance_id="i-1"), store(**{"4-0": jsonl(L("c1"))}))
    assert out["ng_trajectory"]["task_id"] == "p-9"
    assert projection_identity(row(4, 0, task_id=None, instance_id=12)) == ("12", "4-0")
    assert projection_identity(row(4, 0)) == ("4", "4-0")


def test_c07_invalid_and_blank_lines() -> None:
    data = jsonl(L("c1"), "{not json", "", "   ", L("c3"))
    capture = join(row(1, 0), store(**{"1-0": data}))["ng_model_call_capture"]
    assert [(c["model_call_id"], c["call_index"]) for c in capture["calls"]] == [("c1", 0), ("c3", 2)]
    assert capture["gaps"] == [{"code": "model_call_capture_records_unreadable", "detail": "count=1"}]


def test_c08_non_object_and_foreign_model_ref_lines() -> None:
    capture = join(row(1, 0), store(**{"1-0": jsonl("[1,2]", L("c2"))}))["ng_model_call_capture"]
    assert [(c["model_call_id"], c["call_index"]) for c in capture["calls"]] == [("c2", 1)]
    assert capture["gaps"] == [{"code": "model_call_capture_records_unreadable", "detail": "count=1"}]
    other = L("c3", ref={"type": "other", "name": "x"})
    capture = join(row(1, 0), store(**{"1-0": jsonl(other, L("c4"))}))["ng_model_call_capture"]
    assert [c["model_call_id"] for c in capture["calls"]] == ["c4"]
    assert capture["gaps"][0]["detail"] == "count=1"


def test_c09_lax_types_and_type_violations() -> None:
    data = jsonl(L("c1", status_code="200", latency="12.5"), L(7), L("c3", dialect=5))  # type: ignore[arg-type]
    capture = join(row(1, 0), store(**{"1-0": data}))["ng_model_call_capture"]
    [call] = capture["calls"]
    assert (call["status_code"], call["latency_total_ms"]) == (200, 12.5)
    assert capture["gaps"] == [{"code": "model_call_capture_records_unreadable", "detail": "count=2"}]


NO_RECORDS = [{"code": "model_call_capture_no_records"}]


@pytest.mark.parametrize(
    ("files", "gaps"),
    [
        ({}, NO_RECORDS),
        ({"1-0": b""}, NO_RECORDS),
        ({"1-0": b"\n  \n"}, NO_RECORDS),
        ({"1-0.incomplete": b""}, [{"code": "model_call_capture_incomplete"}]),
        (
            {"1-0.incomplete": b"", "1-0": b"garbage\n"},
            [
                {"code": "model_call_capture_records_unreadable", "detail": "count=1"},
                {"code": "model_call_capture_incomplete"},
            ],
        ),
        ({"1-0": b"garbage\n"}, [{"code": "model_call_capture_records_unreadable", "detail": "count=1"}]),
        ({"1-0": b"\xff\xfe not utf-8\n"}, [{"code": "model_call_capture_unreadable"}]),
    ],
)
def test_c10_empty_stores_and_markers(files: dict[str, bytes], gaps: list[dict[str, str]]) -> None:
    capture = join(row(1, 0), store(**files))["ng_model_call_capture"]
    assert capture["metrics"] == {
        "tokens_in": None,
        "tokens_out": None,
        "tokens_reasoning": None,
        "tokens_total": None,
        "cached_tokens": None,
        "latency_total_ms": None,
        "num_calls": 0,
    }
    assert capture["calls"] == []
    assert capture["gaps"] == gaps


def test_capture_file_that_is_not_jsonl(tmp_path: Path) -> None:
    """A binary file (a gzip, say) gives unreadable lines or an unreadable store; the row survives."""
    directory = tmp_path / "model-calls"
    directory.mkdir()
    (directory / "1-0.capture.jsonl").write_bytes(b"\x1f\x8b\x08\x00binary\x00\n")
    (directory / "1-1.capture.jsonl").write_bytes(b"just some text\nmore text")
    source = CaptureStore(str(directory))
    original = row(1, 0, reward=1.0, ng_agent_observations=bundle(inv("root", ref("c1"))))
    out = join(original, source)  # type: ignore[arg-type]
    assert out["reward"] == 1.0 and out["_ng_task_index"] == 1
    assert out["ng_model_call_capture"]["gaps"] == [{"code": "model_call_capture_unreadable"}]  # not UTF-8
    assert codes(out["ng_trajectory"]["gaps"])[:2] == [
        "model_call_reference_unmatched",
        "model_call_capture_unreadable",
    ]
    assert out["ng_agent_observations"]["records"][0]["model_calls"] == [
        {"model_call_id": "c1", "model_ref": None, "response_id": None}
    ]
    out = join(row(1, 1), source)  # type: ignore[arg-type]
    assert out["ng_model_call_capture"]["gaps"] == [
        {"code": "model_call_capture_records_unreadable", "detail": "count=2"}
    ]


def test_an_entry_that_is_not_a_regular_file_is_unreadable_without_blocking(tmp_path: Path) -> None:
    """A directory or a FIFO named like a capture file gives the unreadable gap (a FIFO is not
    waited on); a file grown beyond the size first seen is read to its end."""
    directory = tmp_path / "model-calls"
    directory.mkdir()
    (directory / "1-0.capture.jsonl").mkdir()
    os.mkfifo(directory / "1-1.capture.jsonl")
    (directory / "1-2.capture.jsonl").write_bytes(jsonl(L("a"), L("b")))
    source = CaptureStore(str(directory))
    for rollout in (0, 1):
        capture = join(row(1, rollout), source)["ng_model_call_capture"]  # type: ignore[arg-type]
        assert capture["gaps"] == [{"code": "model_call_capture_unreadable"}]
    assert [c["model_call_id"] for c in source.read("1-2").records] == ["a", "b"]
    assert read_local(str(directory / "1-2.capture.jsonl")) == jsonl(L("a"), L("b"))


def test_store_reads_crlf_and_cr_line_ends_like_text_mode() -> None:
    data = jsonl(L("a")).replace(b"\n", b"\r\n") + jsonl(L("b")).replace(b"\n", b"\r")
    capture = join(row(1, 0), store(**{"1-0": data}))["ng_model_call_capture"]
    assert [(c["model_call_id"], c["call_index"]) for c in capture["calls"]] == [("a", 0), ("b", 1)]


def test_directory_store_lists_files_and_records_reads(tmp_path: Path) -> None:
    directory = tmp_path / "calls"
    directory.mkdir()
    (directory / "2-0.capture.jsonl").write_bytes(jsonl(L("c1")))
    (directory / "2-1.capture.incomplete").write_bytes(b"")
    source = CaptureStore(str(directory))
    assert source.read("2-0").records[0]["model_call_id"] == "c1"
    marker = source.read("2-1")
    assert marker.exists and marker.incomplete and not marker.records
    assert not source.read("9-9").exists
    names = sorted(f.uri.rsplit("/", 1)[-1] for f in source.files_read)
    assert names == ["2-0.capture.jsonl", "2-1.capture.incomplete"]
    assert all(f.uri.startswith("file://") and len(f.sha256) == 64 for f in source.files_read)


def test_missing_directory_is_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = CaptureStore(str(tmp_path / "nowhere"))
    caplog.set_level(logging.WARNING)
    out = join(row(1, 0), source)  # type: ignore[arg-type]
    assert source.missing
    assert out["ng_model_call_capture"]["gaps"] == NO_RECORDS


def test_capture_directory_on_s3(s3_bucket: str) -> None:
    from gymflow import storage

    base = storage.join(s3_bucket, "run", "model-calls")
    storage.write_atomic(storage.join(base, "0-0.capture.jsonl"), jsonl(L("c1"), "{bad"))
    storage.write_atomic(storage.join(base, "0-1.capture.incomplete"), b"")
    source = CaptureStore(base)
    out = join(row(0, 0, ng_agent_observations=bundle(inv("root", ref("c1")))), source)  # type: ignore[arg-type]
    capture = out["ng_model_call_capture"]
    assert [c["model_call_id"] for c in capture["calls"]] == ["c1"]
    assert capture["gaps"] == [{"code": "model_call_capture_records_unreadable", "detail": "count=1"}]
    assert out["ng_perf"]["token_observability_coverage"] == 1.0
    assert join(row(0, 1), source)["ng_model_call_capture"]["gaps"] == [  # type: ignore[arg-type]
        {"code": "model_call_capture_incomplete"}
    ]
    assert join(row(0, 2), source)["ng_model_call_capture"]["gaps"] == NO_RECORDS  # type: ignore[arg-type]
    assert sorted(f.uri for f in source.files_read) == [
        f"{base}/0-0.capture.jsonl",
        f"{base}/0-1.capture.incomplete",
    ]
    missing = CaptureStore(storage.join(s3_bucket, "no-such-dir"))
    assert join(row(0, 0), missing)["ng_model_call_capture"]["gaps"] == NO_RECORDS  # type: ignore[arg-type]
    assert missing.missing


def test_lines_are_stripped_and_parsed_as_python_does() -> None:
    """str.strip() whitespace (form feed, \\x1c) and the json module's NaN are accepted, as in 0.7.0."""
    nan_line = jsonl(L("c2")).decode().rstrip("\n")[:-1] + ', "x": NaN}'
    data = b"\x0c" + jsonl(L("c1")) + b"\x1c\x1d\n" + nan_line.encode() + b"\n"
    capture = join(row(1, 0), store(**{"1-0": data}))["ng_model_call_capture"]
    assert [(c["model_call_id"], c["call_index"]) for c in capture["calls"]] == [("c1", 0), ("c2", 1)]
    assert "gaps" not in capture


def test_non_ascii_capture_lines_are_those_of_the_decoded_text() -> None:
    """A UTF-8 file splits into the lines of its text in text mode: \\r\\n and \\r end lines,
    U+2028 and NEL (raw, inside a string) do not; a line of Unicode spaces only is blank (no
    position), a BOM line is invalid but takes one."""
    text = (
        jsonl(L("é1", extra_text="a\u2028b\u0085c")).decode().replace("\n", "\r\n")
        + "\u3000\u00a0\n"
        + "\ufeff" + jsonl(L("bom")).decode()
        + jsonl(L("ü2")).decode().replace("\n", "\r")
        + "\u2003" + jsonl(L("3")).decode()
    )  # fmt: skip
    capture = join(row(1, 0), store(**{"1-0": text.encode()}))["ng_model_call_capture"]
    assert [(c["model_call_id"], c["call_index"]) for c in capture["calls"]] == [
        ("é1", 0), ("ü2", 2), ("3", 3),
    ]  # fmt: skip
    assert capture["gaps"] == [{"code": "model_call_capture_records_unreadable", "detail": "count=1"}]
