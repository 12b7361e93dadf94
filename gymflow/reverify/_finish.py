"""The end of a run: outputs sorted by key, the aggregate file (§2.7, §4 point 6), banner and
coverage (§2.11), the provenance record (provenance.md)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from gymflow import provenance, storage, threads
from gymflow.aggregate._metrics import group_metrics
from gymflow.aggregate._reduce import assign_labels, key_metrics_lines
from gymflow.aggregate._rows import RowFacts
from gymflow.aggregate._run import metrics_bytes
from gymflow.aggregate._scan import GroupRef
from gymflow.aggregate._server import MetricsBody
from gymflow.errors import InputError
from gymflow.gym_config import resources_server_url
from gymflow.reverify._collect import LAST, Collected, OutputRow, SortKey, output_row, sent_facts, sort_key
from gymflow.reverify._outputs import forget_kept
from gymflow.reverify._plan import Echo, ReverifyPlan, Tally
from gymflow.reverify._sent import SentRows, Span
from gymflow.run_context import RunContext

__all__ = ["COMMAND", "ReverifyOutcome", "finish"]

COMMAND = "eval reverify"


@dataclass
class ReverifyOutcome:
    """What a run did, for the CLI, the Prefect flow result and its artifact."""

    output: str
    sidecar: str
    metrics_path: str | None
    record_path: str
    rows_in_output: int
    tally: Tally
    entries: list[dict[str, Any]] = field(default_factory=list)
    unsafe_servers: list[str] = field(default_factory=list)


def _sort_file(path: str, start: int = 0, collected: Collected | None = None) -> int:
    """Rewrite a local JSONL file in key order (stable, blank lines dropped); the row count. The
    digest of a rewritten file is kept for the provenance record (:func:`provenance.remember`).

    Only the lines from byte ``start`` on are sorted: the bytes before it (what an ``--append``
    output held before this run) are kept as they are, in place (§3.10 point 3). With
    ``collected`` (the file holds exactly the lines gathered there) the file is not read first."""
    if not os.path.isfile(path):
        return 0
    spans: list[tuple[SortKey, int, int]] = []
    kept = 0
    if collected is not None:
        keys = collected.keys
        # Appended whole and in order (gymflow.reverify._order): nothing to rewrite.
        if keys == sorted(keys) and (not keys or _ends_with_newline(path, collected.size)):
            return len(keys)
        spans = [(key, *span) for key, span in zip(keys, collected.spans, strict=True)]
        offset = collected.size
    else:
        with open(path, "rb") as handle:
            offset = 0
            for line in handle:
                if offset < start:
                    kept += bool(line.strip())
                elif line.strip():
                    spans.append((_key_of_line(line), offset, len(line)))
                offset += len(line)
    ordered = sorted(spans, key=lambda span: span[0])
    whole = offset - start == sum(span[2] for span in spans)
    if ordered == spans and whole and (offset == start or _ends_with_newline(path, offset)):
        return kept + len(spans)

    def lines() -> Iterator[bytes]:
        with open(path, "rb", buffering=0) as source:
            fd = source.fileno()
            done = 0
            while done < start:
                block = os.pread(fd, min(storage.CHUNK_SIZE, start - done), done)
                if not block:
                    break
                done += len(block)
                yield block
            for _, begin, length in ordered:
                data = os.pread(fd, length, begin)
                yield data if data.endswith(b"\n") else data + b"\n"

    sha256, size = storage.write_atomic_lines(path, lines())
    provenance.remember(path, provenance.FileDigest(storage.to_uri(path), sha256, size))
    return kept + len(spans)


class _KeyFields(msgspec.Struct):
    task: Any = msgspec.field(default=None, name="_ng_task_index")
    rollout: Any = msgspec.field(default=None, name="_ng_rollout_index")


_KEY_DECODER = msgspec.json.Decoder(_KeyFields)


def _key_of_line(line: bytes) -> SortKey:
    """The sort key of one line (:func:`sort_key`); a line that is not a JSON object goes last.
    Only the two fields are decoded (a full parse of each row cost 3x as much)."""
    try:
        fields = _KEY_DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return LAST
    return sort_key(fields.task, fields.rollout)


def _ends_with_newline(path: str, end: int) -> bool:
    with open(path, "rb") as handle:
        handle.seek(max(end - 1, 0))
        return handle.read(1) == b"\n"


_ENTRY_BLOCKS: dict[str, type] = {
    "agent_metrics": dict,
    "key_metrics": dict,
    "group_level_metrics": list,
    "repeat_level_metrics": list,
}
"""The blocks of a metrics-file entry, after ``agent_ref``, in 0.7.0's order, and their JSON types."""


def _file_rows(plan: ReverifyPlan, sent: SentRows | None) -> Iterator[OutputRow | None]:
    """The metrics rows of the sorted output, read back from the file (the rows the server
    receives kept in ``sent``)."""
    with open(plan.paths.local_output, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                # Sorting put every line that is not a row last: its number is of the sorted file.
                raise InputError(
                    f"{plan.paths.output!r} holds a line that is not a JSON row ({exc}): "
                    f"{line[:60]!r}. Remove that line, or pass --overwrite to start over."
                ) from None
            if isinstance(row, dict):
                yield output_row(row, plan.routing, sent, f"{plan.paths.output!r} line {number}")


def _entries(plan: ReverifyPlan) -> tuple[list[dict[str, Any]], str | None]:
    """One entry per (run label, resources server), sorted by label then server (§4 point 6),
    and the warning line naming the servers whose own metrics are absent (None: none is).

    By default each entry is its resources server's ``/aggregate_metrics`` answer, as 0.7.0
    writes it (§3.10 point 1); with ``local_metrics``, or for a server that cannot answer,
    gymflow's local computation."""
    local = plan.options.local_metrics
    collected = plan.collected
    with ExitStack() as stack:
        sent = collected.sent if collected is not None else None
        if collected is None and not local:
            sent = SentRows()
            stack.callback(sent.close)
        return _entries_of(plan, collected, sent)


def _entries_of(
    plan: ReverifyPlan, collected: Collected | None, sent: SentRows | None
) -> tuple[list[dict[str, Any]], str | None]:
    facts: dict[tuple[str, str], list[RowFacts]] = {}
    rows: dict[tuple[str, str], list[Span]] = {}
    refs: dict[tuple[str, str], GroupRef] = {}
    gathered = (
        _file_rows(plan, sent)
        if collected is None
        else (collected.rows[index] for index in collected.order())
    )
    for each in gathered:
        if each is None:
            continue
        group = (each.label[0], each.server)
        refs.setdefault(group, GroupRef(each.label[0], each.environment, each.label[1]))
        if each.facts is not None:
            facts.setdefault(group, []).append(each.facts)
        if each.sent is not None:
            rows.setdefault(group, []).append(each.sent)
    servers_of: dict[str, set[str]] = {}
    for label, server in refs:
        servers_of.setdefault(label, set()).add(server)
    keyed = {(g[0] if len(servers_of[g[0]]) == 1 else f"{g[0]}/{g[1]}"): g for g in refs}
    labels = assign_labels({name: refs[group] for name, group in keyed.items()})
    absent: dict[str, str] = {}
    entries: list[tuple[tuple[str, str], dict[str, Any]]] = []
    for name, group in keyed.items():
        label = labels[name]
        entry: dict[str, Any] | None = None
        if sent is not None and group[1] not in absent:
            blocks, problem = _server_blocks(plan, group[1], sent.body(rows.get(group, [])))
            if blocks is None:
                absent[group[1]] = problem
            else:
                entry = {"agent_ref": {"name": label}, **blocks}
        if entry is None:
            # Rows gathered without their facts are all kept in ``sent`` (local metrics keep no row there).
            read = facts[group] if sent is None or group in facts else sent_facts(sent, rows.get(group, []))
            entry = {"agent_ref": {"name": label}, **group_metrics(read, label, None, None).blocks()}
        entries.append(((label, group[1]), entry))
    entries.sort(key=lambda pair: pair[0])
    return [entry for _, entry in entries], _absent_line(absent) if absent else None


def _started(plan: ReverifyPlan) -> Future[tuple[list[dict[str, Any]], str | None]]:
    """:func:`_entries` computed on a thread (the server asked for its metrics meanwhile)."""
    future: Future[tuple[list[dict[str, Any]], str | None]] = Future()

    def compute() -> None:
        try:
            future.set_result(_entries(plan))
        except BaseException as exc:  # noqa: BLE001 - raised where the result is taken
            future.set_exception(exc)

    threads.start(compute, name="gymflow-reverify-metrics")
    return future


def _absent_line(absent: Mapping[str, str]) -> str:
    named = ", ".join(f"{name!r} ({problem})" for name, problem in sorted(absent.items()))
    noun = "resources server" if len(absent) == 1 else "resources servers"
    return (
        f"aggregate metrics: {noun} {named} did not answer /aggregate_metrics; the metrics file holds "
        "gymflow's local metrics for its rows, without that server's own metrics (pass --local-metrics "
        "to compute them locally on purpose)"
    )


def _server_blocks(plan: ReverifyPlan, server: str, body: MetricsBody) -> tuple[dict[str, Any] | None, str]:
    """The entry blocks of a server's ``/aggregate_metrics`` answer, as 0.7.0 keeps them (its
    keys in their order, its number types; absent blocks empty, ``perf_summary`` and any other
    key dropped), or None and why the server gave none."""
    from gymflow.aggregate._server import ServerMetricsError, ServerSettings, post_metrics

    # A server no row of this run was sent to (e.g. --resume with nothing left) is asked at
    # its configured address, as 0.7.0 asks every configured server.
    url = (plan.urls.get(server) or resources_server_url(plan.gym_config, server)) if server else None
    if url is None:
        return None, "no address in the config"
    settings = ServerSettings(
        timeout_s=plan.options.verify_timeout_s, max_attempts=plan.options.verify_max_attempts
    )
    try:
        answer = post_metrics(server, url, body, settings)
    except ServerMetricsError as exc:
        prefix = f"aggregate metrics: resources server {server!r} failed: "
        return None, _shorten(str(exc).removeprefix(prefix))
    blocks: dict[str, Any] = {}
    for name, kind_of in _ENTRY_BLOCKS.items():
        value = answer.get(name)
        if value is None:
            value = kind_of()
        if not isinstance(value, kind_of):
            kind = "object" if kind_of is dict else "array"
            return None, f"its answer's {name} is not a JSON {kind}"
        blocks[name] = value
    return blocks, ""


def _shorten(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def banner(plan: ReverifyPlan, metrics: str | None, rows: int) -> list[str]:
    lines = [
        "Finished rollout collection! View results at:",
        f"        Re-verified rollouts: {plan.paths.output}",
        f"        Aggregate metrics: {metrics}",
    ]
    tally = plan.tally
    missing = tally.routed_failures
    if missing:
        expected = rows + missing
        routed = ", ".join(f"{count} {name}" for name, count in sorted(tally.failures.items()))
        lines.append(
            f"Rollouts missing from the score: {missing} of {expected} materialized "
            f"({routed} routed this run; see {plan.paths.sidecar})"
        )
        lines.append(f"Metrics cover: {rows} of {expected} rollouts")
    return lines


def _record(plan: ReverifyPlan, metrics: str | None, data: bytes | None, ctx: RunContext) -> None:
    options = plan.options
    roles: list[tuple[str, str | None]] = [
        ("materialized", options.materialized_inputs_jsonl_fpath),
        ("rollouts", options.rollouts_jsonl_fpath),
        ("manifest", options.atif_manifest_jsonl_fpath),
    ]
    if options.judge_failed_only and plan.source is not None:
        roles.append(("recovery_source", plan.source))
    roles.extend((f"config:{i}", path) for i, path in enumerate(options.config_paths))
    inputs = [
        (role, provenance.digest(path)) for role, path in roles if path is not None and storage.isfile(path)
    ]
    outputs = [provenance.digest(plan.paths.output), provenance.digest(plan.paths.sidecar)]
    if metrics is not None and data is not None:
        outputs.append(
            provenance.FileDigest(storage.to_uri(metrics), hashlib.sha256(data).hexdigest(), len(data))
        )
    verifier = {
        "resources_servers": [
            {
                "name": name,
                "url": storage.to_uri(plan.urls[name]),
                "reverify_mode": plan.modes.get(name),
                "config_sha256": plan.verifier_hashes[name],
                "settings": "launched" if name in plan.launched else "unverified",
            }
            for name in sorted(plan.urls)
        ]
    }
    parameters = {**options.parameters(), "gym_config": dict(plan.gym_config)}
    key = provenance.cache_key(COMMAND, options.parameters(), [(r, d.sha256) for r, d in inputs], verifier)
    record = provenance.build_record(
        command=COMMAND,
        cache_key=key,
        inputs=[d for _, d in inputs],
        outputs=outputs,
        parameters=parameters,
        orchestrator=ctx.orchestrator,
        config=ctx.config,
        started_at=plan.started_at,
        finished_at=provenance.timestamp(),
        verifier=verifier,
    )
    tally = plan.tally
    record["counts"] = {
        "selected": tally.selected,
        "skipped_by_resume": tally.skipped_by_resume,
        "verified": tally.verified,
        "succeeded": tally.succeeded,
        "failed": dict(sorted(tally.failures.items())),
        "no_persist": tally.no_persist,
        "duplicates": tally.duplicates,
        "unmatched": tally.unmatched,
        "seeded": tally.seeded,
    }
    provenance.write_record(plan.paths.record, record)


def finish(plan: ReverifyPlan, echo: Echo, ctx: RunContext | None = None) -> ReverifyOutcome:
    """Sort the outputs, aggregate, print the banner, write the record; releases the plan."""
    try:
        # With --append the rows the files held before this run stay as they were, first; only
        # the rows this run appended are put in key order after them.
        starts = plan.starts if plan.options.append else {}
        plan.close_files()
        early = None
        if not plan.options.disable_aggregation and plan.collected is not None and plan.collected.keys:
            # The metrics need only the gathered rows: computed while the files are sorted.
            early = _started(plan)
        rows = _sort_file(plan.paths.local_output, starts.get("output", 0), plan.collected)
        _sort_file(plan.paths.local_sidecar, starts.get("sidecar", 0))
        plan.paths.publish()
        # Hashed on a thread while the metrics are computed (and the server is asked for them).
        provenance.prefetch([plan.paths.output, plan.paths.sidecar])
        metrics: str | None = None
        data: bytes | None = None
        entries: list[dict[str, Any]] = []
        if plan.options.disable_aggregation:
            echo(
                "Skipping aggregate-metrics computation because disable_aggregation=True. "
                "Run `gymflow eval aggregate` after all shards finish to compute the global metrics."
            )
        else:
            echo("Computing aggregate metrics")
            if rows:
                entries, absent = early.result() if early is not None else _entries(plan)
                if absent is not None:
                    (plan.warn or echo)(absent)
                for entry in entries:
                    echo("")  # 0.7.0 prints a blank line before each "Key metrics for"
                    for line in key_metrics_lines(entry):
                        echo(line)
                data = metrics_bytes(entries)
                metrics = plan.paths.metrics
                storage.write_atomic(metrics, data)
        for line in banner(plan, metrics, rows):
            echo(line)
        if plan.unsafe_servers:
            from gymflow.reverify._guard import warning

            echo(warning(plan.unsafe_servers))
        _record(plan, metrics, data, ctx or RunContext())
        forget_kept(plan.paths)
        return ReverifyOutcome(
            output=plan.paths.output,
            sidecar=plan.paths.sidecar,
            metrics_path=metrics,
            record_path=plan.paths.record,
            rows_in_output=rows,
            tally=plan.tally,
            entries=entries,
            unsafe_servers=list(plan.unsafe_servers),
        )
    finally:
        plan.stack.close()
        plan.paths.cleanup()
