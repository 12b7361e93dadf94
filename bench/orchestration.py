"""Benchmark: what orchestration costs over ``--direct`` (issue: the post-evaluation pipeline).

Run from the repo root: ``python bench/orchestration.py [--rows N]``.

In one run, on the seeded corpus of ``bench.health`` (default 40,000 rollouts):

1. ``trivial``: Prefect's own floor, a one-task flow in a fresh interpreter, against the local
   server gymflow's embedded default started (an already running server, which is what the
   default is after the first command); ``trivial_ephemeral``: the same with no API configured
   (Prefect's throwaway server, what gymflow used to do).
2. ``cold``: the first orchestrated command on a fresh ``PREFECT_HOME`` (starts the server).
3. ``direct``: ``gymflow eval health-check --direct`` (no cache).
4. ``orchestrated``: the same without ``--direct``, embedded default (no cache), and against a
   server started by hand with ``prefect server start`` (``PREFECT_API_URL`` set).
5. ``cached``: each path rerun over unchanged inputs (a provenance hit), and the time to hash the
   input, the floor of any cached run.
6. ``per_task``: Prefect's cost per task, from a flow of 20 tasks each doing the CPU work of one
   evaluate-range task of the direct run (its time x workers / ranges), against the running
   server; printed as a share of that work (target <= 2 %).
7. ``eval post`` end to end on 8 shards of the corpus (``bench.aggregate``'s shards), orchestrated
   and ``--direct``, against running its steps by hand with ``--direct`` (aggregate, then
   health-check).

Prints ``overhead = orchestrated - direct`` beside the trivial flow (target: overhead <= trivial
+ 1 s) and ``cached`` beside ``hash + trivial + 1 s``.

``--parts cold,health,running,post`` picks some of them (each under a few minutes at 40k rows),
``--repeat N`` keeps each figure's best of N rounds, and ``--against OTHER/.venv/bin/gymflow``
times another tree (the base of a change, in its own worktree and venv) in the same rounds,
alternating which goes first, against the same corpus and server: it prints both trees' figures
(base first), then each round's pair and the median of their differences, which is steadier than
two bests on a shared machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.health import (  # noqa: E402
    Measurement,
    clear_reports,
    ensure_corpus,
    gymflow_executable,
    run_measured,
    warm_page_cache,
)

TRIVIAL = """
from prefect import flow, task
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

@task
def one() -> int:
    return 1

@flow
def trivial() -> int:
    return one()

with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
    trivial()
"""

# Prefect's cost per task: N tasks of W seconds of CPU work each, in one flow; prints the time per
# task beyond its work.
PER_TASK = """
import sys, time
from prefect import flow, task
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

WORK_S, TASKS = float(sys.argv[1]), int(sys.argv[2])

@task
def work(index: int) -> int:
    end = time.perf_counter() + WORK_S
    while time.perf_counter() < end:
        pass
    return index

@flow
def many() -> float:
    began = time.perf_counter()
    for index in range(TASKS):
        work(index)
    return time.perf_counter() - began

with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
    print((many() - WORK_S * TASKS) / TASKS)
"""


def _per_task_overhead(work_s: float, env: Mapping[str, str], tasks: int = 20) -> float:
    """Seconds Prefect adds to each task whose work takes ``work_s`` (against ``env``'s API)."""
    done = subprocess.run(
        [sys.executable, "-c", PER_TASK, str(work_s), str(tasks)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"per-task benchmark failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _hash_seconds(path: Path) -> float:
    began = time.perf_counter()
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return time.perf_counter() - began


def _timed(command: Sequence[str], env: Mapping[str, str]) -> Measurement:
    measurement = run_measured(command, env)
    if not measurement.ok:
        detail = measurement.stderr[-2000:]
        raise SystemExit(f"failed ({measurement.returncode}): {' '.join(command)}\n{detail}")
    return measurement


def _wait_healthy(url: str, timeout_s: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"no Prefect API at {url} after {timeout_s} s")


def _post_figures(rows: int, gymflow: str, env: Mapping[str, str]) -> dict[str, float]:
    """``eval post`` over 8 shards (linked into RUN/shards/) against aggregate + health by hand."""
    from bench.aggregate import PATTERN, ensure_shards

    shards = sorted(ensure_shards(rows).glob(PATTERN))
    for shard in shards:
        warm_page_cache(shard)
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-post-") as root:
        run = Path(root) / "run"
        (run / "shards").mkdir(parents=True)
        for shard in shards:
            (run / "shards" / shard.name).symlink_to(shard)

        def clean() -> None:
            for path in run.iterdir():
                if path.is_file():
                    path.unlink()

        out: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="gymflow-bench-prefect-") as home:
            local = {**env, "PREFECT_HOME": home, "PREFECT_SERVER_API_PORT": str(_free_port())}
            local.pop("PREFECT_API_URL", None)
            try:
                _timed([gymflow, "ui"], local)  # the server up first: measure the steady state
                clean()
                out["post"] = _timed([gymflow, "eval", "post", str(run), "--no-cache"], local).seconds
            finally:
                subprocess.run([gymflow, "ui", "--stop"], env=local, capture_output=True, check=False)
        clean()
        out["post_direct"] = _timed(
            [gymflow, "eval", "post", str(run), "--direct", "--no-cache"], env
        ).seconds
        clean()
        merged = run / "rollouts.jsonl"
        aggregate = [gymflow, "eval", "aggregate", "-i", str(run / "shards" / "*.jsonl"), "-o", str(merged)]
        by_hand = _timed([*aggregate, "--direct", "--no-cache", "--no-health-check"], env).seconds
        by_hand += _timed([gymflow, "eval", "health-check", str(run), "--direct", "--no-cache"], env).seconds
        out["by_hand"] = by_hand
    return out


def _trivial_seconds(env: Mapping[str, str]) -> float:
    """Prefect's floor against ``env``'s API: the best of three one-task flows."""
    return min(_timed([sys.executable, "-c", TRIVIAL], env).seconds for _ in range(3))


def _verdict(value: float, cap: float) -> str:
    return "met" if value <= cap else "MISSED"


PARTS = ("cold", "health", "running", "post")


def _quiet_env() -> dict[str, str]:
    """This environment without analytics and without a configured API (the embedded default)."""
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return env


def _fresh_env(home: str) -> dict[str, str]:
    """:func:`_quiet_env` on a fresh ``PREFECT_HOME`` and a free port for its local server."""
    return {**_quiet_env(), "PREFECT_HOME": home, "PREFECT_SERVER_API_PORT": str(_free_port())}


def _keep_best(best: dict[str, float], figures: Mapping[str, float]) -> None:
    for name, value in figures.items():
        best[name] = min(best.get(name, value), value)


def _health_round(gymflow: str, run_dir: Path, env: Mapping[str, str]) -> dict[str, float]:
    """One round of the embedded default's figures against the server ``env`` names."""
    health = [gymflow, "eval", "health-check", str(run_dir)]
    clear_reports(run_dir)
    return {
        "direct": _timed([*health, "--direct", "--no-cache"], env).seconds,
        "direct_cached": _timed([*health, "--direct"], env).seconds,
        "orchestrated": _timed([*health, "--no-cache"], env).seconds,
        "orchestrated_cached": _timed(health, env).seconds,
    }


def _running_round(gymflow: str, run_dir: Path, env: Mapping[str, str], direct: float) -> dict[str, float]:
    """The same against a server the user started by hand (``PREFECT_API_URL`` set)."""
    health = [gymflow, "eval", "health-check", str(run_dir)]
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    figures: dict[str, float] = {}
    try:
        _wait_healthy(url)
        running = {**env, "PREFECT_API_URL": url}
        figures["trivial_running"] = _trivial_seconds(running)
        figures["running"] = _timed([*health, "--no-cache"], running).seconds
        # One evaluate-range task's work: the direct run's CPU spread over its ranges.
        from gymflow import health as core

        plan = core.plan([str(run_dir / "rollouts.jsonl")])
        range_work = direct * plan.workers / len(plan.ranges)
        figures["range_work"] = range_work
        figures["per_task"] = _per_task_overhead(range_work, running)
        figures["running_cached"] = _timed(health, running).seconds
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    return figures


def _report(label: str, figures: Mapping[str, float], rows: int, size_mb: float, run_dir: Path) -> None:
    print(f"{label}corpus: {rows} rows, {size_mb:.0f} MB ({run_dir.relative_to(REPO)})")
    for name, value in figures.items():
        print(f"{name:>20}: {value:7.2f} s")
    pairs = []
    if {"orchestrated", "orchestrated_cached"} <= figures.keys():
        pairs.append(
            ("embedded default", figures["orchestrated"], figures["trivial"], figures["orchestrated_cached"])
        )
    if {"running", "running_cached"} <= figures.keys():
        running = figures["running"], figures["trivial_running"], figures["running_cached"]
        pairs.append(("running server", *running))
    for name, orchestrated, trivial, cached in pairs:
        overhead = orchestrated - figures["direct"]
        cached_cap = figures["hash"] + trivial + 1
        print(
            f"{name}: overhead = orchestrated - direct = {overhead:.2f} s "
            f"(target <= trivial {trivial:.2f} + 1 s: {_verdict(overhead, trivial + 1)}); "
            f"cached rerun = {cached:.2f} s (target <= hash {figures['hash']:.2f} + trivial + 1 = "
            f"{cached_cap:.2f} s: {_verdict(cached, cached_cap)})"
        )
    if "per_task" in figures:
        per_task, work = figures["per_task"] / figures["range_work"], figures["range_work"]
        print(
            f"per-task overhead: {figures['per_task'] * 1000:.1f} ms on a task of {work:.2f} s "
            f"(one evaluate-range's work) = {per_task:.1%} (target <= 2 %: {_verdict(per_task, 0.02)})"
        )
    if "cold" in figures:
        print(f"first command on a fresh PREFECT_HOME (starts the local server): {figures['cold']:.2f} s")
    if "post" in figures:
        print(
            f"eval post on 8 shards: orchestrated {figures['post']:.2f} s, "
            f"--direct {figures['post_direct']:.2f} s, "
            f"steps by hand with --direct {figures['by_hand']:.2f} s "
            f"(orchestrated - by hand = {figures['post'] - figures['by_hand']:.2f} s)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--avg-bytes", type=int, default=16_000)
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated subset of {','.join(PARTS)} (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each figure is the best of them")
    parser.add_argument(
        "--against",
        metavar="GYMFLOW",
        help="another tree's gymflow executable (its own venv): both trees are timed in alternating "
        "rounds over the same corpus and server, and each prints its figures (before, then after)",
    )
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    gymflow = gymflow_executable()
    if gymflow is None:
        raise SystemExit("gymflow is not installed (pip install -e .)")
    trees = {"this": gymflow} if args.against is None else {"base": args.against, "this": gymflow}
    run_dir = ensure_corpus(args.rows, args.seed, args.avg_bytes)
    rollouts = run_dir / "rollouts.jsonl"
    warm_page_cache(rollouts)
    best: dict[str, dict[str, float]] = {label: {} for label in trees}
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label in trees}

    if "cold" in parts:
        for label, executable in trees.items():
            with tempfile.TemporaryDirectory(prefix="gymflow-bench-prefect-") as home:
                env = _fresh_env(home)
                try:
                    clear_reports(run_dir)
                    command = [executable, "eval", "health-check", str(run_dir), "--no-cache"]
                    best[label]["cold"] = _timed(command, env).seconds
                    if label == next(iter(trees)):
                        ephemeral = _timed([sys.executable, "-c", TRIVIAL], env).seconds
                        best[label]["trivial_ephemeral"] = ephemeral
                finally:
                    subprocess.run([executable, "ui", "--stop"], env=env, capture_output=True, check=False)

    if "health" in parts or "running" in parts:
        with tempfile.TemporaryDirectory(prefix="gymflow-bench-prefect-") as home:
            env = _fresh_env(home)
            local = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{env['PREFECT_SERVER_API_PORT']}/api"}
            try:
                _timed([gymflow, "ui"], env)  # the embedded default's server, shared by the trees
                for round_ in range(args.repeat):
                    # The floor, once per round for both trees (it runs no gymflow code).
                    trivial = _trivial_seconds(local)
                    order = list(trees.items())
                    for label, executable in order if round_ % 2 == 0 else order[::-1]:
                        figures: dict[str, float] = {"trivial": trivial}
                        if "health" in parts:
                            figures |= _health_round(executable, run_dir, env)
                        else:
                            direct = [executable, "eval", "health-check", str(run_dir), "--direct"]
                            figures["direct"] = _timed([*direct, "--no-cache"], env).seconds
                        if "running" in parts:
                            figures |= _running_round(executable, run_dir, env, figures["direct"])
                        _keep_best(best[label], figures)
                        rounds[label].append(figures)
            finally:
                subprocess.run([gymflow, "ui", "--stop"], env=env, capture_output=True, check=False)
    hash_s = min(_hash_seconds(rollouts) for _ in range(max(args.repeat, 1)))
    for figures in best.values():
        figures["hash"] = hash_s

    if "post" in parts:
        for round_ in range(args.repeat):
            order = list(trees.items())
            for label, executable in order if round_ % 2 == 0 else order[::-1]:
                _keep_best(best[label], _post_figures(args.rows, executable, _quiet_env()))

    size_mb = rollouts.stat().st_size / 1e6
    for label, figures in best.items():
        if len(trees) > 1:
            print(f"== {label} ({trees[label]}), best of {args.repeat} ==")
        _report("", figures, args.rows, size_mb, run_dir)
    if len(trees) > 1 and rounds["this"]:
        _paired(rounds["base"], rounds["this"])
    return 0


def _paired(base: Sequence[Mapping[str, float]], this: Sequence[Mapping[str, float]]) -> None:
    """Each round's figures of both trees (run back to back, so under the same machine load) and
    the median of their differences: on a shared machine, steadier than two bests."""
    import statistics

    print("== per round (base / this), and the median of this - base ==")
    for name in this[0]:
        pairs = [(b[name], t[name]) for b, t in zip(base, this, strict=True) if name in b and name in t]
        shown = "  ".join(f"{b:.2f}/{t:.2f}" for b, t in pairs)
        median = statistics.median(t - b for b, t in pairs)
        print(f"{name:>20}: {shown}  median {median:+.2f} s")
    overheads = [
        (b["orchestrated"] - b["direct"], t["orchestrated"] - t["direct"])
        for b, t in zip(base, this, strict=True)
        if "orchestrated" in b and "orchestrated" in t
    ]
    if overheads:
        shown = "  ".join(f"{b:.2f}/{t:.2f}" for b, t in overheads)
        median = statistics.median(t - b for b, t in overheads)
        print(f"{'overhead':>20}: {shown}  median {median:+.2f} s")


if __name__ == "__main__":
    sys.exit(main())
