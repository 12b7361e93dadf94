"""``gymflow serve`` and ``gymflow notify``: start ``eval post`` automatically when an evaluation
finishes.

``serve`` runs the ``post-run`` deployment (and, with ``--sweep``, a ``post-sweep`` schedule) in
this process against the Prefect API (the local server by default) until Ctrl-C. ``post-run``
starts when a ``gymflow.eval.completed`` event arrives (its resource id is the run URI, passed as
the ``run`` parameter), and, with ``--evaluation-flow NAME``, when a flow run of that flow
completes (its ``--run-parameter`` names the run). ``notify RUN`` emits the event, for shell
scripts and schedulers that finish an evaluation.

Its deployments are named ``*-serve`` (``post-run/post-serve``, ``post-sweep/sweep-serve``,
``gymflow-command/command-serve``), apart from those ``deployments/prefect.yaml`` declares for a
work pool, so neither replaces the other. When serve stops (Ctrl-C, SIGTERM or an error) it
pauses them, which removes the sweep's schedule and the runs it had scheduled.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from gymflow import lifeline, storage
from gymflow.config import GymflowConfig, ServeConfig
from gymflow.errors import GymflowError, UsageError

if TYPE_CHECKING:  # Prefect is imported when serve runs, not by the parser
    from prefect.client.orchestration import SyncPrefectClient

POST = "post-serve"
"""serve's deployment of ``post-run`` (prefect.yaml's is ``post``)."""
SWEEP = "sweep-serve"
"""serve's deployment of ``post-sweep`` (prefect.yaml's is ``sweep``)."""
COMMAND = "command-serve"
"""serve's deployment of ``gymflow-command`` (prefect.yaml declares one per command)."""
SCHEDULER_RACE_S = 0.3
"""How long stopping serve waits before deleting the schedule's waiting runs a second time
(:func:`unschedule`; the cleanup after Ctrl-C has about a second)."""

# flag destination -> key of config/serve.yaml
_FLAGS = {
    "config": "config_paths",
    "sweep": "sweep",
    "sweep_interval": "sweep_interval",
    "evaluation_flow": "evaluation_flow",
    "run_parameter": "run_parameter",
    "verbose": "verbose",
}


def register(groups: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = groups.add_parser(
        "serve",
        help="run eval post whenever an evaluation finishes (serves Prefect deployments)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    serve.add_argument("--config", action="append", metavar="PATH", help="Gym config YAML")
    serve.add_argument("--sweep", metavar="PREFIX", help="also sweep PREFIX for stale runs on a schedule")
    serve.add_argument("--sweep-interval", type=float, metavar="S", help="seconds (3600)")
    serve.add_argument("--evaluation-flow", metavar="NAME", help="also start post when flow NAME completes")
    serve.add_argument(
        "--run-parameter",
        metavar="P",
        help="the evaluation flow's parameter holding the run URI (default output_dir)",
    )
    serve.add_argument("-v", "--verbose", action="store_true", default=None, help="show Prefect's logs")
    serve.set_defaults(handler=partial(run_serve, serve))

    notify = groups.add_parser(
        "notify",
        help="announce that an evaluation finished (emits gymflow.eval.completed)",
        description="Emit the gymflow.eval.completed event for RUN (resource id = RUN's URI), which "
        "starts the post-run deployment of 'gymflow serve' or a deployed prefect.yaml.",
    )
    notify.add_argument("run", metavar="RUN", help="the run directory, local or any fsspec URL")
    notify.set_defaults(handler=partial(run_notify, notify))


def _prepare(settings: GymflowConfig, verbose: bool) -> None:
    from gymflow.cli.setup import configure_storage, prepare_prefect

    configure_storage(settings)
    prepare_prefect(settings, verbose)


def serve_config(args: argparse.Namespace) -> tuple[GymflowConfig, ServeConfig]:
    """``config/serve.yaml`` with the flags (its overrides are eval post's, not its own)."""
    from gymflow.cli.setup import flags_given
    from gymflow.conf.compose import compose

    composed = compose("serve", flags=flags_given(args, _FLAGS))
    return composed.settings, composed.validate(ServeConfig)


def deployments(config: ServeConfig, extras: Sequence[str]) -> list[Any]:
    """The deployments ``serve`` runs, with their triggers and schedule."""
    from prefect.events import DeploymentEventTrigger, DeploymentTriggerTypes, TriggerTypes

    from gymflow.flows.deployments import EVENT, gymflow_command, post_run, post_sweep

    common = {"config": list(config.config_paths), "overrides": list(extras)}
    triggers: list[DeploymentTriggerTypes | TriggerTypes] = [
        DeploymentEventTrigger(
            name="evaluation completed",
            expect={EVENT},
            match={"prefect.resource.id": "*"},
            parameters={"run": "{{ event.resource.id }}", **common},
        )
    ]
    if config.evaluation_flow:
        triggers.append(
            DeploymentEventTrigger(
                name=f"{config.evaluation_flow} completed",
                expect={"prefect.flow-run.Completed"},
                match_related={
                    "prefect.resource.role": "flow",
                    "prefect.resource.name": config.evaluation_flow,
                },
                parameters={"run": f"{{{{ flow_run.parameters.{config.run_parameter} }}}}", **common},
            )
        )
    out = [
        post_run.to_deployment(name=POST, triggers=triggers, parameters=common, concurrency_limit=1),
        # Any command on demand, e.g. judge recovery: argv = [eval, reverify, --judge-failed-only, ...]
        gymflow_command.to_deployment(name=COMMAND, parameters={"argv": ["--help"]}),
    ]
    if config.sweep:
        out.append(
            post_sweep.to_deployment(
                name=SWEEP,
                interval=timedelta(seconds=config.sweep_interval),
                concurrency_limit=1,  # a sweep still running when the next is due: the next waits
                parameters={"prefix": config.sweep, **common},
            )
        )
    return out


def run_serve(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    flags = [item for item in extras if item.startswith("-")]
    if flags:
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    try:
        settings, config = serve_config(args)
        # The overrides are eval post's: a typo in them is refused now, not in every run it starts.
        from gymflow.conf.options import compose_post

        compose_post({"config_paths": list(config.config_paths)} if config.config_paths else {}, extras)
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    _prepare(settings, config.verbose)
    from prefect import get_client
    from prefect.runner import Runner

    from gymflow.flows._runtime import prefect_api

    try:
        with prefect_api() as url, get_client(sync_client=True) as client:
            runner = Runner()
            # Called outside an event loop, add_deployment registers at once and returns the id.
            served = {cast(UUID, runner.add_deployment(d)): d for d in deployments(config, extras)}
            # The scheduled one first: Ctrl-C and SIGTERM end this process at once
            # (gymflow.cli.interrupt), and its cleanups have about a second.
            ids = sorted(served, key=lambda deployment_id: not served[deployment_id].schedules)
            remove = lifeline.add_cleanup(partial(unschedule, client, ids))
            try:
                print(
                    f"Serving eval post deployments against {url.removesuffix('/api')} (Ctrl-C stops)",
                    flush=True,
                )
                import asyncio  # here: every command imports this module to register its flags

                asyncio.run(runner.start())
            finally:
                remove()
                try:
                    unschedule(client, ids)
                except Exception as exc:  # noqa: BLE001 - the API went away: one line, not a traceback
                    print(f"Warning: the served deployments could not be paused: {exc}", file=sys.stderr)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def unschedule(client: SyncPrefectClient, deployment_ids: Sequence[UUID]) -> None:
    """Pause the deployments ``serve`` made, in order (Prefect then deletes the runs their schedules
    made that have not started), and delete the schedule-made runs a pause leaves: those waiting
    for the deployment's concurrency slot. Nothing is left scheduled once serve has stopped; runs a
    trigger started stay, for the next serve."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    for deployment_id in deployment_ids:
        client.request("POST", "/deployments/{id}/pause_deployment", path_params={"id": deployment_id})
    # Twice: Prefect's scheduler reads the deployments to schedule and inserts their runs in two
    # transactions, so runs of a deployment it read just before the pause can land just after it.
    for attempt in range(2):
        if attempt:
            time.sleep(SCHEDULER_RACE_S)
        waiting = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=list(deployment_ids))),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
            ),
        )
        for flow_run in waiting:
            if flow_run.auto_scheduled:
                client.delete_flow_run(flow_run.id)


def run_notify(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.conf.compose import compose
    from gymflow.conf.overrides import split_overrides

    try:
        settings = compose("notify", overrides=split_overrides(extras)).settings
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    _prepare(settings, verbose=False)
    from prefect.events import emit_event

    from gymflow.flows._runtime import prefect_api
    from gymflow.flows.deployments import EVENT

    uri = storage.to_uri(args.run)
    try:
        with prefect_api():
            event = emit_event(
                EVENT, resource={"prefect.resource.id": uri, "prefect.resource.name": storage.name(uri)}
            )
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if event is None:
        print("Error: the event could not be emitted (no Prefect API)", file=sys.stderr)
        return 1
    print(f"Emitted {EVENT} for {uri} (event {event.id})")
    return 0
