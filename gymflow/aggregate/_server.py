"""``--server-metrics``: each group's metrics from its resources server (aggregate.md §0).

Per group: route to a resources server with reverify.md §2.3 (environment-server block, agent
block, or the only resources server), POST the group's stripped rows to ``/aggregate_metrics``
and use the answer verbatim for the entry. Transport errors, 429 and 5xx are retried with
exponential backoff and full jitter (reverify.md §4 point 1); a final failure is an error.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gymflow import blocking_http
from gymflow.aggregate._scan import GroupRef
from gymflow.errors import GymflowError
from gymflow.gym_config import Routing, resources_server_urls
from gymflow.jsonline import dumps_exact

__all__ = [
    "MetricsBody",
    "ServerMetricsError",
    "ServerSettings",
    "post_metrics",
    "resources_server_urls",
    "route_group",
    "server_entries",
    "strip_row",
]

_DROPPED = ("responses_create_params", "ng_agent_observations", "ng_model_call_capture", "ng_trajectory")
_RETRIED_STATUS = {429} | set(range(500, 600))


class ServerMetricsError(GymflowError):
    """A resources server could not produce a group's aggregate metrics."""


@dataclass(frozen=True)
class ServerSettings:
    timeout_s: float = 300.0
    max_attempts: int = 4
    backoff_base_s: float = 1.0


_OPEN = b'{"verify_responses":['
_CLOSE = b"]}"
_PIECE = 256 * 1024


@dataclass(frozen=True)
class MetricsBody:
    """The rows of one ``POST /aggregate_metrics``, each as compact JSON: ``rows()`` reads them
    anew for each attempt (from memory, or from a scratch file), so the body is streamed with
    its length known and never held whole."""

    rows: Callable[[], Iterable[bytes]]
    count: int
    size: int
    """The rows' bytes, summed."""

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> MetricsBody:
        """The body of rows held in memory."""
        encoded = [dumps_exact(row) for row in rows]
        return cls(lambda: encoded, len(encoded), sum(map(len, encoded)))

    @property
    def length(self) -> int:
        return len(_OPEN) + self.size + max(self.count - 1, 0) + len(_CLOSE)

    def chunks(self) -> Iterator[bytes]:
        """``{"verify_responses":[row,row,...]}`` in pieces of about 256 KB."""
        piece = bytearray(_OPEN)
        first = True
        for row in self.rows():
            if not first:
                piece += b","
            first = False
            piece += row
            if len(piece) >= _PIECE:
                yield bytes(piece)
                piece.clear()
        piece += _CLOSE
        yield bytes(piece)


def strip_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as sent to ``/aggregate_metrics``: heavy fields dropped, ``response`` reduced to
    ``usage`` and ``incomplete_details`` when they are not null."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name in _DROPPED:
            continue
        if name == "response":
            if isinstance(value, Mapping):
                kept = {k: value[k] for k in ("usage", "incomplete_details") if value.get(k) is not None}
                if kept:
                    out[name] = kept
            continue
        out[name] = value
    return out


def route_group(ref: GroupRef, config: Mapping[str, Any]) -> str:
    """The resources server a group's rows route to (reverify.md §2.3, rules 2 to 5)."""
    routing = Routing.of(config)
    name = routing.route(None, ref.key if ref.is_environment else None, ref.agent)
    if name is not None:
        return name
    problem = routing.fallback_problem("aggregate metrics")
    if problem is not None:
        raise ServerMetricsError(problem)
    raise ServerMetricsError(
        f"aggregate metrics: cannot find a resources server for group {ref.key!r} "
        f"(agent_ref.name={ref.agent!r}). Known agents: {sorted(routing.agents)!r}."
    )


def _wait(attempt: int, reply: blocking_http.Reply | None, settings: ServerSettings) -> float:
    if reply is not None and reply.status in (429, 503):
        retry_after = reply.headers.get("retry-after", "")
        if retry_after.strip().isdigit():
            return min(float(retry_after), 60.0)
    return random.uniform(0.0, min(30.0, settings.backoff_base_s * 2 ** (attempt - 1)))


def post_metrics(
    name: str,
    url: str,
    body: MetricsBody,
    settings: ServerSettings,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """POST one group's rows; retry transport errors, 429 and 5xx; return the JSON answer."""
    detail = "no attempt made"
    # With its length given, the streamed body is sent as it is, not chunked.
    headers = {"Content-Type": "application/json", "Content-Length": str(body.length)}
    for attempt in range(1, settings.max_attempts + 1):
        reply: blocking_http.Reply | None = None
        try:
            reply = blocking_http.request(
                "POST",
                f"{url}/aggregate_metrics",
                body=body.chunks(),
                headers=headers,
                timeout_s=settings.timeout_s,
            )
        except blocking_http.TimeoutException as exc:
            detail = f"timed out after {settings.timeout_s} s ({type(exc).__name__})"
        except blocking_http.TransportError as exc:
            detail = f"{type(exc).__name__}: {exc}"
        else:
            if reply.is_success:
                try:
                    # Python's reader, as 0.7.0's client: a server's NaN or Infinity is read.
                    answer = json.loads(reply.body)
                except ValueError:
                    answer = None
                if isinstance(answer, dict):
                    return answer
                raise ServerMetricsError(
                    f"aggregate metrics: resources server {name!r} failed: answer is not a JSON object"
                )
            detail = f"HTTP {reply.status}: {reply.text[:2000]}"
            if reply.status not in _RETRIED_STATUS:
                break
        if attempt < settings.max_attempts:
            sleep(_wait(attempt, reply, settings))
    raise ServerMetricsError(f"aggregate metrics: resources server {name!r} failed: {detail}")


def server_entries(
    entries: Sequence[Mapping[str, Any]],
    groups: Mapping[str, GroupRef],
    rows_by_group: Mapping[str, Iterable[Mapping[str, Any]]],
    config: Mapping[str, Any],
    settings: ServerSettings,
) -> list[dict[str, Any]]:
    """Replace each entry's blocks by its resources server's answer (labels and order kept)."""
    urls = resources_server_urls(config)
    out: list[dict[str, Any]] = []
    for entry in entries:
        # Environment-server groups carry their key; any other group is labelled by its key.
        key = str(entry.get("_ng_environment_server") or entry["agent_ref"]["name"])
        ref = groups[key]
        name = route_group(ref, config)
        if name not in urls:
            raise ServerMetricsError(
                f"aggregate metrics: resources server {name!r} failed: no host/port in the config"
            )
        body = MetricsBody.of(strip_row(r) for r in rows_by_group[key])
        answer = post_metrics(name, urls[name], body, settings)
        new: dict[str, Any] = {"agent_ref": entry["agent_ref"]}
        if "_ng_environment_server" in entry:
            new["_ng_environment_server"] = entry["_ng_environment_server"]
        new.update({k: v for k, v in answer.items() if not (k == "perf_summary" and v is None)})
        out.append(new)
    return out
