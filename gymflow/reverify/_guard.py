"""The ReverifyMode guard: ``GET /reverify_mode`` of each routed server (reverify.md §2.4, §2.5,
§4 point 5)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson

from gymflow import blocking_http
from gymflow.errors import GymflowError
from gymflow.reverify.launch import Servers, ensure_servers

__all__ = ["GuardError", "MODES", "read_modes", "refusal", "running_servers", "warning"]

MODES = frozenset({"stateless", "unsupported", "unknown"})
_RETRIED = frozenset({429} | set(range(500, 600)))


class GuardError(GymflowError):
    """A resources server cannot be used for reverification."""


def _mode(name: str, url: str, attempts: int, timeout_s: float) -> str:
    detail = "no attempt made"
    for attempt in range(1, attempts + 1):
        try:
            reply = blocking_http.request("GET", f"{url}/reverify_mode", timeout_s=timeout_s)
        except blocking_http.TransportError as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            if reply.is_success:
                try:
                    value = orjson.loads(reply.body)
                except orjson.JSONDecodeError:
                    value = reply.text
                if isinstance(value, str) and value in MODES:
                    return value
                raise GuardError(
                    f"reverify: could not read reverify_mode from resources server {name!r}: "
                    f"unexpected answer {reply.text[:200]!r}"
                )
            detail = f"HTTP {reply.status}: {reply.text[:200]}"
            if reply.status not in _RETRIED:
                break
        if attempt < attempts:
            time.sleep(random.uniform(0.0, min(2.0, 0.25 * 2 ** (attempt - 1))))
    raise GuardError(f"reverify: could not read reverify_mode from resources server {name!r}: {detail}")


def read_modes(
    urls: Mapping[str, str], names: Iterable[str], *, attempts: int, timeout_s: float
) -> dict[str, str]:
    """Each named server's mode, asked once each, in name order."""
    return {name: _mode(name, urls[name], attempts, timeout_s) for name in sorted(set(names))}


def unsafe(modes: Mapping[str, str]) -> list[str]:
    return sorted(name for name, mode in modes.items() if mode != "stateless")


def refusal(servers: list[str]) -> str:
    return (
        f"Resource server(s) {servers!r} have reverify_mode=UNSUPPORTED or UNKNOWN. Rewards computed by "
        "reverification may be incorrect. Pass ++force=true to override "
        "(output will be prefixed with 'unsafe_')."
    )


def warning(servers: list[str]) -> str:
    return (
        f"WARNING: resource server(s) {servers!r} have reverify_mode=UNSUPPORTED or UNKNOWN. "
        "Rewards computed by reverification may be incorrect. Output is prefixed with 'unsafe_'."
    )


def atif_refusal(servers: list[str]) -> str:
    return (
        f"ATIF reverification requires stateless verifiers; resource server(s) {servers!r} reported "
        "reverify_mode=UNSUPPORTED or UNKNOWN."
    )


@contextmanager
def running_servers(
    config: Mapping[str, Any],
    names: Iterable[str],
    *,
    echo: Callable[[str], None],
    timeout_s: float,
    servers: Servers | None = None,
) -> Iterator[dict[str, str]]:
    """name -> base URL of each named server, launching what ``servers`` decides to launch
    (:mod:`gymflow.reverify.launch`)."""
    with ensure_servers(config, sorted(set(names)), echo=echo, timeout_s=timeout_s, servers=servers) as urls:
        yield dict(urls)
