"""Benchmark of ``gymflow eval join --direct`` against a plain parse of the same bytes.

For each size (default 10,000 and 40,000 rollouts, about 5 model calls each, seeded) it writes a
pre-join run directory with :mod:`bench.join_corpus` (cached under ``bench/_corpus/``), then:

* ``parse``: one process, ``orjson.loads`` of every line of ``rollouts.jsonl`` and of every
  capture file (each file opened and read whole), nothing else;
* ``join``: ``gymflow eval join RUN --direct --no-cache`` in a fresh process (CLI start-up,
  config, the join, writing the output and the provenance record), its wall time and the peak RSS
  of its whole process tree, parent plus workers (psutil, summed every 50 ms, as
  :func:`bench.health.run_measured` measures); ``join (in-process)`` is the same run timed inside
  the process, without interpreter start-up and imports.

It prints ``ratio = join / parse`` (target <= 2.0) and the process tree's peak RSS (target <= 300
MB, flat from 10k to 40k), and the same ratio in CPU seconds, which a machine shared with other
work distorts less.
Usage: ``python -m bench.join [--sizes 5000 20000] [--seed 0] [--repeat 2] [--workers N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(REPO))

from bench.health import run_measured  # noqa: E402
from bench.join_corpus import write_run  # noqa: E402

CORPUS = Path(__file__).parent / "_corpus"

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from gymflow.cli import main
t1 = time.perf_counter()
import gymflow.join as join
original = join.run_join
timing = {}
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        timing["join"] = time.perf_counter() - start
join.run_join = timed  # the CLI imports it from the package when it runs
code = main(sys.argv[1:])
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
report = {
    "code": code, "imports": t1 - t0, "join": timing.get("join"),
    "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
}
print(json.dumps(report), file=sys.stderr)
"""


def corpus(rows: int, seed: int) -> Path:
    """The cached run directory for ``rows`` rollouts (generated once)."""
    run_dir = CORPUS / f"join-{rows}-{seed}"
    done = run_dir / ".complete"
    if not done.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        start = time.perf_counter()
        write_run(run_dir, rows, seed=seed, calls=5, call_bytes=2000)
        done.write_text("ok\n")
        print(f"  generated {rows} rollouts in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return run_dir


def parse_all(run_dir: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds to ``orjson.loads`` every rollout and capture line; bytes parsed."""
    start = time.perf_counter()
    cpu = time.process_time()
    total = 0
    with open(run_dir / "rollouts.jsonl", "rb") as f:
        for line in f:
            if line.strip():
                orjson.loads(line)
            total += len(line)
    capture = run_dir / "model-calls"
    for name in sorted(os.listdir(capture)):
        with open(capture / name, "rb") as f:
            data = f.read()
        total += len(data)
        for line in data.split(b"\n"):
            if line.strip():
                orjson.loads(line)
    return time.perf_counter() - start, time.process_time() - cpu, total


def join_once(run_dir: Path, workers: int) -> dict[str, float]:
    """Run the CLI join in a fresh process; wall seconds, in-process seconds, CPU seconds and the
    peak RSS of the process tree (``rss``) and of its largest process (``single_rss``), in bytes.

    The previous output is removed first, so every run writes a new file (as a first join does).
    """
    (run_dir / "rollouts_joined.jsonl").unlink(missing_ok=True)
    command = ["eval", "join", str(run_dir), "--direct", "--no-cache", "--workers", str(workers)]
    run = run_measured([sys.executable, "-c", _CHILD, *command])
    if run.returncode != 0:
        raise SystemExit(f"join failed ({run.returncode}):\n{run.stderr}")
    report = json.loads(run.stderr.strip().splitlines()[-1])
    return {"wall": run.seconds, "rss": run.peak_tree_rss, "single_rss": run.peak_single_rss, **report}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.join", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 40000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="best of N for each measurement")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="join processes (default: CPUs)"
    )
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        run_dir = corpus(size, args.seed)
        parses = [parse_all(run_dir) for _ in range(args.repeat)]
        parse_s, parse_cpu, nbytes = min(parses)
        joins = [join_once(run_dir, args.workers) for _ in range(args.repeat)]
        best = min(joins, key=lambda j: j["wall"])
        out_bytes = (run_dir / "rollouts_joined.jsonl").stat().st_size
        rows.append((size, nbytes, out_bytes, parse_s, best))
        cpu = min(j["cpu"] for j in joins)
        print(
            f"{size:>6} rollouts, {args.workers} workers: input {nbytes / 2**20:.1f} MiB, "
            f"output {out_bytes / 2**20:.1f} MiB; parse {parse_s:.2f}s, join {best['wall']:.2f}s "
            f"(in-process {best['join']:.2f}s); ratio = join / parse = {best['wall'] / parse_s:.2f} "
            f"(in-process {best['join'] / parse_s:.2f}); "
            f"peak RSS of the process tree {best['rss'] / 1e6:.1f} MB "
            f"(largest process {best['single_rss'] / 1e6:.1f} MB); CPU time: parse {parse_cpu:.2f}s, "
            f"join {cpu:.2f}s (whole process, all workers), ratio {cpu / parse_cpu:.2f}"
        )
    if len(rows) > 1:
        first, last = rows[0][4]["rss"], rows[-1][4]["rss"]
        print(f"peak RSS {rows[0][0]} -> {rows[-1][0]} rollouts: {first / 1e6:.1f} -> {last / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
