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

The floor is the parse plus writing (and fsync-ing) as many bytes as the joined output has. It
prints ``ratio = join / floor`` (target <= 2.0; ``join / parse`` beside it) and the process
tree's peak RSS (target <= 300 MB, flat from 10k to 40k), and the CPU-seconds ratio to the parse,
which a machine shared with other work distorts less. Floor and join alternate ``--repeat`` times
(default 3); each figure is the best. ``--corpus`` (default both): ``bench.join_corpus`` (1) or
``bench.corpus2``'s pre-join runs (2: its shapes, ``--avg-bytes`` a rollout, one capture file
each). ``--small-files`` adds a third: ``bench.join_corpus`` rollouts with two short calls each
and 35 % more capture files than rows (files no row reads), where per-file costs dominate.
Usage: ``python -m bench.join [--sizes 5000 20000] [--seed 0] [--repeat 3] [--workers N]
[--corpus 1|2|both] [--small-files]``.
"""

from __future__ import annotations

import argparse
import itertools
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

from bench import corpus2  # noqa: E402
from bench.health import _generator_fingerprint, corpus_names, run_measured  # noqa: E402
from bench.join_corpus import write_run  # noqa: E402

CORPUS = Path(__file__).parent / "_corpus"
SMALL_FILES = "small files"
"""The ``--small-files`` corpus's name."""

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


def corpus(rows: int, seed: int, generator: str = "1", avg_bytes: int = 8_000) -> Path:
    """The cached run directory for ``rows`` rollouts (generated once): ``bench.join_corpus``
    (``generator`` "1"), ``bench.corpus2``'s pre-join run ("2", ``avg_bytes`` a rollout) or the
    small-files run (:data:`SMALL_FILES`)."""
    if generator == "1":
        run_dir = CORPUS / f"join-{rows}-{seed}"
    elif generator == SMALL_FILES:
        run_dir = CORPUS / f"join-small-{rows}-{seed}"
    else:
        run_dir = CORPUS / f"join2-{rows}-avg{avg_bytes}-{seed}-{_generator_fingerprint(generator)}"
    done = run_dir / ".complete"
    if not done.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        start = time.perf_counter()
        if generator == "1":
            write_run(run_dir, rows, seed=seed, calls=5, call_bytes=2000)
        elif generator == SMALL_FILES:
            _write_small_files(run_dir, rows, seed)
        else:
            corpus2.write_prejoin_run(run_dir, rows, seed=seed, avg_bytes=avg_bytes)
        done.write_text("ok\n")
        print(f"  generated {rows} rollouts in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return run_dir


def _write_small_files(run_dir: Path, rows: int, seed: int) -> None:
    """``bench.join_corpus`` with two short calls a rollout, and 35 % more capture files than
    rows: the rollouts of the extra files are cut from the end of ``rollouts.jsonl``, so no row
    reads them (the issue's unseen corpus had 20,000 rows and 27,000 capture files)."""
    write_run(run_dir, rows * 27 // 20, seed=seed, calls=2, call_bytes=400)
    path = run_dir / "rollouts.jsonl"
    with open(path, "rb") as f:
        kept = b"".join(itertools.islice(f, rows))
    path.write_bytes(kept)


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


def write_seconds(run_dir: Path, nbytes: int) -> float:
    """Seconds to write ``nbytes`` bytes (in 4 MB writes) to a new file beside the output and
    fsync it: the output's share of the floor."""
    target = run_dir / ".floor-write"
    block = b"x" * (4 << 20)
    began = time.perf_counter()
    with open(target, "wb", buffering=0) as sink:
        left = nbytes
        while left > 0:
            left -= sink.write(memoryview(block)[: min(left, len(block))])
        os.fsync(sink.fileno())
    elapsed = time.perf_counter() - began
    target.unlink()
    return elapsed


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
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each measurement")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="join processes (default: CPUs)"
    )
    parser.add_argument("--corpus", choices=["1", "2", "both"], default="both")
    parser.add_argument(
        "--avg-bytes", type=int, default=8_000, help="rollout size of corpus 2 (default 8000)"
    )
    parser.add_argument(
        "--small-files",
        action="store_true",
        help="also a corpus of small rollouts with 35%% more capture files than rows",
    )
    args = parser.parse_args(argv)
    for generator in corpus_names(args.corpus) + ([SMALL_FILES] if args.small_files else []):
        tag = f"[corpus {generator}]"
        rows = []
        for size in args.sizes:
            run_dir = corpus(size, args.seed, generator, args.avg_bytes)
            parses: list[tuple[float, float, int]] = []
            joins: list[dict[str, float]] = []
            writes: list[float] = []
            for _ in range(args.repeat):  # interleaved: floor and join see the same machine
                parses.append(parse_all(run_dir))
                joins.append(join_once(run_dir, args.workers))
                writes.append(write_seconds(run_dir, (run_dir / "rollouts_joined.jsonl").stat().st_size))
            parse_s, parse_cpu, nbytes = min(parses)
            write_s = min(writes)
            floor = parse_s + write_s
            best = min(joins, key=lambda j: j["wall"])
            out_bytes = (run_dir / "rollouts_joined.jsonl").stat().st_size
            rows.append((size, best))
            cpu = min(j["cpu"] for j in joins)
            print(
                f"{tag} {size:>6} rollouts, {args.workers} workers: input {nbytes / 2**20:.1f} MiB, "
                f"output {out_bytes / 2**20:.1f} MiB; join {best['wall']:.2f}s "
                f"(in-process {best['join']:.2f}s); floor {floor:.2f}s (parse {parse_s:.2f}s + write "
                f"{write_s:.2f}s); ratio = join / floor = {best['wall'] / floor:.2f} (in-process "
                f"{best['join'] / floor:.2f}; join / parse {best['wall'] / parse_s:.2f}); "
                f"peak RSS of the process tree {best['rss'] / 1e6:.1f} MB "
                f"(largest process {best['single_rss'] / 1e6:.1f} MB); CPU time: parse {parse_cpu:.2f}s, "
                f"join {cpu:.2f}s (whole process, all workers), ratio {cpu / parse_cpu:.2f}",
                flush=True,
            )
        if len(rows) > 1:
            first, last = rows[0][1]["rss"], rows[-1][1]["rss"]
            print(
                f"{tag} peak RSS {rows[0][0]} -> {rows[-1][0]} rollouts: "
                f"{first / 1e6:.1f} -> {last / 1e6:.1f} MB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
