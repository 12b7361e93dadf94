"""reverify.md §3.8: the MCP-exposed-tools refusal and malformed config blocks (pure part of preflight)."""

from __future__ import annotations

from typing import Any

import pytest

from gymflow.atif import AtifError, preflight
from tests.atif.builders import materialized_row, text_trajectory, tool_trajectory
from tests.atif.test_shapes import project

TOOL_BODY = project(tool_trajectory(), materialized_row())
TEXT_BODY = project(text_trajectory(), materialized_row())
MCP_REFUSAL = (
    "Relay ATIF tool calls cannot be reverified against MCP-exposed resources server 'mcqa': ATIF proves "
    "call/result correlation but does not carry Gym's canonical (server_name, tool_name) provenance. Use a "
    "non-MCP stateless verifier or a text-only trajectory."
)


def config(**implementation: Any) -> dict[str, Any]:
    return {"mcqa": {"resources_servers": {"mcqa": {"host": "127.0.0.1", "port": 1, **implementation}}}}


@pytest.mark.parametrize("flag", [True, "yes", "True", 1, "on", "1"])
def test_tool_calls_refused_on_mcp_servers(flag: Any) -> None:
    with pytest.raises(AtifError) as caught:
        preflight(config(expose_tools_over_mcp=flag), [(TEXT_BODY, "mcqa"), (TOOL_BODY, "mcqa")])
    assert str(caught.value) == MCP_REFUSAL


@pytest.mark.parametrize("flag", [False, "no", 0, "off", None])
def test_tool_calls_allowed_without_mcp(flag: Any) -> None:
    implementation = {} if flag is None else {"expose_tools_over_mcp": flag}
    preflight(config(**implementation), [(TOOL_BODY, "mcqa")])


def test_text_only_bodies_never_look_at_the_block() -> None:
    preflight({}, [(TEXT_BODY, "missing")])


@pytest.mark.parametrize(
    ("gym_config", "message"),
    [
        ({}, "reverify: resources server 'mcqa' is missing from the config."),
        (
            {"mcqa": {"resources_servers": {}}},
            "reverify: resources server 'mcqa' must contain exactly one resources_servers entry.",
        ),
        (
            {"mcqa": {"resources_servers": {"a": {}, "b": {}}}},
            "reverify: resources server 'mcqa' must contain exactly one resources_servers entry.",
        ),
        (
            {"mcqa": {"resources_servers": {"mcqa": 3}}},
            "reverify: resources server 'mcqa' has an invalid config entry.",
        ),
        (
            config(expose_tools_over_mcp="maybe"),
            "reverify: resources server 'mcqa' has an invalid expose_tools_over_mcp value.",
        ),
        (
            config(expose_tools_over_mcp=2),
            "reverify: resources server 'mcqa' has an invalid expose_tools_over_mcp value.",
        ),
    ],
)
def test_malformed_blocks(gym_config: dict[str, Any], message: str) -> None:
    with pytest.raises(AtifError) as caught:
        preflight(gym_config, [(TOOL_BODY, "mcqa")])
    assert str(caught.value) == message
