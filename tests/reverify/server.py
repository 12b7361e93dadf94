"""A loopback mcqa-like resources server for the reverify tests and benchmark (reverify.md §2.4).

Wire endpoints, as a NeMo Gym resources server answers them:

* ``GET /reverify_mode``: a bare JSON string (``"stateless"`` by default; any value or status can be set).
* ``POST /verify``: grades the body's ``response`` against ``expected_answer`` (the last ``\\boxed{X}`` in
  the output message text, or, unless ``grading_mode`` starts with ``strict``, the last standalone capital
  letter) and answers ``responses_create_params``, ``response``, ``reward``, ``mask_sample``,
  ``failure_kind``, ``failure_reason``, ``expected_answer``, ``extracted_answer``. It never echoes ``_ng_*``,
  ``agent_ref`` or other dataset fields. A body without ``response``/``responses_create_params`` objects
  gets 422 ``{"detail": [...]}``.
* ``POST /aggregate_metrics``: mcqa-like metrics of the rows (:func:`aggregate`): floats for every
  statistic, also whole ones (``1.0``), integer counts, keys in an order that is not sorted and the
  blocks in another order than a metrics file's, plus ``perf_summary: null`` and a key of its own;
  500 on a duplicate key.

Control endpoints (state is per process; with several workers use the command-line flags only):

* ``POST /_control/set`` ``{"key": [task, rollout] | null, "kind": ..., ...}``: the behaviour of
  ``/verify`` for one key, or for every key without one of its own when ``key`` is null (:class:`Behaviour`).
* ``POST /_control/mode`` ``{"mode": <any JSON>, "status": 200}``: the ``/reverify_mode`` answer.
* ``POST /_control/aggregate`` ``{"status": 404, "body": <any JSON>}``: ``/aggregate_metrics`` answers
  that instead (status 0: closes the connection without an answer; ``{"status": null}``: computes again).
* ``GET /_control/log``: every wire request (``method``, ``path``, ``key``, ``body``, ``t``), oldest first.
* ``GET /_control/stats``: ``in_flight``, ``peak_in_flight``, ``requests`` (per path), ``attempts`` per key.
* ``POST /_control/reset``: behaviours, log, counters and mode back to the start values.

Run standalone: ``python -m tests.reverify.server --host 127.0.0.1 --port N [--mode stateless]
[--workers K] [--latency-ms X] [--no-log]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

Key = tuple[int, int] | None

KINDS = (
    "ok",  # a normal answer (plus ``extra`` fields)
    "status",  # answer ``status`` with ``body`` (default: a detail body) and an optional Retry-After header
    "hang",  # sleep ``hang_s`` seconds, then answer normally
    "drop",  # close the connection without answering
    "non_object",  # 200 with ``body`` (default ``[1]``)
    "judge_failed",  # 200 with the request body plus the judge-failure tags
    "no_persist",  # a normal answer plus ``_ng_no_persist: true``
    "invalid_judge",  # a normal answer plus ``invalid_judge_response: true`` (``invalid_judge_retryable``)
    "raw",  # 200 with ``body`` (a string) sent as it is, e.g. ``{"reward": NaN}``
)

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_LETTER = re.compile(r"\b([A-Z])\b")
_encoder = msgspec.json.Encoder()


@dataclass
class Behaviour:
    """What ``/verify`` does for a key.

    ``kind`` applies to the first ``times`` attempts of each key (every attempt when ``times`` is None);
    later attempts are answered normally. ``latency_ms`` is an extra ``asyncio.sleep`` before every answer.
    A normal answer gets ``extra`` merged in, then the fields named in ``remove`` dropped.
    """

    kind: str = "ok"
    times: int | None = None
    latency_ms: float = 0.0
    status: int = 500
    retry_after: str | None = None
    body: Any = None
    hang_s: float = 3600.0
    error: str = "judge endpoint returned 401 Unauthorized"
    retryable: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Behaviour:
        known = {k: v for k, v in data.items() if k != "key"}
        kind = known.get("kind", "ok")
        if kind not in KINDS:
            raise ValueError(f"unknown behaviour kind {kind!r}; known: {list(KINDS)}")
        if "retry_after" in known and known["retry_after"] is not None:
            known["retry_after"] = str(known["retry_after"])
        return cls(**known)


@dataclass
class ServerState:
    mode: Any = "stateless"
    mode_status: int = 200
    latency_ms: float = 0.0
    keep_log: bool = True
    behaviours: dict[Key, Behaviour] = field(default_factory=dict)
    attempts: dict[Key, int] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    peak_in_flight: int = 0
    initial: tuple[Any, int] = ("stateless", 200)
    aggregate_answer: tuple[int, Any] | None = None

    def reset(self) -> None:
        self.mode, self.mode_status = self.initial
        self.aggregate_answer = None
        self.behaviours.clear()
        self.attempts.clear()
        self.log.clear()
        self.requests.clear()
        self.in_flight = 0
        self.peak_in_flight = 0

    def record(self, method: str, path: str, key: Key, body: Any) -> None:
        self.requests[path] = self.requests.get(path, 0) + 1
        if self.keep_log:
            self.log.append(
                {
                    "method": method,
                    "path": path,
                    "key": list(key) if key else None,
                    "body": body,
                    "t": time.time(),
                }
            )


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_encoder.encode(data), status_code=status, headers=headers, media_type="application/json")


def _key_of(body: Any) -> Key:
    if isinstance(body, dict):
        task, rollout = body.get("_ng_task_index"), body.get("_ng_rollout_index")
        if isinstance(task, int) and isinstance(rollout, int):
            return (task, rollout)
    return None


def output_text(response: Any) -> str:
    """The text of every ``output_text`` part of the response's ``message`` output items."""
    parts: list[str] = []
    for item in response.get("output") or [] if isinstance(response, dict) else []:
        if isinstance(item, dict) and item.get("type", "message") == "message":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
                continue
            for part in content or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "\n".join(parts)


def extract_answer(text: str, grading_mode: Any) -> str | None:
    """The last ``\\boxed{X}``; without one, unless the mode is ``strict_*``, the last standalone capital."""
    boxed = _BOXED.findall(text)
    if boxed:
        return str(boxed[-1])
    if isinstance(grading_mode, str) and grading_mode.startswith("strict"):
        return None
    letters = _LETTER.findall(text)
    return str(letters[-1]) if letters else None


def _missing_fields(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict):
        return [{"type": "model_attributes_type", "loc": ["body"], "msg": "Input should be an object"}]
    detail = []
    for name in ("responses_create_params", "response"):
        if name not in body:
            detail.append({"type": "missing", "loc": ["body", name], "msg": "Field required", "input": None})
        elif not isinstance(body[name], dict):
            detail.append(
                {
                    "type": "dict_type",
                    "loc": ["body", name],
                    "msg": "Input should be an object",
                    "input": body[name],
                }
            )
    return detail


def grade(body: dict[str, Any]) -> dict[str, Any]:
    """The mcqa-like verify answer for a valid body."""
    expected = body.get("expected_answer")
    extracted = extract_answer(output_text(body["response"]), body.get("grading_mode"))
    reward = 1.0 if extracted is not None and expected is not None and extracted == str(expected) else 0.0
    return {
        "responses_create_params": body["responses_create_params"],
        "response": body["response"],
        "reward": reward,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None,
        "expected_answer": expected,
        "extracted_answer": extracted,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _stats(values: list[float]) -> dict[str, float]:
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
    return {"mean": mean, "max": max(values), "min": min(values), "median": _median(values), "std": std}


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``/aggregate_metrics`` answer for rows: mean/max/min/median/std of ``reward`` (floats),
    ``pass@1/accuracy`` (percent), ``num_repeats`` (an int), per task and per rollout index."""
    rewards = [float(r.get("reward") or 0.0) for r in rows]
    by_task: dict[Any, list[float]] = {}
    by_repeat: dict[Any, list[float]] = {}
    for row, reward in zip(rows, rewards, strict=True):
        by_task.setdefault(row.get("_ng_task_index"), []).append(reward)
        by_repeat.setdefault(row.get("_ng_rollout_index"), []).append(reward)
    agent_metrics: dict[str, Any] = {f"{k}/reward": v for k, v in _stats(rewards or [0.0]).items()}
    agent_metrics["pass@1/accuracy"] = 100.0 * agent_metrics["mean/reward"]
    agent_metrics["num_repeats"] = max((len(v) for v in by_task.values()), default=0)
    return {
        "group_level_metrics": [
            {"_ng_task_index": task, "mean/reward": sum(v) / len(v), "num_rollouts": len(v)}
            for task, v in by_task.items()
        ],
        "agent_metrics": agent_metrics,
        "key_metrics": {
            "pass@1/accuracy": agent_metrics["pass@1/accuracy"],
            "mean/reward": agent_metrics["mean/reward"],
        },
        "perf_summary": None,
        "repeat_level_metrics": [
            {"_ng_rollout_index": index, "mean/reward": sum(v) / len(v)} for index, v in by_repeat.items()
        ],
        "server": "tests.reverify.server",
    }


def _judge_failed(body: dict[str, Any], error: str) -> dict[str, Any]:
    error = error[:2000]
    instance_config = body.get("instance_config")
    instance_config = dict(instance_config) if isinstance(instance_config, dict) else {}
    instance_config["mask_sample"] = True
    return {
        **body,
        "reward": 0.0,
        "mask_sample": True,
        "failure_kind": "judge_failed",
        "failure_reason": error,
        "instance_config": instance_config,
        "_ng_failure_class": "judge_failed",
        "_ng_failure_judge_error": error,
    }


def _drop_connection(scope: Scope) -> None:
    """Close the client connection without an answer (uvicorn: the request cycle holds the transport)."""
    receive = scope.get("gf.receive")
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("connection drop needs uvicorn's transport")
    transport.close()


async def _hang_until_disconnected(request: Request, seconds: float) -> bool:
    """Sleep up to ``seconds``; True as soon as the client has gone (so no request outlives its client)."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(0.05, remaining))
        if await request.is_disconnected():
            return True
    return False


def create_app(
    mode: Any = "stateless", *, mode_status: int = 200, latency_ms: float = 0.0, keep_log: bool = True
) -> Any:
    """The ASGI app; ``app.state.gf`` is its :class:`ServerState`."""
    state = ServerState(
        mode=mode,
        mode_status=mode_status,
        latency_ms=latency_ms,
        keep_log=keep_log,
        initial=(mode, mode_status),
    )

    async def reverify_mode(request: Request) -> Response:
        state.record("GET", "/reverify_mode", None, None)
        return _json(state.mode, state.mode_status)

    async def verify(request: Request) -> Response:
        state.in_flight += 1
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            return await _verify(request)
        finally:
            state.in_flight -= 1

    async def _verify(request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            state.record("POST", "/verify", None, None)
            return _json({"detail": [{"type": "json_invalid", "loc": ["body"], "msg": str(exc)}]}, 422)
        key = _key_of(body)
        state.record("POST", "/verify", key, body)
        attempt = state.attempts.get(key, 0) + 1
        state.attempts[key] = attempt
        behaviour = state.behaviours.get(key) or state.behaviours.get(None) or Behaviour()
        delay = state.latency_ms + behaviour.latency_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        kind = behaviour.kind if behaviour.times is None or attempt <= behaviour.times else "ok"
        if kind == "status":
            headers = {"Retry-After": behaviour.retry_after} if behaviour.retry_after is not None else None
            content = (
                behaviour.body if behaviour.body is not None else {"detail": f"injected {behaviour.status}"}
            )
            return _json(content, behaviour.status, headers)
        if kind == "drop":
            _drop_connection(request.scope)
            await asyncio.sleep(0.05)
            return Response(b"", status_code=500)
        if kind == "non_object":
            return _json([1] if behaviour.body is None else behaviour.body)
        if kind == "raw":
            return Response(str(behaviour.body).encode(), media_type="application/json")
        if kind == "hang" and await _hang_until_disconnected(request, behaviour.hang_s):
            return Response(b"", status_code=499)
        detail = _missing_fields(body)
        if detail:
            return _json({"detail": detail}, 422)
        if kind == "judge_failed":
            return _json(_judge_failed(body, behaviour.error))
        answer = grade(body)
        if kind == "no_persist":
            answer["_ng_no_persist"] = True
        elif kind == "invalid_judge":
            answer["invalid_judge_response"] = True
            if behaviour.retryable is not None:
                answer["invalid_judge_retryable"] = behaviour.retryable
        answer.update(behaviour.extra)
        for name in behaviour.remove:
            answer.pop(name, None)
        return _json(answer)

    async def aggregate_metrics(request: Request) -> Response:
        body: Any = msgspec.json.decode(await request.body())
        state.record("POST", "/aggregate_metrics", None, body)
        rows = body.get("verify_responses", []) if isinstance(body, dict) else []
        seen: set[Key] = set()
        for row in rows:
            key = _key_of(row)
            if key in seen:
                return Response(
                    f"Duplicate materialized input row for rollout key {key}", 500, media_type="text/plain"
                )
            seen.add(key)
        if state.aggregate_answer is not None:
            status, content = state.aggregate_answer
            if status == 0:
                _drop_connection(request.scope)
                await asyncio.sleep(0.05)
                return Response(b"", status_code=500)
            return _json(content, status)
        return _json(aggregate([r for r in rows if isinstance(r, dict)]))

    async def control_set(request: Request) -> Response:
        data = msgspec.json.decode(await request.body())
        try:
            behaviour = Behaviour.from_json(data)
        except (TypeError, ValueError) as exc:
            return _json({"error": str(exc)}, 400)
        key = data.get("key")
        state.behaviours[(int(key[0]), int(key[1])) if key is not None else None] = behaviour
        return _json({"ok": True})

    async def control_mode(request: Request) -> Response:
        data = msgspec.json.decode(await request.body())
        state.mode = data.get("mode")
        state.mode_status = int(data.get("status", 200))
        return _json({"ok": True})

    async def control_aggregate(request: Request) -> Response:
        data = msgspec.json.decode(await request.body())
        status = data.get("status")
        state.aggregate_answer = None if status is None else (int(status), data.get("body"))
        return _json({"ok": True})

    async def control_log(request: Request) -> Response:
        return _json(state.log)

    async def control_stats(request: Request) -> Response:
        return _json(
            {
                "in_flight": state.in_flight,
                "peak_in_flight": state.peak_in_flight,
                "requests": state.requests,
                "attempts": [[list(k) if k else None, n] for k, n in state.attempts.items()],
            }
        )

    async def control_reset(request: Request) -> Response:
        state.reset()
        return _json({"ok": True})

    starlette = Starlette(
        routes=[
            Route("/reverify_mode", reverify_mode, methods=["GET"]),
            Route("/verify", verify, methods=["POST"]),
            Route("/aggregate_metrics", aggregate_metrics, methods=["POST"]),
            Route("/_control/set", control_set, methods=["POST"]),
            Route("/_control/mode", control_mode, methods=["POST"]),
            Route("/_control/aggregate", control_aggregate, methods=["POST"]),
            Route("/_control/log", control_log, methods=["GET"]),
            Route("/_control/stats", control_stats, methods=["GET"]),
            Route("/_control/reset", control_reset, methods=["POST"]),
        ]
    )
    starlette.state.gf = state

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope["gf.receive"] = receive
        await starlette(scope, receive, send)

    app.state = starlette.state  # type: ignore[attr-defined]
    return app


def app_from_env() -> Any:
    """The app configured by ``GF_TEST_SERVER_*`` variables (uvicorn factory for several workers)."""
    return create_app(
        os.environ.get("GF_TEST_SERVER_MODE", "stateless"),
        latency_ms=float(os.environ.get("GF_TEST_SERVER_LATENCY_MS", "0")),
        keep_log=os.environ.get("GF_TEST_SERVER_LOG", "1") == "1",
    )


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        prog="python -m tests.reverify.server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="stateless", help="the /reverify_mode answer")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="asyncio.sleep before every /verify answer"
    )
    parser.add_argument("--no-log", action="store_true", help="keep no request log (long benchmark runs)")
    args = parser.parse_args(argv)
    os.environ["GF_TEST_SERVER_MODE"] = args.mode
    os.environ["GF_TEST_SERVER_LATENCY_MS"] = str(args.latency_ms)
    os.environ["GF_TEST_SERVER_LOG"] = "0" if args.no_log else "1"
    uvicorn.run(
        "tests.reverify.server:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
