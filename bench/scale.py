"""Scale benchmark: health-check, aggregate and ``eval post`` at growing row counts.

Run from the repo root: ``python bench/scale.py [--sizes 10000 100000 1000000] [--repeat R]``.

For each size N it generates (or reuses, from ``bench/_corpus/``) N small rollouts of
``bench.corpus`` (``--avg-bytes``, default 1,000: compact records, about 2.6 KB each, the
smallest that generator makes) without unreadable or duplicate rows, as 8 shards, then runs, each
in a fresh process as its user would:

* ``aggregate``: ``gymflow eval aggregate -i '<shards>' -o OUT/merged.jsonl --direct
  --no-health-check --no-cache``;
* ``health``: ``gymflow eval health-check OUT --rollouts-file OUT/merged.jsonl --direct
  --no-cache`` (the merged file: every row once);
* ``post``: ``gymflow eval post RUN --direct --no-cache`` on a run directory whose ``shards/``
  links to the shards (aggregate, then the health check of its output, the metrics over its healthy
  rows and ``report.html``);
* ``post-prefect``: the same ``eval post`` orchestrated (without ``--direct``), against a local Prefect
  server of a fresh ``PREFECT_HOME`` that ``gymflow ui`` started before the first timed run (what the
  default is after the first command); the server's own memory is not in the command's tree;
* ``parse``: the floor, one process ``orjson.loads``-ing every line of the merged file.

``--steps`` picks some of them (aggregate always runs: it makes the merged file). Each is timed
best of ``--repeat`` (default 2 at 1M rows: 1); the peak RSS of its process tree
(parent plus workers, summed, sampled every 50 ms) is the largest seen. It prints, per size and
step, microseconds per row, the ratio to the parse floor of the same size, and the peak tree RSS;
then each step's growth from the smallest size to the largest (time per row should stay flat, and
memory too).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.aggregate import PATTERN, ensure_shards  # noqa: E402
from bench.health import (  # noqa: E402
    Measurement,
    gymflow_executable,
    parse_seconds,
    run_measured,
    warm_page_cache,
)

STEPS = ("aggregate", "health", "post", "post-prefect")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _local_server(gymflow: str, env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """An environment whose orchestrated commands use a Prefect server of a fresh ``PREFECT_HOME``,
    started before any timed run (the steady state: later commands find it running), stopped after."""
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-prefect-") as home:
        local = {**env, "PREFECT_HOME": home, "PREFECT_SERVER_API_PORT": str(_free_port())}
        local.pop("PREFECT_API_URL", None)
        try:
            _checked(run_measured([gymflow, "ui"], local), "gymflow ui")
            yield local
        finally:
            subprocess.run([gymflow, "ui", "--stop"], env=local, capture_output=True, check=False)


def _clean_run(run_dir: Path) -> None:
    """Remove what an earlier ``eval post`` wrote into RUN (the shards' links stay)."""
    for path in run_dir.iterdir():
        if path.is_file():
            path.unlink()
        elif path.name != "shards":
            shutil.rmtree(path)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return env


def _checked(run: Measurement, what: str) -> Measurement:
    if not run.ok:
        raise SystemExit(f"{what} failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return run


def measure(
    rows: int, repeat: int, avg_bytes: int, steps: Sequence[str] = STEPS
) -> dict[str, tuple[float, float]]:
    """{step: (best seconds, peak tree RSS in MB)} at ``rows`` rows, and the parse floor."""
    gymflow = gymflow_executable() or "gymflow"
    shards = sorted(ensure_shards(rows, avg_bytes=avg_bytes).glob(PATTERN))
    env = _env()
    best: dict[str, tuple[float, float]] = {}

    def keep(step: str, run: Measurement) -> None:
        seconds, peak = best.get(step, (float("inf"), 0.0))
        best[step] = (min(seconds, run.seconds), max(peak, run.peak_tree_rss / 2**20))

    with contextlib.ExitStack() as stack:
        root = stack.enter_context(
            tempfile.TemporaryDirectory(prefix="gymflow-bench-scale-", dir=REPO / "bench" / "_corpus")
        )
        server_env = stack.enter_context(_local_server(gymflow, env)) if "post-prefect" in steps else env
        out = Path(root) / "out"
        run_dir = Path(root) / "run"
        (run_dir / "shards").mkdir(parents=True)
        for shard in shards:
            (run_dir / "shards" / shard.name).symlink_to(shard.resolve())
        merged = out / "merged.jsonl"
        for _ in range(repeat):
            for shard in shards:
                warm_page_cache(shard)
            shutil.rmtree(out, ignore_errors=True)
            aggregate = [
                gymflow, "eval", "aggregate", "-i", str(run_dir / "shards" / PATTERN), "-o", str(merged),
                "--direct", "--no-health-check", "--no-cache",
            ]  # fmt: skip
            keep("aggregate", _checked(run_measured(aggregate, env), "aggregate"))
            warm_page_cache(merged)
            parse_s, _ = parse_seconds(merged)
            best["parse"] = (min(best.get("parse", (parse_s, 0.0))[0], parse_s), 0.0)
            if "health" in steps:
                health = [
                    gymflow, "eval", "health-check", str(out), "--rollouts-file", str(merged),
                    "--direct", "--no-cache",
                ]  # fmt: skip
                keep("health", _checked(run_measured(health, env), "health-check"))
            if "post" in steps:
                _clean_run(run_dir)
                post = [gymflow, "eval", "post", str(run_dir), "--direct", "--no-cache"]
                keep("post", _checked(run_measured(post, env), "eval post"))
            if "post-prefect" in steps:
                _clean_run(run_dir)
                post = [gymflow, "eval", "post", str(run_dir), "--no-cache"]
                keep("post-prefect", _checked(run_measured(post, server_env), "eval post (orchestrated)"))
        best["bytes"] = (float(merged.stat().st_size), 0.0)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/scale.py", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=2, help="runs per size below 1M rows (1M: one)")
    parser.add_argument("--avg-bytes", type=int, default=1_000)
    parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="aggregate always runs (it makes the file)",
    )
    args = parser.parse_args(argv)
    steps = [step for step in STEPS if step in args.steps or step == "aggregate"]
    results: dict[int, dict[str, tuple[float, float]]] = {}
    for rows in args.sizes:
        began = time.perf_counter()
        repeat = 1 if rows >= 1_000_000 else args.repeat
        figures = results[rows] = measure(rows, repeat, args.avg_bytes, steps)
        parse_s = figures["parse"][0]
        print(
            f"rows={rows} ({figures['bytes'][0] / 1e6:.0f} MB merged, best of {repeat}, "
            f"{time.perf_counter() - began:.0f} s in all): parse floor {parse_s * 1e6 / rows:.2f} us/row",
            flush=True,
        )
        for step in steps:
            seconds, peak = figures[step]
            print(
                f"  {step:<12} {seconds:7.2f} s  {seconds * 1e6 / rows:7.2f} us/row  "
                f"ratio {seconds / parse_s:5.2f} x parse  peak tree RSS {peak:6.0f} MB",
                flush=True,
            )
    if len(results) > 1:
        small, large = min(results), max(results)
        for step in steps:
            per_row = [results[n][step][0] / n for n in (small, large)]
            peaks = [results[n][step][1] for n in (small, large)]
            print(
                f"{step}: {small} -> {large} rows: time per row x{per_row[1] / per_row[0]:.2f}, "
                f"peak tree RSS {peaks[0]:.0f} -> {peaks[1]:.0f} MB (x{peaks[1] / peaks[0]:.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
