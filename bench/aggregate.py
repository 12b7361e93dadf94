"""Benchmark: ``gymflow eval aggregate --direct --no-health-check`` against its floor.

Run from the repo root: ``python bench/aggregate.py [--rows N] [--repeat R] [--corpus 1|2|both]``.

1. For each corpus generator chosen (``--corpus``, default both): ``bench.corpus`` (~16 KB
   rollouts of one size band, contiguous shards) or ``bench.corpus2`` (other shapes, round-robin
   shards, some lines the merge must re-serialise), without their deliberately unreadable and
   duplicate rows, as 8 shards (``rollouts_shard_{i}.jsonl``), for a quarter of ``--rows``
   (default 40,000: 10k) and for ``--rows``.
2. The floor: ``parse_s``, one process reads every shard in binary and ``orjson.loads`` every
   line, plus ``write_s``, writing the same number of bytes (the shards' bytes, read in 4 MB
   chunks) to a new file in the output directory and ``fsync``-ing it, as the merged file is.
3. ``aggregate_s``: ``gymflow eval aggregate -i '<dir>/rollouts_shard_*.jsonl' -o <out> --direct
   --no-health-check --no-cache`` (its default workers) as a subprocess: wall time (merge, metrics
   and provenance, the merged file included) and ``peak_tree_rss_mb``, the peak RSS of its whole
   process tree (parent plus workers, psutil every 50 ms); ``ratio = aggregate_s / (parse_s +
   write_s)`` and ``ratio_parse = aggregate_s / parse_s``.
4. ``metrics_s``: in-process, the reduce step alone (every group's metrics over all rows, from the
   facts the shard scans kept).
5. ``rss_flatness``: the peak tree RSS at the larger size over that at the smaller one (1.00 when
   memory does not grow with the input).

Each figure is the best of ``--repeat`` interleaved runs, its floor measured in the same run (the
machine may be shared). Targets on the 2-core machine: ratio <= 1.5, metrics_s < 0.5, peak tree
RSS <= 300 MB and flat.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import corpus, corpus2  # noqa: E402
from bench.health import (  # noqa: E402
    CORPUS_ROOT,
    GENERATORS,
    _generator_fingerprint,
    corpus_names,
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
MIX2 = {
    kind: weight for kind, weight in corpus2.DEFAULT_MIX.items() if kind not in ("unreadable", "duplicate")
}


def ensure_shards(rows: int, seed: int = 0, avg_bytes: int = 16_000, generator: str = "1") -> Path:
    tag = "" if generator == "1" else f"c{generator}-"
    fingerprint = _generator_fingerprint(generator)
    directory = CORPUS_ROOT / f"{tag}shards{SHARDS}-clean-rows{rows}-avg{avg_bytes}-seed{seed}-{fingerprint}"
    if len(list(directory.glob(PATTERN))) == SHARDS:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    mix = MIX if generator == "1" else MIX2
    GENERATORS[generator].write_corpus(
        str(directory), rows, seed=seed, avg_bytes=avg_bytes, mix=mix, shards=SHARDS
    )
    print(f"generated {SHARDS} shards of {rows} rows in {time.perf_counter() - began:.1f} s", flush=True)
    return directory


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_seconds(shards: list[Path], out: Path) -> float:
    """Seconds to write the shards' bytes (read in 4 MB chunks) to one new file and fsync it."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "floor.jsonl"
    buffer = bytearray(4 << 20)
    began = time.perf_counter()
    with open(target, "wb", buffering=0) as sink:
        for shard in shards:
            with open(shard, "rb", buffering=0) as source:
                while count := source.readinto(buffer):
                    sink.write(memoryview(buffer)[:count])
        os.fsync(sink.fileno())
    elapsed = time.perf_counter() - began
    target.unlink()
    return elapsed


def measure(rows: int, repeat: int, generator: str = "1") -> dict[str, float]:
    """Best of ``repeat`` interleaved runs of each (the machine may be shared: take minima)."""
    directory = ensure_shards(rows, generator=generator)
    shards = sorted(directory.glob(PATTERN))
    out = directory / "out"
    executable = gymflow_executable() or "gymflow"
    command = [
        executable, "eval", "aggregate", "-i", str(directory / PATTERN), "-o", str(out / "merged.jsonl"),
        "--direct", "--no-health-check", "--no-cache",
    ]  # fmt: skip
    best = {"parse_s": float("inf"), "parse_cpu_s": float("inf"), "aggregate_s": float("inf"),
            "aggregate_cpu_s": float("inf"), "peak_rss_mb": 0.0, "write_s": float("inf")}  # fmt: skip
    for _ in range(repeat):
        for shard in shards:
            warm_page_cache(shard)
        cpu = time.process_time()
        parse = sum(parse_seconds(shard)[0] for shard in shards)
        best["parse_cpu_s"] = min(best["parse_cpu_s"], time.process_time() - cpu)
        best["parse_s"] = min(best["parse_s"], parse)
        shutil.rmtree(out, ignore_errors=True)
        best["write_s"] = min(best["write_s"], write_seconds(shards, out))
        shutil.rmtree(out, ignore_errors=True)
        cpu = _children_cpu()
        run = run_measured(command)
        if not run.ok:
            raise SystemExit(f"aggregate failed ({run.returncode}):\n{run.stderr}")
        best["aggregate_cpu_s"] = min(best["aggregate_cpu_s"], _children_cpu() - cpu)
        best["aggregate_s"] = min(best["aggregate_s"], run.seconds)
        best["peak_rss_mb"] = max(best["peak_rss_mb"], run.peak_tree_rss / 2**20)
    size = sum(shard.stat().st_size for shard in shards)
    floor = best["parse_s"] + best["write_s"]
    return {
        "rows": rows, "mb": size / 1e6, **best, "floor_s": floor,
        "ratio": best["aggregate_s"] / floor, "ratio_parse": best["aggregate_s"] / best["parse_s"],
    }  # fmt: skip


def metrics_seconds(rows: int, generator: str = "1") -> float:
    """Seconds of the reduce step alone, in-process, after scanning the shards (not timed)."""
    from gymflow.aggregate import AggregateOptions, reduce_shards, scan_part

    directory = ensure_shards(rows, generator=generator)
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
    parser.add_argument("--corpus", choices=[*GENERATORS, "both"], default="both")
    parser.add_argument("--no-metrics", action="store_true", help="skip the in-process reduce timing")
    args = parser.parse_args()
    for generator in corpus_names(args.corpus):
        tag = f"[corpus {generator}]"
        results = [
            measure(args.rows // 4, args.repeat, generator),
            measure(args.rows, args.repeat, generator),
        ]
        for r in results:
            metrics = ""
            if not args.no_metrics:
                seconds = min(metrics_seconds(int(r["rows"]), generator) for _ in range(args.repeat))
                metrics = f" metrics_s={seconds:.3f}"
            print(
                f"{tag} rows={r['rows']:.0f} ({r['mb']:.0f} MB, {SHARDS} shards): "
                f"aggregate_s={r['aggregate_s']:.2f} "
                f"floor_s={r['floor_s']:.2f} (parse_s={r['parse_s']:.2f} + write_s={r['write_s']:.2f}) "
                f"ratio={r['ratio']:.2f} ratio_parse={r['ratio_parse']:.2f}{metrics} "
                f"peak_tree_rss_mb={r['peak_rss_mb']:.0f} (CPU s: parse {r['parse_cpu_s']:.2f}, "
                f"aggregate {r['aggregate_cpu_s']:.2f} over all its processes)",
                flush=True,
            )
        small, large = results
        print(
            f"{tag} rss_flatness={large['peak_rss_mb'] / small['peak_rss_mb']:.2f} (peak tree RSS "
            f"{small['peak_rss_mb']:.0f} MB at {small['rows']:.0f} rows, {large['peak_rss_mb']:.0f} MB at "
            f"{large['rows']:.0f}); targets: ratio <= 1.5, metrics_s < 0.5, peak tree RSS <= 300 MB and flat"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
