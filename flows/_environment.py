"""Prefect's process environment, set before Prefect is first imported.

No server is needed: without ``PREFECT_API_URL`` the orchestrated commands use the local server
gymflow starts on first use (:mod:`gymflow.flows._server`), over the SQLite database under
``$PREFECT_HOME``, so runs are kept and its UI (``gymflow ui``) shows them later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from gymflow import storage
from gymflow.config import PrefectConfig

RESULT_BLOCK = "gymflow-result-store"
_BLOCK_ENV = "PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK"
_LOCAL_ENV = "PREFECT_RESULTS_LOCAL_STORAGE_PATH"
"""The RemoteFileSystem block gymflow saves for a remote ``prefect.result_store``."""

_config = PrefectConfig()


def prepare(config: PrefectConfig, verbose: bool) -> None:
    """Quiet, offline-safe defaults; the user's own environment variables win."""
    global _config
    _config = config
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # gymflow's own warnings (a coverage gap, missing rollouts) reach the run's Logs tab too, not
    # only the console: Prefect gives the logger its API handler.
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "gymflow")
    # ... and outside a flow run (a direct run after a flow run in one process) stay local.
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    if not verbose:
        # Dask's cluster logs (runner.kind: dask) at INFO would flood the terminal.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", config.log_level)


def startup_timeout_s() -> float:
    return float(_config.startup_timeout_seconds)


def kept_dir() -> str:
    """Where stored results keep the files they name (:mod:`gymflow.kept`): beside the results in
    a local ``prefect.result_store``, else under Prefect's local storage path (a remote store's
    results name files on the machine that wrote them; elsewhere they are computed again)."""
    # Imported here: importing Prefect reads the environment this module sets.
    from prefect.settings import get_current_settings

    local = os.environ.get(_LOCAL_ENV) or str(get_current_settings().results.local_storage_path)
    return os.path.join(local, "gymflow-kept")


@contextmanager
def result_store() -> Iterator[None]:
    """``prefect.result_store`` as the result storage of this process and its children for the
    ``with`` block: a directory as Prefect's local storage path; a remote URL saved as a block
    with the storage options of its protocol (blocks live in the API, so this runs once the API
    is known)."""
    store = _config.result_store
    if store is None:
        yield
        return
    if storage.is_local(store):
        variable, value = _LOCAL_ENV, os.path.abspath(store.removeprefix("file://"))
    else:
        from prefect.filesystems import RemoteFileSystem

        options = storage.current_options().get(store.split("://", 1)[0], {})
        RemoteFileSystem(basepath=store.rstrip("/"), settings=dict(options)).save(
            RESULT_BLOCK, overwrite=True
        )
        variable, value = _BLOCK_ENV, f"remote-file-system/{RESULT_BLOCK}"
    previous = os.environ.get(variable)
    os.environ[variable] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = previous
