"""Pure functions over a resolved NeMo Gym config mapping (reverify.md §1 "Servers", §2.3, §4 point 4).

One definition of: which top-level blocks are resources servers and where they listen, the agent
map, the routing rules that send a row to a resources server, and a verifier's identity (its
resolved block without addresses, and that block's hash). Used by ``eval reverify`` and by
``eval aggregate --server-metrics``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gymflow.errors import GymflowError

__all__ = [
    "ADDRESS_KEYS",
    "RouteError",
    "Routing",
    "agent_map",
    "environment_map",
    "resources_server_blocks",
    "resources_server_url",
    "resources_server_urls",
    "verifier_block",
    "verifier_sha256",
]

ADDRESS_KEYS = frozenset({"host", "port", "base_url"})
"""Keys of a server block that say where it listens, not how it verifies."""


class RouteError(GymflowError):
    """No resources server can be chosen for a row (reverify.md §2.3 rules 4 and 5)."""


def _named(ref: object) -> str | None:
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None


def resources_server_blocks(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Top-level block name -> its ``resources_servers`` mapping, in config order."""
    out: dict[str, Mapping[str, Any]] = {}
    for block, body in config.items():
        servers = body.get("resources_servers") if isinstance(body, Mapping) else None
        if isinstance(servers, Mapping):
            out[str(block)] = servers
    return out


def _first_impl(servers: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for impl in servers.values():
        if isinstance(impl, Mapping):
            return impl
    return None


def resources_server_url(config: Mapping[str, Any], name: str) -> str | None:
    """Base URL of resources server ``name``: its ``base_url``, else ``http://<host>:<port>``."""
    servers = resources_server_blocks(config).get(name)
    impl = _first_impl(servers) if servers is not None else None
    if impl is None:
        return None
    if isinstance(impl.get("base_url"), str) and impl["base_url"]:
        return str(impl["base_url"]).rstrip("/")
    if impl.get("host") is not None and impl.get("port") is not None:
        return f"http://{impl['host']}:{impl['port']}"
    return None


def resources_server_urls(config: Mapping[str, Any]) -> dict[str, str]:
    """Resources-server block name -> base URL, for every block that has an address."""
    urls: dict[str, str] = {}
    for name in resources_server_blocks(config):
        url = resources_server_url(config, name)
        if url is not None:
            urls[name] = url
    return urls


def agent_map(config: Mapping[str, Any]) -> dict[str, str]:
    """Agent block name -> resources server, from each agent block's first implementation
    (blocks whose first implementation names no resources server contribute nothing)."""
    agents: dict[str, str] = {}
    for block, body in config.items():
        impls = body.get("responses_api_agents") if isinstance(body, Mapping) else None
        if isinstance(impls, Mapping) and impls:
            first = next(iter(impls.values()))
            name = _named(first.get("resources_server")) if isinstance(first, Mapping) else None
            if name:
                agents[str(block)] = name
    return agents


def environment_map(config: Mapping[str, Any]) -> dict[str, str]:
    """Environment-server block -> the resources server of its first implementation naming one."""
    out: dict[str, str] = {}
    for block, body in config.items():
        servers = body.get("environment_servers") if isinstance(body, Mapping) else None
        if not isinstance(servers, Mapping):
            continue
        for impl in servers.values():
            name = _named(impl.get("resources_server")) if isinstance(impl, Mapping) else None
            if name:
                out[str(block)] = name
                break
    return out


@dataclass(frozen=True)
class Routing:
    """The routing rules of reverify.md §2.3, precomputed once per config."""

    resources: tuple[str, ...]
    environments: Mapping[str, str] = field(default_factory=dict)
    agents: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Routing:
        return cls(tuple(resources_server_blocks(config)), environment_map(config), agent_map(config))

    @property
    def fallback(self) -> str | None:
        """The only resources server, when there are no agent blocks to route by (rule 4)."""
        if not self.agents and len(self.resources) == 1:
            return self.resources[0]
        return None

    def fallback_problem(self, prefix: str) -> str | None:
        """Rule 4's error when there is no agent map and not exactly one resources server."""
        if self.agents or len(self.resources) == 1:
            return None
        if not self.resources:
            return f"{prefix}: no resources server found in the config."
        return (
            f"{prefix}: multiple resources servers {sorted(self.resources)!r} and no agent blocks to "
            "route by. Use a config with agent blocks."
        )

    def fallback_warning(self, prefix: str) -> str | None:
        only = self.fallback
        if only is None:
            return None
        return (
            f"{prefix}: config has no agent blocks; routing EVERY rollout agent name to the only resources "
            f"server {only!r}. Mismatched or stale agent names cannot be detected in this mode."
        )

    def route(self, task_source: object, environment_server: object, agent_name: object) -> str | None:
        """Rules 1-4, first match wins; None when nothing matches (rule 5, or rule 4 failing)."""
        if isinstance(task_source, str) and task_source in self.resources:
            return task_source
        if isinstance(environment_server, str) and environment_server in self.environments:
            return self.environments[environment_server]
        if self.agents:
            return self.agents.get(agent_name) if isinstance(agent_name, str) else None
        return self.fallback

    def route_row(self, row: Mapping[str, Any], prefix: str = "reverify") -> str:
        """The server of a request body or result row; :class:`RouteError` with §2.3's texts."""
        agent = _named(row.get("agent_ref"))
        name = self.route(row.get("task_source"), row.get("_ng_environment_server"), agent)
        if name is not None:
            return name
        problem = self.fallback_problem(prefix)
        if problem is not None:
            raise RouteError(problem)
        raw_agent = row.get("agent_ref")
        shown = raw_agent.get("name") if isinstance(raw_agent, Mapping) else None
        raise RouteError(
            f"{prefix}: cannot find a resources server for row (agent_ref.name={shown!r}, "
            f"task_source={row.get('task_source')!r}). Known agents: {sorted(self.agents)!r}."
        )


def _without_addresses(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _without_addresses(v) for k, v in value.items() if k not in ADDRESS_KEYS}
    if isinstance(value, list | tuple):
        return [_without_addresses(v) for v in value]
    return value


def verifier_block(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``<name>.resources_servers`` without any ``host``, ``port`` or ``base_url`` key (any depth)."""
    servers = resources_server_blocks(config).get(name)
    if servers is None:
        return {}
    result: dict[str, Any] = _without_addresses(servers)
    return result


def _canonical_sha256(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verifier_sha256(config: Mapping[str, Any], name: str) -> str:
    """SHA-256 hex of the canonical JSON of ``{"resources_server": name, "config": block}``: the
    identity of a server gymflow launched with that block."""
    return _canonical_sha256({"resources_server": name, "config": verifier_block(config, name)})
