"""`gymflow provenance show|verify PATH`: read and check the record behind a report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from gymflow import provenance, storage
from gymflow.errors import GymflowError, InputError

Handler = Callable[[argparse.Namespace, Sequence[str]], int]


def register(groups: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``provenance`` group with its ``show`` and ``verify`` commands."""
    group = groups.add_parser("provenance", help="show or check the provenance record of a report")
    commands = group.add_subparsers(dest="command", required=True)
    path_help = "a report, or its <stem>.provenance.json record (local path or any fsspec URL)"

    show = commands.add_parser("show", help="print the record of a report")
    show.add_argument("path", metavar="PATH", help=path_help)
    show.set_defaults(handler=_with_parser(show, _show))

    verify = commands.add_parser(
        "verify",
        help="re-hash every file a record lists: ok, changed or missing (exit 1 unless all ok)",
    )
    verify.add_argument("path", metavar="PATH", help=path_help)
    verify.set_defaults(handler=_with_parser(verify, _verify))


def _with_parser(parser: argparse.ArgumentParser, run: Callable[[str], int]) -> Handler:
    def handler(args: argparse.Namespace, extras: Sequence[str]) -> int:
        if extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        try:
            return run(args.path)
        except GymflowError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 1

    return handler


def _show(path: str) -> int:
    record_url = find_record(path)
    record = provenance.read_record(record_url)
    assert record is not None  # find_record only returns existing records
    print(json.dumps(record, indent=2, ensure_ascii=False))
    orchestrator = record.get("orchestrator") or {}
    if orchestrator.get("kind") == "prefect" and orchestrator.get("flow_run_url"):
        print(f"Flow run: {orchestrator['flow_run_url']} (open it with the UI running: gymflow ui)")
    return 0


def _verify(path: str) -> int:
    checks = provenance.verify(find_record(path))
    for check in checks:
        print(f"{check.status}  {check.uri}")
    return 0 if all(check.status == "ok" for check in checks) else 1


def find_record(path: str) -> str:
    """The record for ``path``: itself if it is a record, else ``<stem>.provenance.json`` beside
    it, else the one record in its directory that lists it as an output."""
    if storage.name(path).endswith(provenance.RECORD_SUFFIX):
        if not storage.isfile(path):
            raise InputError(f"{storage.to_uri(path)}: no such provenance record")
        return path
    beside = provenance.record_path(path)
    if storage.isfile(beside):
        return beside
    directory = storage.parent(path)
    wanted_uri, wanted_name = storage.to_uri(path), storage.name(path)
    by_name: list[str] = []
    for candidate in storage.glob(storage.join(directory, "*" + provenance.RECORD_SUFFIX)):
        try:
            record = provenance.read_record(candidate)
        except InputError:
            continue
        uris = [entry["uri"] for entry in record["outputs"]] if record else []
        if wanted_uri in uris:
            return candidate
        if any(storage.name(uri) == wanted_name for uri in uris):
            by_name.append(candidate)
    # A directory moved since the record was written still matches by file name, if unambiguously.
    if len(by_name) == 1:
        return by_name[0]
    raise InputError(
        f"{storage.to_uri(path)}: no provenance record found (looked for {storage.name(beside)} "
        f"and for a *{provenance.RECORD_SUFFIX} in {directory} listing it as an output)"
    )
