"""Benchmark: ``gymflow eval reverify`` against a bare aiohttp client posting the same ``/verify`` bodies.

Run from the repo root: ``python bench/reverify.py [--rows 20000] [--concurrency 32] [--prefect]``.

1. Generates (or reuses, under ``bench/_corpus/``) seeded inputs of two generators (``--corpus 1``, ``2`` or
   ``both``, the default), each at ``--rows`` (default 20,000) and ``--small-rows`` (default 5,000) rollouts:
   corpus 1, mcqa-like rows of ``bench.reverify_corpus`` (4 per task, ~1.6 KB materialized + ~2 KB rollout
   lines); corpus 2, ``bench.reverify_corpus2`` (the rollouts of ``bench.corpus2``: 1 to 16 per task, 1.7 to
   25 KB bodies, three agents, taskset rows, duplicates, blank lines, rows without a materialized input).
   Every figure below is printed for each corpus.
2. Starts the test resources server (``tests.reverify.server``: Starlette on uvicorn with uvloop and
   httptools, ``--server-workers`` processes, ``--latency-ms`` of ``asyncio.sleep`` per ``/verify``).
3. ``bare``: one aiohttp session, ``--concurrency`` workers posting the prebuilt bodies (materialized row plus
   the rollout's ``response``) and decoding each answer; requests per second, measured before and after the
   large gymflow run (the machine is shared: ratios use the better of the two).
4. ``gymflow --direct``: the command as a subprocess on both sizes, the fastest of ``--repeat`` runs
   (default 3), at its default concurrency unless ``--concurrency-flag`` is given: wall time, in-loop rate
   (rows appended after the output first grows, over the time to its last growth; polled every 20 ms),
   peak RSS of the process tree (psutil) and CPU per row (user + system of the command).
   Also, as diagnostics, gymflow's ``/verify`` client alone, in process, over the same bodies, and the
   direct path in process split into its steps (prepare, the verify stream, finish).
5. ``gymflow`` orchestrated (Prefect, without ``--direct``; also the fastest of ``--repeat``): on the small
   corpus by default, on the large one with ``--prefect``; skipped with ``--no-prefect``. Its result store
   is a fresh directory per run (through a ``GYMFLOW_CONFIG`` file, unless one is set), so no batch comes
   from an earlier run's cache.

Prints ``ratio = gymflow rows/s / bare aiohttp req/s`` (wall and in-loop; target >= 0.8), RSS at both
sizes (target <= 200 MB, flat) and the orchestrated run's rate over ``--direct``'s on the same corpus
(target >= 0.7). Needs ``psutil`` and ``aiohttp``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from bench import reverify_corpus, reverify_corpus2  # noqa: E402
from tests.reverify.server_process import ServerProcess, start_server, write_gym_config  # noqa: E402

CORPUS_ROOT = REPO / "bench" / "_corpus"
POLL_SECONDS = 0.02
RUN_TIMEOUT_SECONDS = 1800.0


@dataclass
class Run:
    """One subprocess run of ``gymflow eval reverify``."""

    label: str
    rows: int
    wall_s: float
    loop_s: float | None
    """From the first to the last growth of the output (the rows of the first write are not in it)."""
    loop_rows: int
    """Rows appended after the first growth (estimated from byte sizes)."""
    peak_tree_rss: int
    cpu_s: float
    """User + system CPU of the command and its reaped descendants."""
    returncode: int
    written: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.written == self.rows

    def rows_per_s(self, loop: bool = False) -> float:
        if loop:
            return self.loop_rows / self.loop_s if self.loop_s else 0.0
        return self.rows / self.wall_s if self.wall_s else 0.0


@dataclass(frozen=True)
class Corpus:
    """One generator's inputs: where they are, what a bare client posts, how many rows reverify
    verifies, and the agents the config routes."""

    name: str
    directory: Path
    bodies: Callable[[], list[bytes]]
    rows: int
    agents: tuple[str, ...]


def ensure_corpus(which: str, rows: int, seed: int) -> Corpus:
    """The seeded inputs of corpus ``which`` (``1``: ``bench.reverify_corpus``, ``2``:
    ``bench.reverify_corpus2``), generated when missing or made by other generator code."""
    module: Any = reverify_corpus if which == "1" else reverify_corpus2
    fingerprint = hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:12]
    prefix = f"reverify-rows{rows}-seed{seed}-" if which == "1" else f"reverify2-rows{rows}-seed{seed}-"
    directory = CORPUS_ROOT / (prefix + fingerprint)
    if not (directory / module.ROLLOUTS).is_file():
        for stale in CORPUS_ROOT.glob(prefix + "*") if CORPUS_ROOT.is_dir() else []:
            shutil.rmtree(stale, ignore_errors=True)
        began = time.perf_counter()
        module.write(directory, rows, seed)
        size = sum(p.stat().st_size for p in directory.iterdir())
        seconds = time.perf_counter() - began
        print(f"generated {directory.relative_to(REPO)}: {rows} rows, {size / 1e6:.0f} MB in {seconds:.1f} s")
    if which == "1":
        return Corpus(
            "corpus 1 (mcqa)",
            directory,
            lambda: request_bodies(directory),
            _count_lines(directory / reverify_corpus.ROLLOUTS),
            (reverify_corpus.AGENT,),
        )
    bodies = directory / reverify_corpus2.BODIES
    return Corpus(
        "corpus 2 (bench.corpus2 rollouts)",
        directory,
        lambda: bodies.read_bytes().splitlines(),
        _count_lines(bodies),
        reverify_corpus2.AGENTS,
    )


def request_bodies(directory: Path) -> list[bytes]:
    """Corpus 1's ``/verify`` bodies in rollout-file order: the materialized row with the rollout's
    ``response``."""
    by_key: dict[tuple[int, int], dict[str, Any]] = {}
    with open(directory / reverify_corpus.MATERIALIZED, "rb") as handle:
        for line in handle:
            row = orjson.loads(line)
            by_key[(row["_ng_task_index"], row["_ng_rollout_index"])] = row
    bodies = []
    with open(directory / reverify_corpus.ROLLOUTS, "rb") as handle:
        for line in handle:
            rollout = orjson.loads(line)
            body = dict(by_key[(rollout["_ng_task_index"], rollout["_ng_rollout_index"])])
            body["response"] = rollout["response"]
            bodies.append(orjson.dumps(body))
    return bodies


async def _bare(url: str, bodies: Sequence[bytes], concurrency: int) -> tuple[float, int]:
    import aiohttp

    position = 0
    failures = 0
    headers = {"Content-Type": "application/json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal position, failures
        while position < len(bodies):
            body = bodies[position]
            position += 1
            async with session.post(f"{url}/verify", data=body, headers=headers) as response:
                answer = orjson.loads(await response.read())
                if response.status != 200 or not isinstance(answer, dict):
                    failures += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return time.perf_counter() - began, failures


def bare_client(url: str, bodies: Sequence[bytes], concurrency: int) -> tuple[float, float]:
    """Requests per second of a plain aiohttp client over ``bodies``, and its CPU milliseconds per request."""
    cpu = time.process_time()
    seconds, failures = asyncio.run(_bare(url, bodies, concurrency))
    cpu = time.process_time() - cpu
    if failures:
        raise RuntimeError(f"bare client: {failures} of {len(bodies)} requests failed")
    return len(bodies) / seconds, cpu * 1000 / len(bodies)


def core_client(url: str, bodies: Sequence[bytes]) -> float | None:
    """Requests per second of gymflow's ``/verify`` client alone (in process, default settings); None when
    its module is not importable. A diagnostic: it separates HTTP-client cost from the command's I/O."""
    try:
        from gymflow.reverify._client import ClientSettings, Request, verify_requests
    except ImportError:
        return None
    requests = [Request(f"{url}/verify", body) for body in bodies]
    failed = 0

    def count(index: int, result: Any) -> None:
        nonlocal failed
        failed += result.answer is None

    began = time.perf_counter()
    verify_requests(requests, ClientSettings(), count)
    seconds = time.perf_counter() - began
    if failed:
        raise RuntimeError(f"gymflow client: {failed} of {len(bodies)} requests failed")
    return len(bodies) / seconds


def gymflow_executable() -> str:
    beside = Path(sys.executable).parent / "gymflow"
    found = str(beside) if beside.is_file() else shutil.which("gymflow")
    if not found:
        raise SystemExit("no gymflow executable beside sys.executable or on PATH")
    return found


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def run_gymflow(
    label: str, inputs: Corpus, config: Path, work: Path, *, direct: bool, extra: Sequence[str]
) -> Run:
    """Run the command once on a fresh output, polling RSS of its tree and the output's growth."""
    import psutil

    rows, corpus = inputs.rows, inputs.directory
    # A path without spaces: an orchestrated run names its outputs as Prefect assets, whose keys
    # cannot hold one (a run under "gymflow Prefect/" failed at its last step).
    out_dir = work / re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    output = out_dir / "reverified.jsonl"
    command = [
        gymflow_executable(), "eval", "reverify", "--config", str(config),
        "--inputs", str(corpus / reverify_corpus.MATERIALIZED),
        "--rollouts", str(corpus / reverify_corpus.ROLLOUTS),
        "--output", str(output), *(["--direct"] if direct else []), *extra,
    ]  # fmt: skip
    env = dict(os.environ)
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if not direct and "GYMFLOW_CONFIG" not in env:
        # A fresh result store: batches cached by an earlier benchmark run would be reused, not verified.
        settings = out_dir / "gymflow.yaml"
        settings.write_text(f"prefect:\n  result_store: {out_dir / 'results'}\n")
        env["GYMFLOW_CONFIG"] = str(settings)
    first_growth: float | None = None
    last_growth: float | None = None
    last_size = 0
    first_size = 0
    peak = 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out_dir / "stdout.txt", "wb") as out, open(out_dir / "stderr.txt", "wb") as err:
        began = time.perf_counter()
        process = psutil.Popen(command, stdout=out, stderr=err, env=env, cwd=out_dir)
        while True:
            try:
                returncode = process.wait(timeout=POLL_SECONDS)
                break
            except psutil.TimeoutExpired:
                pass
            now = time.perf_counter()
            if now - began > RUN_TIMEOUT_SECONDS:
                for member in [*process.children(recursive=True), process]:
                    member.kill()
                returncode = process.wait()
                break
            try:
                size = output.stat().st_size
            except FileNotFoundError:
                size = 0
            if size > last_size:
                if first_growth is None:
                    first_growth, first_size = now, size
                last_growth, last_size = now, size
            total = 0
            try:
                members = [process, *process.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for member in members:
                try:
                    total += member.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    pass
            peak = max(peak, total)
        wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    loop = last_growth - first_growth if first_growth is not None and last_growth is not None else None
    stdout = (out_dir / "stdout.txt").read_text(errors="replace")
    stderr = (out_dir / "stderr.txt").read_text(errors="replace")
    final_size = output.stat().st_size if output.exists() else 0
    loop_rows = round(rows * (final_size - first_size) / final_size) if final_size else 0
    written = _count_lines(output)
    return Run(label, rows, wall, loop, loop_rows, peak, cpu_s, returncode, written, stdout, stderr)


def _report(run: Run, bare_rps: float, bare_cpu_ms: float) -> None:
    if not run.ok:
        last = [line for line in (run.stderr + run.stdout).splitlines() if line.strip()][-5:]
        print(f"{run.label}: FAILED (exit {run.returncode}, {run.written} of {run.rows} rows written)")
        print("    " + "\n    ".join(last))
        return
    loop_rps = run.rows_per_s(loop=True)
    print(
        f"{run.label}: {run.rows} rows, wall {run.wall_s:.2f} s = {run.rows_per_s():.0f} rows/s "
        f"(ratio {run.rows_per_s() / bare_rps:.2f}); in-loop {run.loop_s or 0:.2f} s = {loop_rps:.0f} rows/s "
        f"(ratio {loop_rps / bare_rps:.2f}); peak tree RSS {run.peak_tree_rss / 2**20:.0f} MB; "
        f"CPU {run.cpu_s * 1000 / run.rows:.2f} ms/row (bare {bare_cpu_ms:.2f} ms/request)",
        flush=True,
    )


def phases(corpus: Path, config: Path, work: Path) -> dict[str, float] | None:
    """Seconds of each step of the direct path, in process (prepare, the verify stream, finish): where a
    run's wall time goes besides the CLI's start-up. None when the core is not importable."""
    try:
        import yaml

        from gymflow.reverify import options_from_config, run_reverify
    except ImportError:
        return None
    out = work / "phases" / "reverified.jsonl"
    shutil.rmtree(out.parent, ignore_errors=True)
    options = options_from_config(
        {
            "materialized_inputs_jsonl_fpath": str(corpus / reverify_corpus.MATERIALIZED),
            "rollouts_jsonl_fpath": str(corpus / reverify_corpus.ROLLOUTS),
            "output_jsonl_fpath": str(out),
        }
    )
    marks: dict[str, float] = {}
    try:
        run_reverify(options, yaml.safe_load(config.read_text()), lambda _: None, timings=marks)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    return marks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--small-rows", type=int, default=5_000)
    parser.add_argument("--corpus", choices=("1", "2", "both"), default="both")
    parser.add_argument("--concurrency", type=int, default=32, help="the bare client's concurrency")
    parser.add_argument("--concurrency-flag", action="store_true", help="also pass --concurrency to gymflow")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-workers", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=1.0)
    parser.add_argument("--bare-only", action="store_true", help="only the bare aiohttp client")
    parser.add_argument("--repeat", type=int, default=3, help="gymflow runs per figure (the fastest counts)")
    prefect = parser.add_mutually_exclusive_group()
    prefect.add_argument("--prefect", action="store_true", help="orchestrated run on the large corpus too")
    prefect.add_argument("--no-prefect", action="store_true", help="skip the orchestrated run")
    args = parser.parse_args(argv)

    chosen = ("1", "2") if args.corpus == "both" else (args.corpus,)
    corpora = [
        (ensure_corpus(c, args.rows, args.seed), ensure_corpus(c, args.small_rows, args.seed)) for c in chosen
    ]
    server: ServerProcess = start_server(
        "stateless", workers=args.server_workers, latency_ms=args.latency_ms, no_log=True, timeout_s=60
    )
    work = Path(tempfile.mkdtemp(prefix="gymflow-bench-reverify-"))
    ok = True
    try:
        workers, latency = args.server_workers, args.latency_ms
        print(
            f"server: {server.url}, {workers} uvicorn workers (uvloop, httptools), {latency:g} ms per /verify"
        )
        for large, small in corpora:
            print(f"\n== {large.name}: {large.rows} rows to verify (small: {small.rows})", flush=True)
            ok = _bench_corpus(args, server, work, large, small) and ok
        return 0 if ok else 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _bench_corpus(
    args: argparse.Namespace, server: ServerProcess, work: Path, large: Corpus, small: Corpus
) -> bool:
    bodies = large.bodies()
    bare_client(server.url, bodies[:1000], args.concurrency)  # warm-up
    bare_before, bare_cpu_ms = bare_client(server.url, bodies, args.concurrency)
    print(
        f"bare aiohttp: {len(bodies)} requests at concurrency {args.concurrency}: "
        f"{bare_before:.0f} req/s, client CPU {bare_cpu_ms:.2f} ms/request"
    )
    if args.bare_only:
        return True
    client_rps = core_client(server.url, bodies)
    if client_rps is not None:
        print(f"gymflow /verify client alone (in process): {client_rps:.0f} req/s "
              f"({client_rps / bare_before:.2f} of bare)")  # fmt: skip
    config = write_gym_config(
        work / "gym_config.yaml", {"mcqa": server}, agents=dict.fromkeys(large.agents, "mcqa")
    )
    marks = phases(large.directory, config, work)
    if marks is not None:
        print(
            f"direct path in process (large): prepare {marks['prepare']:.2f} s, verify stream "
            f"{marks['stream']:.2f} s = {large.rows / marks['stream']:.0f} rows/s, "
            f"finish {marks['finish']:.2f} s"
        )
    extra = ["--concurrency", str(args.concurrency)] if args.concurrency_flag else []

    def best(label: str, inputs: Corpus, direct: bool) -> Run:
        """The fastest of ``--repeat`` runs (one that fails is reported at once)."""
        runs = []
        for _ in range(args.repeat):
            runs.append(run_gymflow(label, inputs, config, work, direct=direct, extra=extra))
            if not runs[-1].ok:
                return runs[-1]
        return min(runs, key=lambda run: run.wall_s)

    runs = [best("gymflow --direct (large)", large, True)]
    bare_after, bare_cpu_after = bare_client(server.url, bodies, args.concurrency)
    bare_cpu_ms = min(bare_cpu_ms, bare_cpu_after)
    del bodies
    bare_rps = max(bare_before, bare_after)
    print(f"bare aiohttp again: {bare_after:.0f} req/s; ratios below use the better, {bare_rps:.0f} req/s")
    runs.append(best("gymflow --direct (small)", small, True))
    if not args.no_prefect:
        runs.append(best("gymflow Prefect", large if args.prefect else small, False))
    for run in runs:
        _report(run, bare_rps, bare_cpu_ms)
    direct = runs[0]
    if direct.ok:
        wall_ratio = direct.rows_per_s() / bare_rps
        loop_ratio = direct.rows_per_s(loop=True) / bare_rps
        print(f"ratio = {wall_ratio:.2f} (wall), {loop_ratio:.2f} (in-loop); target >= 0.8")
        cpu_ratio = bare_cpu_ms / (direct.cpu_s * 1000 / direct.rows)
        print(
            f"CPU ratio = bare ms/request / gymflow ms/row = {cpu_ratio:.2f} "
            "(what the wall ratio tends to when the client is CPU-bound)"
        )
        small_mb, large_mb = runs[1].peak_tree_rss / 2**20, direct.peak_tree_rss / 2**20
        print(
            f"peak RSS: {small_mb:.0f} MB at {runs[1].rows} rows, "
            f"{large_mb:.0f} MB at {direct.rows} rows; target <= 200 MB, flat"
        )
        orchestrated = runs[2] if len(runs) > 2 else None
        if orchestrated is not None and orchestrated.ok:
            same = direct if args.prefect else runs[1]
            print(
                f"orchestrated / --direct on the {'large' if args.prefect else 'small'} corpus: "
                f"{orchestrated.rows_per_s() / same.rows_per_s():.2f}; target >= 0.7"
            )
    return all(run.ok for run in runs)


if __name__ == "__main__":
    raise SystemExit(main())
