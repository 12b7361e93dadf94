"""Output-side steps of ``prepare``: same-file safety (§1 G), fresh-run protection (§2.7), staging
for ``--resume`` (§0 G), the keys a file holds, recovery seeding (§2.9 step 6), the duplicate line."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import orjson

from gymflow import storage
from gymflow.errors import GymflowError, InputError
from gymflow.reverify._inputs import Key, key_of
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._paths import OutputPaths, delete, download

__all__ = [
    "keys_in",
    "open_outputs",
    "protect",
    "refuse_same_file",
    "report_duplicates",
    "seed",
    "stage_existing",
]

Echo = Callable[[str], None]


def refuse_same_file(options: ReverifyOptions, output: str) -> None:
    """Refuse an ``--output`` that is one of the inputs (except recovery appending onto ``--rollouts``)."""
    target = storage.to_uri(output)
    named = {
        "--rollouts": options.rollouts_jsonl_fpath,
        "--inputs": options.materialized_inputs_jsonl_fpath,
        "--atif-manifest": options.atif_manifest_jsonl_fpath,
    }
    for flag, path in named.items():
        if path is None or storage.to_uri(path) != target:
            continue
        if flag == "--rollouts" and options.judge_failed_only and options.append:
            continue
        raise GymflowError(
            f"--output {output!r} is the same file as {flag}; refusing to overwrite an input. "
            "Choose another --output."
        )


def protect(output: str, sidecar: str, options: ReverifyOptions, echo: Echo) -> None:
    """Fresh-run protection (§2.7): delete with ``--overwrite``, else refuse."""
    if options.resume_from_cache or options.append:
        return
    for url in (output, sidecar):
        if storage.exists(url):
            if not options.overwrite:
                raise GymflowError(
                    f"Output file already exists: {url!r}. Pass --overwrite to delete it and start fresh, "
                    "or --resume to continue from it."
                )
            delete(url)
            echo(f"Deleted existing output file: {url!r}")


def stage_existing(paths: OutputPaths) -> None:
    """For a remote output, bring the existing output and sidecar into the staging directory."""
    if not paths.remote:
        return
    for url, local in ((paths.output, paths.local_output), (paths.sidecar, paths.local_sidecar)):
        if storage.isfile(url):
            download(url, local)


def open_outputs(paths: OutputPaths) -> dict[str, IO[bytes]]:
    """The local output and sidecar opened for appending (the sidecar always exists afterwards)."""
    return {
        "output": storage.open_append(paths.local_output),
        "sidecar": storage.open_append(paths.local_sidecar),
    }


def keys_in(url: str) -> set[Key]:
    """The (task, rollout) keys of a JSONL file's rows (none when it does not exist)."""
    keys: set[Key] = set()
    if not storage.isfile(url):
        return keys
    for _, line in storage.iter_lines(url):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        key = key_of(row) if isinstance(row, dict) else None
        if key is not None:
            keys.add(key)
    return keys


def seed(local_output: str, rollouts: str, append: Callable[[bytes], None]) -> int:
    """§2.9 step 6: append every ``--rollouts`` line whose key the output does not hold yet."""
    present = keys_in(local_output)
    count = 0
    for _, line in storage.iter_lines(rollouts):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"Malformed JSON in {rollouts!r}: {exc}") from None
        key = key_of(row) if isinstance(row, dict) else None
        if key is not None:
            if key in present:
                continue
            present.add(key)
        append(line if line.endswith(b"\n") else line + b"\n")
        count += 1
    return count


def report_duplicates(duplicates: dict[Key, int], source: str | None, echo: Echo) -> None:
    if not duplicates:
        return
    keys = list(duplicates)
    shown = ", ".join(repr(k) for k in keys[:10]) + (", ..." if len(keys) > 10 else "")
    echo(
        f"Skipped {sum(duplicates.values())} duplicate rollout row(s) for {len(keys)} key(s) in "
        f"{source!r}; verified the first row of each: [{shown}]"
    )
