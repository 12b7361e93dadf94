"""The fast direct path: the aiohttp sender classifies like the httpx path (real server), the stream keeps
the concurrency full across what used to be batch boundaries, the materialized index reads exact bytes
back (local in place, remote spooled), and the finish sort reads only the key fields."""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped]
import httpx
import orjson
import pytest

from gymflow.reverify._client import ClientSettings, Request, Result, verify_requests, verify_stream
from gymflow.reverify._client import run as run_loop
from gymflow.reverify._collect import LAST as _LAST
from gymflow.reverify._finish import _key_of_line
from gymflow.reverify._inputs import read_materialized
from tests.reverify.server_process import ServerProcess, free_port, mcqa_rows

pytestmark = pytest.mark.timeout(60)

SETTINGS = ClientSettings(concurrency=4, timeout_s=1.0, max_attempts=2, backoff_base_s=0.01)


def _bodies(n: int) -> list[bytes]:
    materialized, rollouts = mcqa_rows(n, 1)
    return [
        orjson.dumps({**m, "response": r["response"]}) for m, r in zip(materialized, rollouts, strict=True)
    ]


def _verify(requests: list[Request], settings: ClientSettings, httpx_path: bool) -> list[Result]:
    results: dict[int, Result] = {}

    def transport(pool: int) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=pool))

    verify_requests(requests, settings, results.__setitem__, transport if httpx_path else None)
    return [results[i] for i in range(len(requests))]


def test_aiohttp_and_httpx_paths_classify_alike(resources_server: ServerProcess) -> None:
    server = resources_server
    requests = [Request(f"{server.url}/verify", body) for body in _bodies(7)]
    refused = Request(f"http://127.0.0.1:{free_port()}/verify", b"{}")
    outcomes = {}
    for httpx_path in (False, True):
        server.reset()
        server.set((1, 0), kind="status", status=500, body="broken")
        server.set((2, 0), kind="status", status=422, body={"detail": "Field required"})
        server.set((3, 0), kind="status", status=429, retry_after="0.3", times=1)
        server.set((4, 0), kind="non_object", body=[1])
        server.set((5, 0), kind="hang", hang_s=30)
        server.set((6, 0), kind="drop")
        began = time.monotonic()
        results = _verify([*requests, refused], SETTINGS, httpx_path)
        elapsed = time.monotonic() - began
        attempts = sorted(map(str, server.stats()["attempts"]))
        outcomes[httpx_path] = (results, attempts)
        ok, http500, http422, limited, non_object, hang, drop, conn = results
        assert ok.answer is not None and ok.answer["reward"] == 1.0
        assert limited.answer is not None  # 429 with Retry-After, then answered
        assert http500.failure is not None and http500.failure["_ng_failure_class"] == "verify_http_error"
        assert (
            http500.failure["_ng_failure_http_status"] == 500 and http500.failure["_ng_failure_attempts"] == 2
        )
        assert http422.failure is not None and http422.failure["_ng_failure_attempts"] == 1
        assert "Field required" in http422.failure["_ng_failure_response_body"]
        assert non_object.failure is not None
        assert non_object.failure["_ng_failure_class"] == "verify_invalid_response"
        assert non_object.failure["_ng_failure_response_body"] == "[1]"
        assert hang.failure is not None and hang.failure["_ng_failure_class"] == "verify_timeout"
        assert drop.failure is not None and drop.failure["_ng_failure_class"] == "verify_connection_error"
        assert conn.failure is not None and conn.failure["_ng_failure_class"] == "verify_connection_error"
        assert (
            conn.failure["_ng_failure_type"] == "ConnectError" and conn.failure["_ng_failure_attempts"] == 2
        )
        assert elapsed >= 0.3  # the Retry-After wait was honoured
    fast, slow = outcomes[False], outcomes[True]
    assert fast[1] == slow[1]  # the same attempts per key on the server
    for a, b in zip(fast[0], slow[0], strict=True):
        assert (a.answer is None) == (b.answer is None)
        if a.failure is not None and b.failure is not None:
            same = ("_ng_failure_class", "_ng_failure_http_status", "_ng_failure_response_body")
            assert {k: a.failure[k] for k in same} == {k: b.failure[k] for k in same}
            assert a.failure["_ng_failure_attempts"] == b.failure["_ng_failure_attempts"]
            # Transport errors word their messages themselves; the HTTP-level ones are ours.
            if a.failure["_ng_failure_class"] in ("verify_http_error", "verify_invalid_response"):
                assert a.failure["_ng_failure_message"] == b.failure["_ng_failure_message"]


def test_stream_keeps_concurrency_full_until_the_source_runs_dry() -> None:
    in_flight = 0
    at_start: list[int] = []
    pulled: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight
        at_start.append(in_flight)
        in_flight += 1
        await asyncio.sleep(0.002 * (1 + len(at_start) % 3))
        in_flight -= 1
        return httpx.Response(200, json={"i": int(request.url.path.strip("/"))})

    def source() -> Any:
        for i in range(60):
            pulled.append(i)
            yield i, Request(f"http://rs.test/{i}", b"{}")

    done: list[int] = []

    def on_result(tag: int, result: Result) -> None:
        assert result.answer == {"i": tag}
        # Lazy: never more than `concurrency` rows pulled ahead of the completed ones.
        assert len(pulled) - len(done) <= 5
        done.append(tag)

    settings = ClientSettings(concurrency=5)
    run_loop(verify_stream(source(), settings, on_result, lambda _: httpx.MockTransport(handler)))
    assert sorted(done) == list(range(60))
    # Every request after the first five started while the other four were still in flight.
    assert at_start[:5] == [0, 1, 2, 3, 4] and all(n == 4 for n in at_start[5:])


def test_stream_error_from_the_source_propagates() -> None:
    def source() -> Any:
        yield 0, Request("http://rs.test/0", b"{}")
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        run_loop(
            verify_stream(
                source(),
                ClientSettings(concurrency=2),
                lambda *_: None,
                lambda _: httpx.MockTransport(lambda r: httpx.Response(200, json={})),
            )
        )


def _lines(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + (b"\r\n" if i % 2 else b"\n") for i, r in enumerate(rows)) + b"\n  \n"


def test_materialized_index_local_reads_exact_bytes(tmp_path: Path) -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "x": "é" * t} for t in range(5)]
    rows.append({"_ng_task_index": 2, "_ng_rollout_index": 0, "x": "last wins"})
    path = tmp_path / "m.jsonl"
    path.write_bytes(_lines(rows))
    warnings: list[str] = []
    index = read_materialized(str(path), warnings.append)
    assert len(index) == 5 and not index.spooled
    assert index.get((4, 0)) == orjson.dumps(rows[4]) and index[(2, 0)] == orjson.dumps(rows[5])
    assert index.get((9, 9)) is None and len(warnings) == 1 and "(2, 0)" in warnings[0]
    clone = pickle.loads(pickle.dumps(index))  # a plan travels to Prefect workers
    assert clone[(1, 0)] == orjson.dumps(rows[1])
    index.close()
    clone.close()
    assert path.exists()


def test_materialized_index_remote_is_spooled_then_removed() -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 1, "q": t * "z"} for t in range(4)]
    url = "memory://reverify-fast-path/materialized.jsonl"
    with fsspec.open(url, "wb") as handle:
        handle.write(_lines(rows))
    index = read_materialized(url, lambda _: None)
    assert index.spooled and Path(index.path).exists()
    assert [index[(t, 1)] for t in range(4)] == [orjson.dumps(r) for r in rows]
    index.close()
    assert not Path(index.path).exists()


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (
            b'{"a":{"_ng_task_index":9,"_ng_rollout_index":9},"_ng_task_index":3,"_ng_rollout_index":1}\n',
            (3, 1),
        ),
        (b'{"_ng_task_index":true,"_ng_rollout_index":1}\n', _LAST),
        (b'{"_ng_task_index":1.0,"_ng_rollout_index":1}\n', _LAST),
        (b'{"_ng_task_index":2}\n', _LAST),
        (b"[1, 2]\n", _LAST),
        (b"not json\n", _LAST),
    ],
)
def test_sort_key_reads_top_level_integers_only(line: bytes, key: tuple[float, float]) -> None:
    assert _key_of_line(line) == key


def test_a_direct_run_imports_no_httpx(
    tmp_path: Path, resources_server: ServerProcess, gym_config_file: Callable[..., Path]
) -> None:
    """httpx (and httpcore, which it imports for its first client) cost a run ~0.2 s of start-up:
    the launcher's probe, the guard and the metrics request use the standard library."""
    import subprocess
    import sys
    import textwrap

    materialized, rolled = mcqa_rows(2, 2)
    inputs, rollouts = tmp_path / "in.jsonl", tmp_path / "roll.jsonl"
    inputs.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in materialized))
    rollouts.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rolled))
    config = gym_config_file({"mcqa": resources_server}, agents={"mcqa_simple_agent": "mcqa"})
    argv = ["eval", "reverify", "--config", str(config), "--inputs", str(inputs), "--rollouts", str(rollouts)]
    argv += ["--output", str(tmp_path / "out.jsonl"), "--direct"]
    script = textwrap.dedent(
        f"""
        import sys
        from gymflow.cli import main
        status = main({argv!r})
        assert status == 0, status
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in {{"httpx", "httpcore"}})
        assert not leaked, leaked
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 4
