"""A client of the local Prefect server gymflow started, for flow tests that read runs back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient


@contextmanager
def local_client() -> Iterator[SyncPrefectClient]:
    """A synchronous client of the server at :func:`gymflow.flows._server.api_url`."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from gymflow.flows import _server

    with (
        temporary_settings(updates={PREFECT_API_URL: _server.api_url()}),
        get_client(sync_client=True) as client,
    ):
        yield client
