"""Flows that deployments run: plain JSON parameters (a run URI, config files, overrides), the
options built exactly as the CLI builds them, then the command's own flow as a subflow.

``gymflow serve`` serves them with their triggers (a ``gymflow.eval.completed`` event, the
completion of a configured evaluation flow, a sweep schedule); ``deployments/prefect.yaml``
declares the same for a work pool.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from prefect import flow

from gymflow import provenance, storage
from gymflow.flows.post import post_flow
from gymflow.run_context import RunContext

EVENT = "gymflow.eval.completed"
"""The event ``gymflow notify RUN`` emits; its resource id is the run's URI."""


def _context() -> RunContext:
    """gymflow's shared config as a run context (what each CLI command builds first)."""
    from gymflow.conf.compose import compose, run_context

    return run_context(compose("gymflow"))


@flow(name="post-run", log_prints=False)
def post_run(run: str, config: Sequence[str] = (), overrides: Sequence[str] = ()) -> list[str]:
    """``gymflow eval post RUN`` as a deployment; returns the console and summary lines."""
    from gymflow.conf.compose import run_context
    from gymflow.conf.options import compose_options
    from gymflow.parallel import default_workers

    composed, options = compose_options(run, list(config), list(overrides))
    lines: list[str] = []
    result = post_flow(
        options=options,
        ctx=run_context(composed),
        workers=options.health.workers or default_workers(),
        echo=lines.append,
    )
    return [*lines, *result.summary.lines()]


def is_stale(run: str) -> bool:
    """Whether a run's health reports are missing or no longer match what they were made from."""
    record = provenance.record_path(storage.join(run, "quality_summary.json"))
    if not storage.isfile(record):
        return True
    return any(check.status != "ok" for check in provenance.verify(record))


def candidate_runs(prefix: str) -> list[str]:
    """Directories directly under ``prefix`` holding shards or a rollouts file."""
    out = []
    for entry in storage.glob(storage.join(prefix, "*")):
        if not storage.isdir(entry):
            continue
        if storage.isfile(storage.join(entry, "rollouts.jsonl")) or storage.glob(
            storage.join(entry, "shards", "*.jsonl")
        ):
            out.append(entry)
    return sorted(out)


@flow(name="post-sweep", log_prints=False)
def post_sweep(prefix: str, config: Sequence[str] = (), overrides: Sequence[str] = ()) -> list[str]:
    """Run ``post`` for every run under ``prefix`` whose reports are missing or stale."""
    with _context().active():
        stale = [run for run in candidate_runs(prefix) if is_stale(run)]
    for run in stale:
        post_run(run, config, overrides)
    return stale


class CommandFailed(Exception):
    """A ``gymflow`` command line run by the ``gymflow-command`` deployment exited non-zero; its
    text is the command's own last error line."""


@flow(name="gymflow-command", log_prints=True)
def gymflow_command(argv: Sequence[str]) -> int:
    """Any ``gymflow`` command line as a deployment (health-check, aggregate, reverify, judge
    recovery), in a process of its own (its orchestrated command is a flow run of its own). A
    command that fails ends this run Failed with the command's one-line error as the message."""
    command = [sys.executable, "-m", "gymflow.cli", *argv]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if done.stdout:
        print(done.stdout, end="")
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {done.returncode}"
        raise CommandFailed(f"gymflow {' '.join(argv)}: {reason}")
    return done.returncode
