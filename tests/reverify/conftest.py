"""Fixtures: the loopback resources server (:mod:`tests.reverify.server`) in a subprocess.

* ``resources_server``: a stateless server shared by the session, reset before each test (fast).
* ``start_resources_server(mode=..., latency_ms=..., workers=...)``: a fresh server of its own per call
  (e.g. one ``unknown`` and one ``stateless``), stopped at the end of the test.
* ``gym_config_file(servers, agents=..., ...)``: writes a Gym config YAML for given servers into ``tmp_path``.

Each returned server is a :class:`~tests.reverify.server_process.ServerProcess`: ``.url``, ``.host``,
``.port``, ``.set(key, kind=..., ...)``, ``.set_mode(...)``, ``.reset()``, ``.log(path)``, ``.stats()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reverify.server_process import ServerProcess, start_server, write_gym_config


@pytest.fixture(scope="session")
def _shared_resources_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server("stateless", log_dir=tmp_path_factory.mktemp("rs-shared"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def resources_server(_shared_resources_server: ServerProcess) -> ServerProcess:
    """A stateless server, freshly reset (behaviours, log, counters, mode)."""
    if not _shared_resources_server.alive():
        pytest.fail(f"shared test server died:\n{_shared_resources_server.server_log()[-2000:]}")
    _shared_resources_server.reset()
    return _shared_resources_server


@pytest.fixture
def start_resources_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Factory: ``start_resources_server(mode="unknown", latency_ms=5)`` → a new server for this test only."""
    started: list[ServerProcess] = []

    def start(mode: str = "stateless", **flags: Any) -> ServerProcess:
        server = start_server(mode, log_dir=tmp_path, **flags)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def gym_config_file(tmp_path: Path) -> Callable[..., Path]:
    """``gym_config_file({"mcqa": server}, agents={"mcqa_simple_agent": "mcqa"}, name="cfg.yaml")`` → path."""

    def write(servers: Any, *, name: str = "gym_config.yaml", **kwargs: Any) -> Path:
        return write_gym_config(tmp_path / name, servers, **kwargs)

    return write
