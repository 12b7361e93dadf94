"""What every step of a run needs besides its own options, as one frozen value.

A command's runner (``run_<command>(options, ctx, executor)``) receives a :class:`RunContext` and
hands it, as data, to every piece of work it sends to an executor, so a task on a remote Dask
worker reads storage with the same options and records the same config as the client. Nothing
travels through module globals or environment variables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from gymflow import storage
from gymflow.config import OpenLineageConfig, RunnerConfig
from gymflow.frozen import FrozenDict, freeze

__all__ = ["DIRECT", "RunContext"]

DIRECT: Mapping[str, Any] = FrozenDict({"kind": "direct"})
"""The orchestrator block of a run without Prefect."""


@dataclass(frozen=True)
class RunContext:
    """A run's storage options, resolved config, runner settings, orchestrator and lock policy."""

    storage_options: Mapping[str, Mapping[str, Any]] = field(default_factory=FrozenDict)
    """fsspec options per protocol (``storage.options``), in force while the context is active."""
    config: Mapping[str, Any] | None = None
    """The command's resolved configuration, redacted: every provenance record of the run holds
    it as its ``config`` entry (None: records have none, as for a library call)."""
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    orchestrator: Mapping[str, Any] = DIRECT
    """The ``orchestrator`` block of the run's provenance records."""
    take_locks: bool = True
    """Whether each runner takes the run lock of its outputs (:mod:`gymflow.locking`); False when
    the caller already holds them."""
    lineage: OpenLineageConfig = field(default_factory=OpenLineageConfig)
    """Where the run's OpenLineage events go (:mod:`gymflow.lineage`; default: the library's own
    settings, else none)."""

    def __post_init__(self) -> None:
        from gymflow.provenance import redact

        object.__setattr__(self, "storage_options", freeze(self.storage_options))
        if self.config is not None:
            object.__setattr__(self, "config", freeze(redact(self.config)))
        object.__setattr__(self, "orchestrator", freeze(self.orchestrator))

    @contextmanager
    def active(self) -> Iterator[RunContext]:
        """Storage options in force for the ``with`` block (in this thread and the threads and
        worker processes it starts)."""
        with storage.using(self.storage_options):
            yield self

    def lock(self, url: str, command: str) -> AbstractContextManager[object]:
        """The run lock of the output ``url`` for the ``with`` block, unless the caller holds it."""
        from gymflow import locking

        return locking.run_lock(url, command) if self.take_locks else nullcontext()

    def under(self, orchestrator: Mapping[str, Any]) -> RunContext:
        """This context for a run recorded under ``orchestrator`` (a Prefect flow run)."""
        return replace(self, orchestrator=orchestrator)
