"""Selecting the native rows to verify: join, duplicates, unmatched rows, ``--limit``, the recovery
predicate and routing (reverify.md §2.1, §2.3, §2.9, §4 points 3-5). One streaming pass; per
selected row only its key, server, content key and line offset are kept."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gymflow import storage
from gymflow.errors import InputError
from gymflow.gym_config import Routing, verifier_sha256
from gymflow.reverify._classes import RECOVERED_CLASSES, FailureClass
from gymflow.reverify._inputs import (
    Key,
    Materialized,
    build_body,
    content_sha256,
    iter_rows,
    missing_response,
    parse_row,
    read_heads,
)
from gymflow.reverify._results import reverify_key
from gymflow.reverify.launch import Servers

__all__ = ["WORK_KEY", "Selection", "Work", "check_multistage", "select_native", "work_of_items"]

MULTISTAGE = (
    "--judge-failed-only does not support multi-stage rows; resume the multi-stage rollout collection so "
    "stage identity and adaptive references are preserved"
)


@dataclass(slots=True)
class Work:
    """One selected row: key, routed server, content key and where its source lies. (Not frozen:
    a frozen dataclass is built through ``object.__setattr__``, a third of a microsecond per field,
    for each of a run's rows.)"""

    task: int
    rollout: int
    server: str
    reverify_key: str
    position: int
    """Byte offset of the rollout (or sidecar) line; index into the items in ATIF mode."""
    length: int = 0
    """Bytes of that line, without its terminator (0 in ATIF mode)."""
    response_at: int = 0
    """Where that line holds the body's only field from it (:attr:`RolloutHead.response_at`)."""

    @property
    def key(self) -> Key:
        key: Key = WORK_KEY(self)
        return key


WORK_KEY = operator.attrgetter("task", "rollout")
"""A :class:`Work`'s key, from C (a run sorts tens of thousands of them by it)."""


@dataclass
class Selection:
    work: list[Work] = field(default_factory=list)
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    duplicates: dict[Key, int] = field(default_factory=dict)
    fallback_used: bool = False


class VerifierHashes:
    """The verifier identity per server, computed once each: ``servers`` decides it (a server gymflow
    did not launch is not identified by the config's settings, §3.10 point 4); without one, the
    config block's hash."""

    def __init__(self, config: Mapping[str, Any], servers: Servers | None = None) -> None:
        self.config = config
        self.servers = servers
        self.cache: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        digest = self.cache.get(name)
        if digest is None:
            if self.servers is not None:
                digest = self.servers.verifier_sha256(name)
            else:
                digest = verifier_sha256(self.config, name)
            self.cache[name] = digest
        return digest


_ROUTING_ONLY: Mapping[str, Any] = {"response": None}
"""What :func:`build_body` needs of a rollout to build a body that is only routed."""


def route(routing: Routing, body: Mapping[str, Any]) -> tuple[str, bool]:
    """The server of ``body`` and whether rule 4's fallback chose it."""
    name = routing.route_row(body)
    explicit = (isinstance(body.get("task_source"), str) and body["task_source"] in routing.resources) or (
        isinstance(body.get("_ng_environment_server"), str)
        and body["_ng_environment_server"] in routing.environments
    )
    return name, not explicit and not routing.agents


def unmatched_row(key: Key, row: Mapping[str, Any], raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"_ng_task_index": key[0], "_ng_rollout_index": key[1]}
    if "agent_ref" in row:
        out["agent_ref"] = row["agent_ref"]
    unmatched: FailureClass = "unmatched_rollout"
    out["_ng_failure_class"] = unmatched
    out["_ng_failure_message"] = f"no materialized input row for (task {key[0]}, rollout {key[1]})"
    out["_ng_reverify_key"] = reverify_key("gym", content_sha256(b"", raw), "")
    return out


def select_native(
    source: str,
    materialized: Materialized,
    routing: Routing,
    hashes: VerifierHashes,
    *,
    limit: int | None,
    recovery: bool,
    exclude: set[Key] | frozenset[Key] = frozenset(),
) -> Selection:
    """Stream ``source`` (rollouts, or the recovery sidecar) and select what to verify.

    Raises :class:`InputError` / :class:`RouteError` before anything is written.
    """
    selection = Selection()
    seen: set[Key] = set()
    # Flat rows share their route fields (one object per distinct value): each is routed once.
    routed: dict[int, tuple[str, bool]] = {}
    routes = materialized.routes
    for number, offset, raw, head, key in read_heads(source):
        if limit is not None and len(selection.work) >= limit:
            break
        if recovery and (head.failure_class not in RECOVERED_CLASSES or key in exclude):
            continue
        if key in seen:
            if not recovery:
                selection.duplicates[key] = selection.duplicates.get(key, 0) + 1
            continue
        seen.add(key)
        line = materialized.get(key)
        if line is None:
            selection.unmatched.append(unmatched_row(key, parse_row(source, number, raw), raw))
            continue
        if not head.has_response:
            raise missing_response(key, parse_row(source, number, raw))
        fields = routes.get(key)
        if fields is None:
            # A task_input row: its body is built (and checked) to route it. The rollout gives a body
            # only its response and file fields, which routing does not read: it is not parsed here.
            server, fallback = route(routing, build_body(orjson.loads(line), _ROUTING_ONLY))
        else:
            found = routed.get(id(fields))
            if found is None:
                found = routed[id(fields)] = route(routing, fields)
            server, fallback = found
        selection.fallback_used = selection.fallback_used or fallback
        selection.work.append(
            Work(
                key[0],
                key[1],
                server,
                reverify_key("gym", content_sha256(line, raw), hashes(server)),
                offset,
                len(raw),
                head.response_at,
            )
        )
    return selection


def check_multistage(sidecar: str, rollouts: str, retry_invalid: bool) -> None:
    """§2.9 step 2 (and the G check that the source sidecar exists)."""
    if not storage.isfile(sidecar):
        raise InputError(f"judge-failed-only source not found: {sidecar!r}")
    for _, _, _, row in iter_rows(sidecar):
        if "stage_index" in row:
            raise InputError(MULTISTAGE)
    if retry_invalid:
        for _, _, _, row in iter_rows(rollouts):
            if row.get("invalid_judge_response") and "stage_index" in row:
                raise InputError(MULTISTAGE)


def work_of_items(items: list[Any], routing: Routing, hashes: VerifierHashes) -> Selection:
    """Route ATIF items (their checks are done by ``gymflow.atif``)."""
    selection = Selection()
    for index, item in enumerate(items):
        server, fallback = route(routing, item.body)
        selection.fallback_used = selection.fallback_used or fallback
        key = reverify_key(item.mode, item.source_sha256, hashes(server))
        selection.work.append(Work(item.task, item.rollout, server, key, index))
    return selection
