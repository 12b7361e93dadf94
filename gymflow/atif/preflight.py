"""ATIF preflight checks that depend only on the config and the projected bodies (reverify.md §3.8).

The reverify core routes every body and asks ``/reverify_mode`` first; then it calls
:func:`preflight` with each body and the resources server it routes to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gymflow.atif.errors import AtifError

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _config_bool(value: Any) -> bool | None:
    """A config boolean parsed the lax way Gym's config does (``"yes"``, ``1`` count); None if invalid."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    return None


def exposes_tools_over_mcp(config: Mapping[str, Any], server: str) -> bool:
    """Whether the resources server block ``server`` sets ``expose_tools_over_mcp``."""
    block = config.get(server)
    if not isinstance(block, Mapping):
        raise AtifError(f"reverify: resources server {server!r} is missing from the config.")
    implementations = block.get("resources_servers")
    if not isinstance(implementations, Mapping) or len(implementations) != 1:
        raise AtifError(
            f"reverify: resources server {server!r} must contain exactly one resources_servers entry."
        )
    implementation = next(iter(implementations.values()))
    if not isinstance(implementation, Mapping):
        raise AtifError(f"reverify: resources server {server!r} has an invalid config entry.")
    flag = _config_bool(implementation.get("expose_tools_over_mcp", False))
    if flag is None:
        raise AtifError(f"reverify: resources server {server!r} has an invalid expose_tools_over_mcp value.")
    return flag


def has_function_calls(body: Mapping[str, Any]) -> bool:
    response = body.get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    return isinstance(output, list) and any(
        isinstance(item, Mapping) and item.get("type") == "function_call" for item in output
    )


def preflight(config: Mapping[str, Any], routed: Iterable[tuple[Mapping[str, Any], str]]) -> None:
    """Refuse a body with tool calls routed to an MCP-exposed resources server.

    ``config`` is the resolved global config as plain data; ``routed`` pairs each projected body
    with the name of the resources server it routes to (after the ``/reverify_mode`` check).
    """
    for body, server in routed:
        if has_function_calls(body) and exposes_tools_over_mcp(config, server):
            raise AtifError(
                "Relay ATIF tool calls cannot be reverified against MCP-exposed resources server "
                f"{server!r}: ATIF proves call/result correlation but does not carry Gym's canonical "
                "(server_name, tool_name) provenance. Use a non-MCP stateless verifier or a text-only "
                "trajectory."
            )
