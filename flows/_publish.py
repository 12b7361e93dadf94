"""What every flow run publishes to Prefect: the orchestrator block of its provenance records, a
markdown summary, a table of its inputs with their SHA-256, and a link to every report.

Artifacts are keyed by the command and the run location, so the Artifacts page keeps one history
per run directory. A browser opens no ``file://`` link from a web page, so links point at the page
of ``gymflow view`` that shows each report (http on 127.0.0.1, :data:`gymflow.view.DEFAULT_PORT`),
with the report's absolute URI beside it as text.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from prefect import get_client
from prefect.artifacts import Artifact, LinkArtifact, MarkdownArtifact, ProgressArtifact, TableArtifact
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.actions import ArtifactCreate, ArtifactUpdate
from prefect.context import FlowRunContext
from prefect.runtime import flow_run

from gymflow import provenance, storage, view


def orchestrator() -> dict[str, Any]:
    """The ``orchestrator`` block of a provenance record written inside this flow run."""
    return {
        "kind": "prefect",
        "flow_run_id": flow_run.get_id(),
        "flow_run_url": flow_run.get_flow_run_ui_url(),
    }


def artifact_key(command: str, location: str) -> str:
    """``<command>-<location name>-<8 hex of its URI>``: lowercase, digits and dashes only."""
    uri = storage.to_uri(location)
    name = re.sub(r"[^a-z0-9]+", "-", storage.name(uri.rstrip("/")).lower()).strip("-") or "run"
    return f"{command}-{name[:40]}-{hashlib.sha256(uri.encode()).hexdigest()[:8]}"


def publish(
    command: str,
    location: str,
    summary_markdown: str,
    inputs: Sequence[provenance.FileDigest],
    reports: Mapping[str, str],
    *,
    tag: bool = True,
) -> None:
    """The run's tags (unless ``tag`` is False: a step's artifacts inside ``eval post``'s run) and
    its three artifact kinds (also for a cached run: it links the reports it found)."""
    key = artifact_key(command, location)
    uris = {label: storage.to_uri(url) for label, url in reports.items()}
    links = "\n".join(f"- {label}: [view]({view.view_url(uri)}) `{uri}`" for label, uri in uris.items())
    artifacts: list[Artifact] = [
        MarkdownArtifact(
            markdown=f"{summary_markdown}\n\n{links}\n\n{view_note(uris.values())}\n",
            key=f"{key}-summary",
            description=command,
        )
    ]
    if inputs:
        artifacts.append(
            TableArtifact(
                table=[{"uri": item.uri, "sha256": item.sha256, "bytes": item.bytes} for item in inputs],
                key=f"{key}-inputs",
                description=f"{command}: inputs and their SHA-256",
            )
        )
    for label, uri in uris.items():
        slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
        artifacts.append(
            LinkArtifact(
                link=view.view_url(uri),
                link_text=label,
                key=f"{key}-link-{slug}"[:120],
                description=f"{command}: {label}, `{uri}`. {view_note([uri])}",
            )
        )
    with _api() as client:
        if tag:
            _tag(client, command, location)
        for artifact in artifacts:
            _create(client, artifact)


@contextmanager
def _api() -> Iterator[SyncPrefectClient]:
    """The flow run's own client, else one of its own. Prefect's ``create_*_artifact`` functions
    make a new client, and a new connection, for every artifact."""
    context = FlowRunContext.get()
    if context is not None and isinstance(context.client, SyncPrefectClient):
        yield context.client
        return
    with get_client(sync_client=True) as client:
        yield client


def _create(client: SyncPrefectClient, artifact: Artifact) -> UUID:
    """What ``artifact.create()`` sends, on ``client``, for the current flow run."""
    run_id = flow_run.get_id()
    request = ArtifactCreate(
        type=artifact.type,
        key=artifact.key,
        description=artifact.description,
        flow_run_id=UUID(run_id) if run_id is not None else None,
        data=artifact.format(_sync=True),  # type: ignore[call-arg]
    )
    return client.create_artifact(artifact=request).id


def view_note(uris: Iterable[str]) -> str:
    """The one line that says the links open while ``gymflow view`` runs for the reports' runs."""
    runs = " or ".join(f"`gymflow view {run}`" for run in dict.fromkeys(storage.parent(uri) for uri in uris))
    return f"Links open while {runs} is running (127.0.0.1:{view.DEFAULT_PORT})."


def _tag(client: SyncPrefectClient, command: str, location: str) -> None:
    """Tag the flow run with the command and the run's name (the directory of ``location``).

    Set on the run itself, not through ``prefect.tags``: every task run would inherit those and
    ask the server for a concurrency slot of each tag before it starts (seconds per step)."""
    run_id = flow_run.get_id()
    if run_id is None:
        return
    uri = storage.to_uri(location).rstrip("/")
    run_name = storage.name(storage.parent(uri) if uri.endswith((".json", ".jsonl")) else uri)
    tags = sorted({*flow_run.get_tags(), command, run_name})
    client.update_flow_run(UUID(run_id), tags=tags)


def record_inputs(record_url: str) -> list[provenance.FileDigest]:
    """The inputs a provenance record lists (what a cached run publishes)."""
    record = provenance.read_record(record_url) or {}
    out: list[provenance.FileDigest] = []
    for entry in record.get("inputs", []):
        if isinstance(entry, Mapping) and {"uri", "sha256", "bytes"} <= entry.keys():
            out.append(provenance.FileDigest(str(entry["uri"]), str(entry["sha256"]), int(entry["bytes"])))
    return out


class RunProgress:
    """A Prefect progress artifact for a flow run of several units of work (ranges, shards,
    batches), advanced as each completes; a run of one unit creates none. It is written when it
    is created, at most once every ``interval_s`` after that, and when the work is complete:
    each write is a request the run's thread waits for, and the server's CPU is the workers'."""

    def __init__(self, command: str, location: str, total: float, interval_s: float = 1.0) -> None:
        self.total = max(total, 1.0)
        self.done = 0.0
        self.id: Any = None
        self.key = f"{artifact_key(command, location)}-progress"
        self.enabled = total > 1
        self.interval_s = interval_s
        self._written_at = 0.0

    def advance(self, amount: float) -> None:
        if not self.enabled:
            return
        self.done = min(self.done + amount, self.total)
        now = time.monotonic()
        if self.id is not None and self.done < self.total and now - self._written_at < self.interval_s:
            return
        self._written_at = now
        percent = round(100.0 * self.done / self.total, 1)
        with _api() as client:
            if self.id is None:
                progress = ProgressArtifact(
                    progress=percent, key=self.key, description="progress of this run"
                )
                self.id = _create(client, progress)
            else:
                data = ProgressArtifact(progress=percent).format(_sync=True)  # type: ignore[call-arg]
                client.update_artifact(self.id, ArtifactUpdate(data=data))
