"""Benchmark: ``gymflow eval aggregate --direct --no-health-check`` against a plain ``orjson.loads``.

Run from the repo root: ``python bench/aggregate.py [--rows N] [--repeat R]``.

1. The seeded corpus of the health benchmark (``bench.corpus``, ~16 KB rollouts, seed 0) without
   its deliberately unreadable and duplicate rows, as 8 shards (``rollouts_shard_{i}.jsonl``), for
   a quarter of ``--rows`` (default 40,000: 10k) and for ``--rows``.
2. ``parse_s``: one process reads every shard in binary and ``orjson.loads`` every line.
3. ``aggregate_s``: ``gymflow eval aggregate -i '<dir>/rollouts_shard_*.jsonl' -o <out> --direct
   --no-health-check --no-cache`` (its default workers) as a subprocess: wall time (merge, metrics
   and provenance, the merged file included) and ``peak_tree_rss_mb``, the peak RSS of its whole
   process tree (parent plus workers, psutil every 50 ms); ``ratio = aggregate_s / parse_s``.
4. ``metrics_s``: in-process, the reduce step alone (every group's metrics over all rows, from the
   facts the shard scans kept).
5. ``rss_flatness``: the peak tree RSS at the larger size over that at the smaller one (1.00 when
   memory does not grow with the input).

Each figure is the best of ``--repeat`` interleaved runs (the machine may be shared). Targets on
the 2-core machine: ratio <= 1.5, metrics_s < 0.5, peak tree RSS <= 300 MB and flat.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import corpus  # noqa: E402
from bench.health import (  # noqa: E402
    CORPUS_ROOT,
    _generator_fingerprint,
    gymflow_executable,
    parse_seconds,
    run_measured,
    warm_page_cache,
)

SHARDS = 8
PATTERN = "rollouts_shard_*.jsonl"


# The health benchmark's mix without its unreadable lines and duplicate rows: aggregate stops on
# those by design (a malformed line or a repeated identity is an error, spec §1.3).
MIX = {kind: weight for kind, weight in corpus.DEFAULT_MIX.items() if kind not in ("unreadable", "duplicate")}


def ensure_shards(rows: int, seed: int = 0, avg_bytes: int = 16_000) -> Path:
    name = f"shards{SHARDS}-clean-rows{rows}-avg{avg_bytes}-seed{seed}-{_generator_fingerprint()}"
    directory = CORPUS_ROOT / name
    if len(list(directory.glob(PATTERN))) == SHARDS:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    corpus.write_corpus(str(directory), rows, seed=seed, avg_bytes=avg_bytes, mix=MIX, shards=SHARDS)
    print(f"generated {SHARDS} shards of {rows} rows in {time.perf_counter() - began:.1f} s", flush=True)
    return directory


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(rows: int, repeat: int) -> dict[str, float]:
    """Best of ``repeat`` interleaved runs of each (the machine may be shared: take minima)."""
    directory = ensure_shards(rows)
    shards = sorted(directory.glob(PATTERN))
    out = directory / "out"
    executable = gymflow_executable() or "gymflow"
    command = [
        executable, "eval", "aggregate", "-i", str(directory / PATTERN), "-o", str(out / "merged.jsonl"),
        "--direct", "--no-health-check", "--no-cache",
    ]  # fmt: skip
    best = {"parse_s": float("inf"), "parse_cpu_s": float("inf"), "aggregate_s": float("inf"),
            "aggregate_cpu_s": float("inf"), "peak_rss_mb": 0.0}  # fmt: skip
    for _ in range(repeat):
        for shard in shards:
            warm_page_cache(shard)
        cpu = time.process_time()
        parse = sum(parse_seconds(shard)[0] for shard in shards)
        best["parse_cpu_s"] = min(best["parse_cpu_s"], time.process_time() - cpu)
        best["parse_s"] = min(best["parse_s"], parse)
        shutil.rmtree(out, ignore_errors=True)
        cpu = _children_cpu()
        run = run_measured(command)
        if not run.ok:
            raise SystemExit(f"aggregate failed ({run.returncode}):\n{run.stderr}")
        best["aggregate_cpu_s"] = min(best["aggregate_cpu_s"], _children_cpu() - cpu)
        best["aggregate_s"] = min(best["aggregate_s"], run.seconds)
        best["peak_rss_mb"] = max(best["peak_rss_mb"], run.peak_tree_rss / 2**20)
    size = sum(shard.stat().st_size for shard in shards)
    return {"rows": rows, "mb": size / 1e6, **best, "ratio": best["aggregate_s"] / best["parse_s"]}


def metrics_seconds(rows: int) -> float:
    """Seconds of the reduce step alone, in-process, after scanning the shards (not timed)."""
    from gymflow.aggregate import AggregateOptions, reduce_shards, scan_part

    directory = ensure_shards(rows)
    options = AggregateOptions(input_glob=str(directory / PATTERN), output=str(directory / "unused.jsonl"))
    parts = [
        scan_part(str(shard), i, options, None) for i, shard in enumerate(sorted(directory.glob(PATTERN)))
    ]
    began = time.perf_counter()
    reduce_shards([p.scan for p in parts], [p.sidecars for p in parts], options.settings)
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; minima are reported")
    args = parser.parse_args()
    results = [measure(args.rows // 4, args.repeat), measure(args.rows, args.repeat)]
    for r in results:
        r["metrics_s"] = min(metrics_seconds(int(r["rows"])) for _ in range(args.repeat))
        print(
            f"rows={r['rows']:.0f} ({r['mb']:.0f} MB, {SHARDS} shards): parse_s={r['parse_s']:.2f} "
            f"aggregate_s={r['aggregate_s']:.2f} ratio={r['ratio']:.2f} metrics_s={r['metrics_s']:.3f} "
            f"peak_tree_rss_mb={r['peak_rss_mb']:.0f} (CPU s: parse {r['parse_cpu_s']:.2f}, "
            f"aggregate {r['aggregate_cpu_s']:.2f} over all its processes)",
            flush=True,
        )
    small, large = results
    print(
        f"rss_flatness={large['peak_rss_mb'] / small['peak_rss_mb']:.2f} (peak tree RSS "
        f"{small['peak_rss_mb']:.0f} MB at {small['rows']:.0f} rows, {large['peak_rss_mb']:.0f} MB at "
        f"{large['rows']:.0f}); targets: ratio <= 1.5, metrics_s < 0.5, peak tree RSS <= 300 MB and flat"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
