"""The Prefect executor (``tasks/executor.py``): a step's work as tasks of the running flow, on the
real local API. Only transient storage failures are retried; a bad input fails at once."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.errors import InputError, StorageError, StorageTimeout
from gymflow.executor import Step
from gymflow.run_context import RunContext
from gymflow.tasks import executor as prefect_executor

CALLS: list[str] = []


def _fails(kind: str) -> str:
    CALLS.append(kind)
    if kind == "input":
        raise InputError("shard.jsonl:3: field 'reward': not a number")
    if kind == "denied":
        raise StorageError("cannot write /x: Permission denied") from PermissionError(errno.EACCES, "denied")
    if kind == "storage" and CALLS.count("storage") < 3:
        raise StorageError("s3://b/x: connection reset")
    return kind


def _double(item: int) -> int:
    return 2 * item


@pytest.fixture
def no_delays(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(prefect_executor, "RETRY_DELAYS_S", [0.0, 0.0, 0.0])
    CALLS.clear()
    yield


def _run(kind: str) -> object:
    from prefect import flow

    from gymflow.flows._runtime import run_flow

    step = Step("flaky", _fails, io=True)

    @flow(name="executor-test", validate_parameters=False)
    def probe(ctx: RunContext, workers: int, item: str) -> object:
        with prefect_executor.prefect_executor(ctx, workers, remote=False, what="test") as executor:
            doubled = executor.map(Step("double", _double, cpu=True), [1, 2, 3])
            assert doubled == [2, 4, 6]
            return executor.call(step, item)

    result, url = run_flow(probe, RunContext(), 2, item=kind)
    assert "/flow-runs/flow-run/" in url
    return result


@pytest.mark.parametrize(("kind", "calls"), [("input", 1), ("denied", 1), ("storage", 3)])
def test_only_transient_failures_are_retried(no_delays: None, kind: str, calls: int) -> None:
    if kind == "storage":
        assert _run(kind) == "storage"
    else:
        with pytest.raises((InputError, StorageError)):
            _run(kind)
    assert CALLS.count(kind) == calls


def test_what_counts_as_transient(tmp_path: Path) -> None:
    assert prefect_executor.is_transient(StorageError("s3://b: connection reset"))
    # a timeout already spent its retries within storage.timeout_s
    assert not prefect_executor.is_transient(StorageTimeout("s3://b: did not answer in time"))
    assert prefect_executor.is_transient(ConnectionResetError())
    assert not prefect_executor.is_transient(InputError("bad line"))
    assert not prefect_executor.is_transient(ValueError("a bug"))
    try:
        try:
            (tmp_path / "missing" / "x").write_bytes(b"")
        except OSError as exc:
            raise StorageError(f"cannot write: {exc}") from exc
    except StorageError as wrapped:
        assert not prefect_executor.is_transient(wrapped)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/runs/a/rollouts.jsonl", "file:///runs/a/rollouts.jsonl"),
        ("/runs/my run/x%1#.jsonl", "file:///runs/my~20run/x~251~23.jsonl"),
        ("s3://bucket/a b", "s3://bucket/a~20b"),
    ],
)
def test_asset_keys_are_uris_prefect_accepts(path: str, key: str) -> None:
    from prefect.types.names import validate_valid_asset_key

    assert prefect_executor.asset_key(path) == key
    assert validate_valid_asset_key(key) == key


def test_a_long_path_keeps_its_start_and_a_hash() -> None:
    from prefect.types.names import MAX_ASSET_KEY_LENGTH

    one, other = (prefect_executor.asset_key(f"/{'d' * 600}/{name}") for name in ("a", "b"))
    assert len(one) == len(other) == MAX_ASSET_KEY_LENGTH and one != other
    assert one.startswith("file:///ddd")


def _tripled(item: str) -> list[str]:
    CALLS.append(item)
    return [item] * 3


def test_a_cached_result_is_stored_in_one_base64_line_and_read_back(tmp_path: Path) -> None:
    """A cached step's result is persisted by gymflow's serializer (one base64 call, not
    Prefect's 76-character lines) and a second run reads it back instead of calling the step."""
    import json
    import uuid

    from prefect import flow

    from gymflow.flows._runtime import run_flow

    CALLS.clear()
    key = f"executor-test-{uuid.uuid4().hex}"
    step = Step("tripled", _tripled, cache_key=lambda item: f"{key}-{item}")

    @flow(name="executor-cache-test", validate_parameters=False)
    def probe(ctx: RunContext, workers: int) -> object:
        with prefect_executor.prefect_executor(ctx, workers, remote=False, what="test") as executor:
            return executor.call(step, "x" * 100)

    for _ in range(2):
        result, _ = run_flow(probe, RunContext(), 1)
        assert result == ["x" * 100] * 3
    assert CALLS == ["x" * 100]  # the second run's result came from the store

    stored = Path(os.environ["PREFECT_HOME"]) / "storage" / f"{key}-{'x' * 100}"
    record = json.loads(stored.read_bytes())
    assert record["metadata"]["serializer"]["type"] == "gymflow-pickle"
    assert "\n" not in record["result"]
    assert prefect_executor.ResultPickle().loads(record["result"].encode()) == ["x" * 100] * 3
