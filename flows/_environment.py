"""Prefect's process environment, set before Prefect is first imported.

No server is needed: without ``PREFECT_API_URL`` the orchestrated commands use the local server
gymflow starts on first use (:mod:`gymflow.flows._server`), over the SQLite database under
``$PREFECT_HOME``, so runs are kept and its UI (``gymflow ui``) shows them later.
"""

from __future__ import annotations

import os

from gymflow import storage
from gymflow.config import PrefectConfig

RESULT_BLOCK = "gymflow-result-store"
"""The RemoteFileSystem block gymflow saves for a remote ``prefect.result_store``."""

_config = PrefectConfig()


def prepare(config: PrefectConfig, verbose: bool) -> None:
    """Quiet, offline-safe defaults; the user's own environment variables win."""
    global _config
    _config = config
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if config.result_store is not None and storage.is_local(config.result_store):
        os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = os.path.abspath(
            config.result_store.removeprefix("file://")
        )
    if not verbose:
        # Dask's cluster logs (runner.kind: dask) at INFO would flood the terminal.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", config.log_level)


def startup_timeout_s() -> float:
    return float(_config.startup_timeout_seconds)


def use_remote_result_store() -> None:
    """With a remote ``prefect.result_store``, save it as a block (with the storage options of
    its protocol) and make it the default result storage of this process and its children.
    Called once the API is known: blocks live in the API."""
    store = _config.result_store
    if store is None or storage.is_local(store):
        return
    from prefect.filesystems import RemoteFileSystem

    protocol = store.split("://", 1)[0]
    options = storage.current_options().get(protocol, {})
    RemoteFileSystem(basepath=store.rstrip("/"), settings=dict(options)).save(RESULT_BLOCK, overwrite=True)
    os.environ["PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"] = f"remote-file-system/{RESULT_BLOCK}"
