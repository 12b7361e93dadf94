"""``gymflow serve`` and ``gymflow notify``: start ``eval post`` automatically when an evaluation
finishes.

``serve`` runs the ``post-run`` deployment (and, with ``--sweep``, a ``post-sweep`` schedule) in
this process against the Prefect API (the local server by default) until Ctrl-C. ``post-run``
starts when a ``gymflow.eval.completed`` event arrives (its resource id is the run URI, passed as
the ``run`` parameter), and, with ``--evaluation-flow NAME``, when a flow run of that flow
completes (its ``--run-parameter`` names the run). ``notify RUN`` emits the event, for shell
scripts and schedulers that finish an evaluation.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from gymflow import storage
from gymflow.config import GymflowConfig, ServeConfig
from gymflow.errors import GymflowError, UsageError

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
    from gymflow.cli.config import configure_storage, prepare_prefect

    configure_storage(settings)
    prepare_prefect(settings, verbose)


def serve_config(args: argparse.Namespace) -> tuple[GymflowConfig, ServeConfig]:
    """``config/serve.yaml`` with the flags (its overrides are eval post's, not its own)."""
    from gymflow.cli.config import compose, flags_given

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
        post_run.to_deployment(name="post", triggers=triggers, parameters=common, concurrency_limit=1),
        # Any command on demand, e.g. judge recovery: argv = [eval, reverify, --judge-failed-only, ...]
        gymflow_command.to_deployment(name="command", parameters={"argv": ["--help"]}),
    ]
    if config.sweep:
        out.append(
            post_sweep.to_deployment(
                name="sweep",
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
    except UsageError as exc:
        parser.error(str(exc))
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    _prepare(settings, config.verbose)
    from prefect import serve

    from gymflow.flows._runtime import prefect_api

    try:
        with prefect_api() as url:
            print(
                f"Serving eval post deployments against {url.removesuffix('/api')} (Ctrl-C stops)", flush=True
            )
            serve(*deployments(config, extras), print_starting_message=False)
    except GymflowError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def run_notify(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: Sequence[str]) -> int:
    from gymflow.cli.config import compose
    from gymflow.cli.gym_config import split_overrides

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
