"""``prepare``: everything before the first ``/verify`` request (reverify.md §2.1-§2.9, §3.8, §4).

Order: read and route the selected rows (input errors first, nothing written), start the routed
servers if needed, the guard, output paths (``unsafe_``, same-file safety, fresh-run protection
or resume state), recovery seeding, then the work list. The returned :class:`ReverifyPlan` holds
the open output files and the launched servers until :func:`~gymflow.reverify.finish` or
:meth:`ReverifyPlan.abort`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import orjson

from gymflow import provenance, storage
from gymflow.errors import GymflowError, InputError
from gymflow.gym_config import Routing
from gymflow.reverify import _guard
from gymflow.reverify._client import ClientSettings, TransportFactory
from gymflow.reverify._collect import Collected, sort_key
from gymflow.reverify._inputs import Key, Materialized, build_body, read_materialized, sent_fields
from gymflow.reverify._migrate import migrate_invalid_judge_rows
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._order import Entry, KeyOrder
from gymflow.reverify._outputs import (
    Appender,
    keys_in,
    open_outputs,
    protect,
    refuse_same_file,
    report_duplicates,
    seed,
    stage_existing,
)
from gymflow.reverify._paths import OutputPaths, derived
from gymflow.reverify._results import alarm_line
from gymflow.reverify._resume import ResumeCounts, max_attempts, read_existing, resume_filter
from gymflow.reverify._select import (
    WORK_KEY,
    Selection,
    VerifierHashes,
    Work,
    check_multistage,
    select_native,
    work_of_items,
)
from gymflow.reverify._sent import SentRows
from gymflow.reverify.launch import Servers
from gymflow.verify_items import Item

__all__ = ["Echo", "Routed", "ReverifyPlan", "Tally", "prepare"]

Echo = Callable[[str], None]

TWO_SOURCES = (
    "WARNING: judge-failed-only recovery merges rewards from TWO sources — the successful rollouts in "
    "--rollouts were scored by the ORIGINAL run's verifier/judge, while the recovered rows are scored by "
    "the CURRENT verification config. If any crucial parameter (judge model, judge prompt/params, verifier "
    "config, etc.) "
    "changed between the original run and this recovery, the merged rewards are inconsistent. Ensure the "
    "verification config matches the original run."
)
NOTHING = "WARNING: Nothing to be re-verified."


@dataclass(slots=True)
class Routed:
    """One row ready to send: the item, its server's URL and its content key."""

    item: Item
    server: str
    url: str
    reverify_key: str


@dataclass
class Tally:
    """Counts of this run (the outcome, the banner and the provenance record use them)."""

    selected: int = 0
    skipped_by_resume: int = 0
    verified: int = 0
    succeeded: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    no_persist: int = 0
    duplicates: int = 0
    unmatched: int = 0
    seeded: int = 0

    def failed(self, failure_class: str) -> None:
        self.failures[failure_class] = self.failures.get(failure_class, 0) + 1

    @property
    def routed_failures(self) -> int:
        return sum(self.failures.values())


@dataclass
class ReverifyPlan:
    options: ReverifyOptions
    gym_config: Mapping[str, Any]
    routing: Routing
    paths: OutputPaths
    source: str | None
    materialized: Materialized | None
    items: list[Item]
    work: list[Work]
    urls: dict[str, str]
    modes: dict[str, str]
    verifier_hashes: dict[str, str]
    unsafe_servers: list[str]
    tally: Tally
    started_at: str
    transport: TransportFactory | None = None
    warn: Echo | None = None
    """Where warnings go (the CLI: ``Warning: ...`` on stderr); None: with the other lines."""
    resume: ResumeCounts | None = None
    stack: ExitStack = field(default_factory=ExitStack)
    files: dict[str, Appender] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    """Per file (``output``, ``sidecar``), its size when this run opened it: with ``--append``,
    the bytes before it are the user's and stay as they are."""
    launched: frozenset[str] = frozenset()
    """The routed servers gymflow launched (it vouches for their settings; the others' are unverified)."""
    collected: Collected | None = None
    """What ``finish`` needs of the output's rows, gathered as they are appended (None: it reads
    the file; see :mod:`gymflow.reverify._collect`)."""
    order: KeyOrder | None = None
    """Holds completed rows until they can be appended in key order (None: appended as they
    complete; see :mod:`gymflow.reverify._order`)."""

    @property
    def mode(self) -> str:
        return self.options.input_format

    @property
    def settings(self) -> ClientSettings:
        return ClientSettings(
            concurrency=self.options.num_samples_in_parallel,
            timeout_s=self.options.verify_timeout_s,
            max_attempts=self.options.verify_max_attempts,
        )

    def rows(self) -> Iterator[Routed]:
        """The rows still to verify, in work order, read lazily from the source."""
        for work, line in self.sources():
            yield self.routed(work, line)

    def sources(self) -> Iterator[tuple[Work, bytes | None]]:
        """Each row still to verify, in work order, with its source line (None in ATIF mode),
        read lazily and not parsed: :meth:`routed` builds the row. A local source is read line by
        line where the work says (a fresh run's work is in key order: :func:`_open_plan`); a remote
        one is streamed, in file order (its work keeps that order)."""
        if self.options.atif:
            for w in self.work:
                yield w, None
            return
        if not self.work or self.source is None or self.materialized is None:
            return
        if storage.is_local(self.source):
            path = storage.to_uri(self.source).removeprefix("file://")
            with open(path, "rb", buffering=0) as handle:
                fd = handle.fileno()
                for w in self.work:
                    line = os.pread(fd, w.length, w.position)
                    if len(line) != w.length:
                        raise InputError(f"{self.source!r} changed while reverify was reading it")
                    yield w, line
            return
        wanted = {w.position: w for w in self.work}
        for offset, line in storage.iter_lines(self.source):
            work = wanted.get(offset)
            if work is not None:
                yield work, line

    def routed(self, work: Work, line: bytes | None) -> Routed:
        """The row of ``work`` ready to send, from its source line (:meth:`sources`)."""
        if line is None:
            item = self.items[work.position]
        else:
            assert self.materialized is not None
            body = build_body(orjson.loads(self.materialized[work.key]), sent_fields(line, work.response_at))
            item = Item(work.task, work.rollout, body, "", "gym")
        return Routed(item, work.server, self.urls[work.server], work.reverify_key)

    def batches(self, size: int = 1000) -> Iterator[list[Routed]]:
        """The rows still to verify in batches of at most ``size``, read lazily from the source."""
        if size < 1:
            raise ValueError(f"batch size must be at least 1, not {size}")
        batch: list[Routed] = []
        for routed in self.rows():
            batch.append(routed)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch

    def append(self, which: str, line: bytes) -> None:
        handle = self.files[which]
        handle.write(line)

    def append_output(self, line: bytes, row: Mapping[str, Any] | None = None) -> None:
        """Append a verified row's JSONL ``line``, gathering the row (parsed from ``line`` when
        not given) for ``finish``."""
        self.files["output"].write(line)
        collected = self.collected
        if collected is not None and not collected.add(orjson.loads(line) if row is None else row, len(line)):
            self.collected = None

    def place(self, entry: Entry) -> None:
        """Append one completed row (destination, row, line; ``none`` appends nothing), in key
        order while :attr:`order` holds rows."""
        order = self.order
        if order is None:
            self.write(*entry)
            return
        row = entry[1]
        for due in order.add(sort_key(row.get("_ng_task_index"), row.get("_ng_rollout_index")), entry):
            self.write(*due)
        if order.given_up:
            self.order = None

    def release(self) -> None:
        """Append every held row (in key order); later rows are appended as they complete."""
        order, self.order = self.order, None
        if order is not None:
            for entry in order.release():
                self.write(*entry)

    def write(self, destination: str, row: Mapping[str, Any] | None, line: bytes) -> None:
        """Append one row's ``line`` where ``destination`` says (``none``: nowhere); an output
        row is gathered for ``finish`` (parsed from ``line`` when ``row`` is not given)."""
        if destination == "output":
            self.append_output(line, row)
        elif destination != "none":
            self.append(destination, line)

    def flush_file(self, which: str) -> None:
        self.files[which].flush()

    def flush(self) -> None:
        for handle in self.files.values():
            handle.flush()

    def close_files(self) -> None:
        """Close every file (each is closed even when another raises); raises the first failure."""
        files = list(self.files.values())
        self.files.clear()
        with ExitStack() as closing:
            for handle in files:
                closing.callback(handle.close)

    def abort(self) -> None:
        """Leave the output resumable: append held rows, flush, put staged files, stop launched
        servers."""
        try:
            try:
                self.release()
            finally:
                self.close_files()
            self.paths.publish()
        finally:
            self.stack.close()
            self.paths.cleanup()


def _select(
    options: ReverifyOptions,
    routing: Routing,
    hashes: VerifierHashes,
    materialized: Materialized | None,
    warn: Echo,
    exclude: set[Key],
) -> tuple[Selection, list[Item], str | None]:
    if options.atif:
        from gymflow.atif.source import atif_items

        assert options.atif_manifest_jsonl_fpath is not None
        items = atif_items(
            options.atif_manifest_jsonl_fpath,
            options.materialized_inputs_jsonl_fpath,
            limit=options.limit,
            allow_outside_manifest=options.allow_outside_manifest,
            warn=warn,
        )
        return work_of_items(items, routing, hashes), items, None
    assert options.rollouts_jsonl_fpath is not None
    source = options.rollouts_jsonl_fpath
    if options.judge_failed_only:
        source = derived(source)[0]
    assert materialized is not None
    selection = select_native(
        source,
        materialized,
        routing,
        hashes,
        limit=options.limit,
        recovery=options.judge_failed_only,
        exclude=exclude,
    )
    return selection, [], source


def prepare(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    *,
    warn: Echo | None = None,
    transport: TransportFactory | None = None,
) -> ReverifyPlan:
    """Select, route, guard and open the outputs; raises :class:`GymflowError` subclasses."""
    warn = warn or echo
    started = provenance.timestamp()
    routing = Routing.of(gym_config)
    servers = Servers(gym_config, reuse_server=options.reuse_server, search_dirs=options.search_dirs)
    hashes = VerifierHashes(gym_config, servers)
    materialized: Materialized | None = None
    exclude: set[Key] = set()
    if not options.atif:
        assert options.rollouts_jsonl_fpath is not None
        if options.judge_failed_only:
            check_multistage(
                derived(options.rollouts_jsonl_fpath)[0],
                options.rollouts_jsonl_fpath,
                options.retry_invalid_judge_responses,
            )
        materialized = read_materialized(options.materialized_inputs_jsonl_fpath, warn)
    if options.judge_failed_only:
        assert options.rollouts_jsonl_fpath is not None
        # §2.9 steps 3-5: output paths, the warning, then (opt-in) the migration of invalid judge rows.
        refuse_same_file(options, options.output_jsonl_fpath)
        protect(options.output_jsonl_fpath, derived(options.output_jsonl_fpath)[0], options, echo)
        echo(TWO_SOURCES)
        if options.retry_invalid_judge_responses:
            migrate_invalid_judge_rows(options.rollouts_jsonl_fpath, derived(options.rollouts_jsonl_fpath)[0])
        # Keys already in the output once seeding has run: the output's and the successes'.
        exclude = keys_in(options.rollouts_jsonl_fpath)
        exclude |= keys_in(options.output_jsonl_fpath)
    selection, items, source = _select(options, routing, hashes, materialized, warn, exclude)
    if selection.fallback_used:
        message = routing.fallback_warning("reverify")
        if message:
            warn(message)
    stack = ExitStack()
    if materialized is not None:
        stack.callback(materialized.close)
    from gymflow import lifeline

    try:
        plan = _open_plan(
            options,
            gym_config,
            echo,
            warn,
            routing,
            hashes,
            materialized,
            selection,
            items,
            source,
            started,
            stack,
            servers,
        )
        plan.transport = transport
        plan.warn = warn
        # On Ctrl-C the CLI exits from its signal handler: publish what a remote output holds so far.
        stack.callback(lifeline.add_cleanup(plan.paths.publish))
    except BaseException:
        stack.close()
        raise
    return plan


def _open_plan(
    options: ReverifyOptions,
    gym_config: Mapping[str, Any],
    echo: Echo,
    warn: Echo,
    routing: Routing,
    hashes: VerifierHashes,
    materialized: Materialized | None,
    selection: Selection,
    items: list[Item],
    source: str | None,
    started: str,
    stack: ExitStack,
    servers: Servers,
) -> ReverifyPlan:
    names = sorted({w.server for w in selection.work})
    urls = stack.enter_context(
        _guard.running_servers(
            gym_config, names, echo=echo, timeout_s=options.server_start_timeout_s, servers=servers
        )
    )
    for name in names:
        if name not in urls:
            raise GymflowError(
                f"reverify: resources server {name!r} has no host/port or base_url in the config"
            )
    modes: dict[str, str] = {}
    if not options.judge_failed_only:
        modes = _guard.read_modes(
            urls,
            names,
            attempts=options.verify_max_attempts,
            timeout_s=min(options.verify_timeout_s, 30.0),
        )
    bad = _guard.unsafe(modes)
    if bad and options.atif:
        raise _guard.GuardError(_guard.atif_refusal(bad))
    if options.atif:
        from gymflow.atif.preflight import preflight

        preflight(gym_config, [(items[w.position].body, w.server) for w in selection.work])
    if bad and not options.force:
        raise _guard.GuardError(_guard.refusal(bad))
    if bad:
        echo(_guard.warning(bad))
    paths = OutputPaths.of(options.output_jsonl_fpath, unsafe=bool(bad))
    refuse_same_file(options, paths.output)
    if not options.judge_failed_only:  # recovery prepared its output paths before migrating
        protect(paths.output, paths.sidecar, options, echo)
    tally = Tally(duplicates=sum(selection.duplicates.values()), unmatched=len(selection.unmatched))
    plan = ReverifyPlan(
        options=options,
        gym_config=gym_config,
        routing=routing,
        paths=paths,
        source=source,
        materialized=materialized,
        items=items,
        work=selection.work,
        urls={name: urls[name] for name in names},
        modes=modes,
        verifier_hashes={name: hashes(name) for name in names},
        launched=frozenset(name for name in names if servers.launched(name)),
        unsafe_servers=bad,
        tally=tally,
        started_at=started,
        stack=stack,
    )
    if options.resume_from_cache or options.append:
        stage_existing(paths, echo)
    unmatched = selection.unmatched
    if options.resume_from_cache and not options.judge_failed_only:
        unmatched = _resume(plan, unmatched, echo, warn)
    plan.files = open_outputs(paths, warn)
    plan.starts = {name: handle.start for name, handle in plan.files.items()}
    if options.judge_failed_only:
        assert options.rollouts_jsonl_fpath is not None
        tally.seeded = seed(
            paths.local_output, options.rollouts_jsonl_fpath, lambda line: plan.append("output", line)
        )
        plan.flush()
        echo(f"Recovery mode: seeded {tally.seeded} successful rollout(s) into {paths.output}")
        if options.resume_from_cache:
            # As 0.7.0: the cache is read once the successes are seeded (they count as done).
            unmatched = _resume(plan, unmatched, echo, warn)
    report_duplicates(selection.duplicates, source, echo)
    tally.selected = len(plan.work) + tally.skipped_by_resume
    for row in unmatched:
        plan.append("sidecar", orjson.dumps(row) + b"\n")
        tally.failed("unmatched_rollout")
        echo(alarm_line(row))
    plan.flush()
    if plan.files["output"].size == 0:
        sent = None
        if not options.local_metrics and not options.disable_aggregation:
            sent = SentRows()
            stack.callback(sent.close)
        plan.collected = Collected(routing, sent)
        if source is None or storage.is_local(source):
            plan.work.sort(key=WORK_KEY)
        keys = list(map(WORK_KEY, plan.work))
        if all(a <= b for a, b in itertools.pairwise(keys)):
            plan.order = KeyOrder(keys, options.num_samples_in_parallel)
    if not plan.work:
        echo(NOTHING)
    if "num_samples_in_parallel" in options.model_fields_set:
        # As 0.7.0: only for a bound the user set (gymflow's default bound goes unsaid).
        echo(f"Verifying with {options.num_samples_in_parallel} concurrent requests")
    return plan


def _resume(
    plan: ReverifyPlan, unmatched: list[dict[str, Any]], echo: Echo, warn: Echo
) -> list[dict[str, Any]]:
    """§2.8 with §4 point 4; returns the unmatched rows still to record."""
    options, paths = plan.options, plan.paths
    existing = read_existing(paths.local_output, paths.local_sidecar)
    if not existing.found:
        echo("Skipping resume_from_cache because cache paths don't exist!")
    cap = max_attempts(echo)
    todo, counts = resume_filter(
        [(w.key, w.reverify_key) for w in plan.work],
        existing,
        atif=options.atif,
        retry_terminal_timeouts=options.retry_terminal_timeouts,
        cap=cap,
        output_name=paths.output,
    )
    if counts.legacy_matches and not options.judge_failed_only:
        warn(
            f"{counts.legacy_matches} row(s) of {paths.output!r} carry no _ng_reverify_key; "
            "matched them by (task, rollout) only."
        )
    plan.tally.skipped_by_resume = len(plan.work) - len(todo)
    plan.work = [plan.work[i] for i in todo]
    plan.resume = counts
    for line in counts.lines():
        echo(line)
    return [row for row in unmatched if row["_ng_reverify_key"] not in existing.sidecar_keys]
