"""Test-session settings: Prefect state lives in a temporary home, never the user's.

The orchestrated commands start gymflow's local Prefect server on first use
(``gymflow.flows._server``); the tests give it its own home and a free port, and stop it when
the session ends.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures.s3"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_PREFECT_HOME = tempfile.mkdtemp(prefix="gymflow-tests-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ["PREFECT_SERVER_API_PORT"] = str(_free_port())
os.environ.pop("PREFECT_API_URL", None)
# Composed configurations are cached between commands (gymflow.conf.composed_cache): the tests'
# own cache, never the user's.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="gymflow-tests-cache-")
# Both go when this process ends (after the session has stopped the server): each test process
# left ~10 MB of Prefect database and cache in the temporary directory.
for _directory in (_PREFECT_HOME, os.environ["XDG_CACHE_HOME"]):
    atexit.register(shutil.rmtree, _directory, ignore_errors=True)
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The CLI's default console level (prefect.log_level). Prefect fixes its log level when it is first
# imported in a process: without this, a test that imports Prefect before any in-process command
# leaves it at INFO for every later test of that worker.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session", autouse=True)
def _stop_local_prefect_server() -> Iterator[None]:
    yield
    if os.path.exists(os.path.join(_PREFECT_HOME, "server.pid")):
        from gymflow.flows import _server

        _server.stop()


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """A command run in this process sets environment variables for itself (``gymflow -v`` sets
    ``PREFECT_LOGGING_LEVEL=INFO``); a later test's subprocesses would inherit them, so what a test
    sees depended on which tests ran before it in the same worker."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _no_prefect_console_on_root() -> Iterator[None]:
    """Once a test ran a flow in this process, Prefect's logging config has put a console handler
    bound to that test's captured stderr on the root logger; a later test's warnings would then
    hit a closed stream ("--- Logging error ---"). A command starts in a fresh process, so drop it."""
    import logging

    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler).__module__.startswith("prefect."):
            root.removeHandler(handler)
    yield
