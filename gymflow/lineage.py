"""OpenLineage run events of each report, through ``openlineage-python`` and its transports.

Every command's runner wraps its run in :func:`run`: a ``START`` event as the run begins, then
``COMPLETE`` once its provenance record is written (or found up to date), ``FAIL`` when the run
raises (``ABORT`` when it is interrupted). The ``COMPLETE`` event lists the record's inputs and
outputs as datasets whose ``version`` facet is the SHA-256 the record holds; a dataset's namespace
is its URI's scheme and host (``file`` for a local file, ``s3://bucket``) and its name the path.
The job is the command (``gymflow.eval_health_check``) in the configured namespace; the run's
``tags`` facet holds the record's ``orchestrator`` block (``gymflow.orchestrator.kind``: ``direct``
or ``prefect``, then the Prefect flow run's id and URL).

Configured the library's way (``$OPENLINEAGE_URL``, ``$OPENLINEAGE_CONFIG``, ``openlineage.yml``,
``OPENLINEAGE__*`` variables) or by the ``openlineage`` block of gymflow's config; unconfigured,
the library is not even imported. Emission never breaks a run and barely slows one: events are
sent from a background thread, an error is one warning, and a run waits at most ``timeout_s`` as
it ends for its events to be sent.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gymflow import __version__, provenance, threads
from gymflow.config import OpenLineageConfig
from gymflow.frozen import thaw

if TYPE_CHECKING:
    from gymflow.run_context import RunContext

__all__ = ["DEFAULT_NAMESPACE", "dataset_name", "enabled", "job_name", "run"]

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "gymflow"
PRODUCER = f"urn:python:gymflow:{__version__}"
"""The ``producer`` of every event: gymflow and its version."""
CONFIG_FILES = ("openlineage.yml", "~/.openlineage/openlineage.yml")
"""Where the library looks for its config file (the first relative to the working directory)."""

State = Literal["START", "COMPLETE", "FAIL", "ABORT"]


def enabled(settings: OpenLineageConfig) -> bool:
    """Whether events are emitted: a transport in ``settings``, or one the library would find
    itself, and ``$OPENLINEAGE_DISABLED`` not ``true``."""
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if settings.transport:
        return True
    if os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(name.startswith("OPENLINEAGE__TRANSPORT") for name in os.environ):
        return True
    return any(Path(path).expanduser().is_file() for path in CONFIG_FILES)


def job_name(command: str) -> str:
    """``eval health-check`` -> ``gymflow.eval_health_check``."""
    return "gymflow." + command.replace(" ", "_").replace("-", "_")


def dataset_name(uri: str) -> tuple[str, str]:
    """A record URI as OpenLineage names a file: ``("file", "/abs/path")`` for a local one,
    ``("s3://bucket", "key")`` (scheme and host, then the path) for a remote one. Record URIs are
    not percent-encoded, so the path is taken as it is written."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return "file", uri
    if scheme == "file":
        return "file", rest
    host, _, path = rest.partition("/")
    return f"{scheme}://{host}", path


@contextmanager
def run(command: str, ctx: RunContext) -> Iterator[None]:
    """The run of ``command`` in the ``with`` block, as OpenLineage events (nothing when
    unconfigured). Its datasets are those of the records of ``command`` written in the block."""
    settings = ctx.lineage
    if not enabled(settings):
        yield
        return
    records: list[Mapping[str, Any]] = []

    def seen(_: str, record: Mapping[str, Any]) -> None:
        if record.get("command") == command:
            records.append(record)

    sender = _Sender(settings, command, ctx.orchestrator)
    sender.send("START")
    try:
        with provenance.observing(seen):
            yield
    except Exception as exc:
        sender.send("FAIL", records, f"{type(exc).__name__}: {exc}")
        sender.close()
        raise
    except BaseException as exc:
        sender.send("ABORT", records, type(exc).__name__)
        sender.close()
        raise
    sender.send("COMPLETE", records)
    sender.close()


@dataclass(frozen=True)
class _Event:
    state: State
    time: str
    records: Sequence[Mapping[str, Any]] = ()
    error: str | None = None


@dataclass
class _Sender:
    """One run's events, sent in order from a daemon thread (which also imports the library)."""

    settings: OpenLineageConfig
    command: str
    orchestrator: Mapping[str, Any]
    _queue: queue.SimpleQueue[_Event | None] = field(default_factory=queue.SimpleQueue)
    _warned: bool = False
    _thread: threading.Thread | None = None
    _run_id: str = ""

    def __post_init__(self) -> None:
        self._thread = threads.start(self._work, name="gymflow-lineage")

    def send(self, state: State, records: Sequence[Mapping[str, Any]] = (), error: str | None = None) -> None:
        self._queue.put(_Event(state, provenance.timestamp(), tuple(records), error))

    def close(self) -> None:
        """Wait up to ``timeout_s`` for the events sent so far to be sent."""
        self._queue.put(None)
        assert self._thread is not None
        self._thread.join(self.settings.timeout_s)
        if self._thread.is_alive():
            self._warn(f"not sent within {self.settings.timeout_s:g} s")

    def _warn(self, reason: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("OpenLineage events of %s: %s", job_name(self.command), reason)

    def _work(self) -> None:
        try:
            from openlineage.client.uuid import generate_new_uuid

            self._run_id = str(generate_new_uuid())  # a UUIDv7, as the spec recommends
            client = _client(self.settings)
        except Exception as exc:  # noqa: BLE001 - a bad transport costs the events, never the run
            self._warn(f"no OpenLineage client: {type(exc).__name__}: {exc}")
            client = None
        while (event := self._queue.get()) is not None:
            if client is None:
                continue
            try:
                client.emit(self._event(event))
            except Exception as exc:  # noqa: BLE001 - as above: one warning, the run goes on
                self._warn(f"{event.state} not sent: {type(exc).__name__}: {exc}")

    def _event(self, event: _Event) -> Any:
        from openlineage.client import event_v2
        from openlineage.client.facet_v2 import (
            dataset_version_dataset,
            error_message_run,
            job_type_job,
            processing_engine_run,
            tags_run,
        )

        def version(entry: Mapping[str, Any]) -> dict[str, Any]:
            return {"version": dataset_version_dataset.DatasetVersionDatasetFacet(str(entry["sha256"]))}

        inputs: dict[str, event_v2.InputDataset] = {}
        outputs: dict[str, event_v2.OutputDataset] = {}
        for record in event.records:
            for entry in record.get("inputs", []):
                namespace, name = dataset_name(str(entry["uri"]))
                inputs[str(entry["uri"])] = event_v2.InputDataset(namespace, name, facets=version(entry))
            for entry in record.get("outputs", []):
                namespace, name = dataset_name(str(entry["uri"]))
                outputs[str(entry["uri"])] = event_v2.OutputDataset(namespace, name, facets=version(entry))
        run_facets: dict[str, Any] = {
            "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
                version=__version__, name="gymflow", openlineageAdapterVersion=__version__
            )
        }
        tags = [
            tags_run.TagsRunFacetFields(f"gymflow.orchestrator.{key}", str(value), "GYMFLOW")
            for key, value in sorted(self.orchestrator.items())
            if value is not None
        ]
        run_facets["tags"] = tags_run.TagsRunFacet(tags=tags)
        if event.error is not None:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=event.error, programmingLanguage="python"
            )
        job_facets: dict[str, Any] = {
            "jobType": job_type_job.JobTypeJobFacet(
                processingType="BATCH", integration="GYMFLOW", jobType="COMMAND"
            )
        }
        namespace = self.settings.namespace or os.environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_NAMESPACE
        return event_v2.RunEvent(
            eventType=event_v2.RunState[event.state],
            eventTime=event.time,
            run=event_v2.Run(runId=self._run_id, facets=run_facets),
            job=event_v2.Job(namespace=namespace, name=job_name(self.command), facets=job_facets),
            producer=PRODUCER,
            inputs=list(inputs.values()),
            outputs=list(outputs.values()),
        )


def _client(settings: OpenLineageConfig) -> Any:
    """The library's client: from the ``transport`` of ``settings`` (an HTTP one without a
    timeout gets ``timeout_s``), else from the library's own settings."""
    from openlineage.client import OpenLineageClient

    if not settings.transport:
        return OpenLineageClient()
    transport: dict[str, Any] = thaw(settings.transport)
    if transport.get("type") == "http":
        transport.setdefault("timeout", settings.timeout_s)
    return OpenLineageClient(config={"transport": transport})
