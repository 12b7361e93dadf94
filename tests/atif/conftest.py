"""ATIF tests share the loopback resources-server fixtures of ``tests/reverify``."""

from tests.reverify.conftest import (  # noqa: F401  (pytest fixtures)
    _shared_resources_server,
    gym_config_file,
    resources_server,
    start_resources_server,
)
