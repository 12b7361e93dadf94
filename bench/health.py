"""Benchmark: ``gymflow eval health-check`` against a plain ``orjson.loads`` of the same rollouts.

Run from the repo root: ``python bench/health.py [--rows N] [--corpus 1|2|both] [--repeat R] [--quick]``.

1. For each corpus generator chosen (``--corpus``, default both: ``bench.corpus``, ~16 KB rollouts
   of one size band, and ``bench.corpus2``, other shapes; see their docstrings), generates (or
   reuses, from ``bench/_corpus/``) two seeded corpora: ``--rows`` rows (default 40,000, ~650 MB)
   and a quarter of that (10,000).
2. ``parse_s`` (the floor): one process reads the file in binary and ``orjson.loads`` every line.
3. ``health_direct_s``: ``gymflow eval health-check DIR --direct`` (default workers) as a subprocess
   on each corpus: wall time, and the peak RSS of its process tree (psutil, every 50 ms, summing
   the process and all its descendants) plus the largest single process.
4. ``ratio`` = ``health_direct_s / parse_s`` (target on the 2-core machine: <= 1.0), and the peak
   tree RSS at both sizes (target: <= 150 MB, flat from the small corpus to the large one). Parse
   and health runs alternate ``--repeat`` times (default 3) and each figure is the best of them,
   its floor measured in the same run (the machine may be shared); peaks are the largest seen.
5. ``gym_0.7.0_s``: NeMo Gym 0.7.0's own ``gym eval health-check DIR`` on the large corpus (default
   workers), when a ``gym`` executable of that version is found (``--gym PATH``, else a venv under
   ``/tmp``, ``/work`` or ``~`` whose ``gym`` reports nemo-gym 0.7.0, else ``gym`` on PATH), and
   gymflow's speed-up over it; skipped with a note otherwise.
6. ``health_prefect_s``: the same command without ``--direct`` (orchestrated through Prefect) on the
   large corpus, wall time, with an empty Prefect result store so no task result is reused.

Reports and provenance left by an earlier run are deleted before each run, so none is a cache hit.
Needs ``psutil`` (``pip install psutil``).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

from bench import corpus, corpus2  # noqa: E402

CORPUS_ROOT = REPO / "bench" / "_corpus"
ROLLOUTS = "rollouts.jsonl"
REPORT_FILES = ("quality_summary.json", "rollout_verdicts.jsonl")
POLL_SECONDS = 0.05
RUN_TIMEOUT_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Measurement:
    """One subprocess run of the health check."""

    seconds: float
    returncode: int
    peak_tree_rss: int
    """Largest sum of RSS over the process and its descendants, in bytes."""
    peak_single_rss: int
    """Largest RSS of any one process of the tree, in bytes."""
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


GENERATORS: dict[str, Any] = {"1": corpus, "2": corpus2}
"""The corpus generators, by the name ``--corpus`` takes: ``bench.corpus`` and ``bench.corpus2``."""


def corpus_names(choice: str) -> list[str]:
    """The generators a ``--corpus`` value selects (``both``: every one)."""
    return list(GENERATORS) if choice == "both" else [choice]


def _generator_fingerprint(generator: str = "1") -> str:
    return hashlib.sha256(Path(GENERATORS[generator].__file__).read_bytes()).hexdigest()[:12]


def ensure_corpus(rows: int, seed: int, avg_bytes: int, generator: str = "1") -> Path:
    """The run directory holding the seeded corpus of ``generator`` (``"1"``: ``bench.corpus``,
    ``"2"``: ``bench.corpus2``), generated if missing or made by other code."""
    tag = "" if generator == "1" else f"c{generator}-"
    prefix = f"{tag}rows{rows}-avg{avg_bytes}-seed{seed}-"
    run_dir = CORPUS_ROOT / (prefix + _generator_fingerprint(generator))
    path = run_dir / ROLLOUTS
    if path.is_file():
        return run_dir
    if CORPUS_ROOT.is_dir():
        for stale in CORPUS_ROOT.glob(prefix + "*"):
            shutil.rmtree(stale, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    GENERATORS[generator].write_corpus(str(path), rows, seed=seed, avg_bytes=avg_bytes)
    elapsed = time.perf_counter() - began
    size = path.stat().st_size
    print(
        f"generated {path.relative_to(REPO)}: {rows} rows, {size / 1e6:.0f} MB in {elapsed:.1f} s "
        f"({size / 1e6 / elapsed:.0f} MB/s)",
        flush=True,
    )
    return run_dir


def warm_page_cache(path: Path) -> None:
    """Read the file once so every measurement starts from the page cache."""
    with open(path, "rb", buffering=0) as handle:
        while handle.read(16 << 20):
            pass


def parse_seconds(path: Path) -> tuple[float, int]:
    """Seconds to ``orjson.loads`` every non-blank line of ``path`` in one process, and the line count."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    lines = 0
    began = time.perf_counter()
    with open(path, "rb") as handle:
        for line in handle:
            if line.isspace():
                continue
            lines += 1
            try:
                loads(line)
            except decode_error:
                pass
    return time.perf_counter() - began, lines


def gymflow_executable() -> str | None:
    """The ``gymflow`` console script of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "gymflow"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("gymflow")


REFERENCE_VERSION = "0.7.0"


def _nemo_gym_version(executable: str) -> str | None:
    """The nemo-gym version installed beside a ``gym`` executable (its venv's python), else None."""
    python = Path(executable).parent / "python"
    if not python.is_file():
        return None
    try:
        done = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('nemo-gym'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def reference_executable(explicit: str | None) -> str | None:
    """NeMo Gym 0.7.0's ``gym``: ``explicit``, else the first venv or PATH entry of that version."""
    if explicit is not None:
        return explicit
    home = str(Path.home())
    candidates = sorted(
        {
            *glob.glob("/tmp/*venv*/bin/gym"),
            *glob.glob("/work/*venv*/bin/gym"),
            *glob.glob(f"{home}/*venv*/bin/gym"),
            *glob.glob(f"{home}/.venvs/*/bin/gym"),
        }
    )
    on_path = shutil.which("gym")
    for candidate in [*candidates, *([on_path] if on_path else [])]:
        if os.access(candidate, os.X_OK) and _nemo_gym_version(candidate) == REFERENCE_VERSION:
            return candidate
    return None


def reference_health_check(executable: str, run_dir: Path) -> Measurement:
    clear_reports(run_dir)
    try:
        return run_measured([executable, "eval", "health-check", str(run_dir)])
    finally:
        clear_reports(run_dir)  # the reference writes the same report names


def clear_reports(run_dir: Path) -> None:
    for name in REPORT_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for record in run_dir.glob("*.provenance.json"):
        record.unlink()


def run_measured(command: Sequence[str], env: Mapping[str, str] | None = None) -> Measurement:
    """Run ``command``, polling the RSS of its process tree every 50 ms until it exits."""
    import psutil

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        process = psutil.Popen(list(command), stdout=out, stderr=err, env=dict(env) if env else None)
        peak_tree = peak_single = 0
        while True:
            try:
                returncode = process.wait(timeout=POLL_SECONDS)
                break
            except psutil.TimeoutExpired:
                pass
            if time.perf_counter() - began > RUN_TIMEOUT_SECONDS:
                _kill_tree(process)
                returncode = process.wait()
                break
            try:
                members = [process, *process.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            total = 0
            for member in members:
                try:
                    rss = member.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                total += rss
                peak_single = max(peak_single, rss)
            peak_tree = max(peak_tree, total)
        seconds = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        return Measurement(
            seconds,
            returncode,
            peak_tree,
            peak_single,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def _kill_tree(process: Any) -> None:
    import psutil

    for member in [*process.children(recursive=True), process]:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass


def health_check(run_dir: Path, direct: bool) -> Measurement:
    executable = gymflow_executable()
    if executable is None:
        return Measurement(0.0, -1, 0, 0, "", "no gymflow executable beside sys.executable or on PATH")
    clear_reports(run_dir)
    command = [executable, "eval", "health-check", str(run_dir)]
    env = dict(os.environ)
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if direct:
        return run_measured([*command, "--direct"], env)
    # A fresh result store: the evaluate-range tasks are cached by input hash and byte range.
    with tempfile.TemporaryDirectory(prefix="gymflow-bench-results-") as results:
        env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = results
        return run_measured(command, env)


def _failure(measurement: Measurement) -> str:
    lines = [line for line in measurement.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else "(no stderr)"
    return f"FAILED (exit {measurement.returncode}): {last}"


def _mb(value: int) -> str:
    return f"{value / (1 << 20):.0f}"


def _console(measurement: Measurement) -> str:
    for line in measurement.stdout.splitlines():
        if line.startswith("Rollout health:"):
            return line
    return ""


def _best(runs: Sequence[Measurement]) -> Measurement:
    """The fastest successful run (a failed one if none succeeded), with the peaks of all runs."""
    ok = [run for run in runs if run.ok]
    if not ok:
        return runs[-1]
    fastest = min(ok, key=lambda run: run.seconds)
    return replace(
        fastest,
        peak_tree_rss=max(run.peak_tree_rss for run in ok),
        peak_single_rss=max(run.peak_single_rss for run in ok),
    )


def measure_corpus(run_dir: Path, repeat: int) -> tuple[float, int, Measurement]:
    """Best of ``repeat`` interleaved runs: the parse floor (seconds, lines) and the direct health
    check (fastest wall time; peak RSS over every run)."""
    path = run_dir / ROLLOUTS
    parses: list[tuple[float, int]] = []
    runs: list[Measurement] = []
    for _ in range(repeat):
        warm_page_cache(path)
        parses.append(parse_seconds(path))
        runs.append(health_check(run_dir, direct=True))
    parse_s, lines = min(parses)
    return parse_s, lines, _best(runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/health.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000, help="rows of the large corpus (default 40000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 and 500 rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--avg-bytes", type=int, default=16_000)
    parser.add_argument(
        "--corpus", choices=[*GENERATORS, "both"], default="both", help="bench.corpus (1), bench.corpus2 (2)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs; the best is reported")
    parser.add_argument("--parse-only", action="store_true", help="only generate the corpora and parse")
    parser.add_argument("--no-prefect", action="store_true", help="skip the orchestrated (Prefect) run")
    parser.add_argument("--gym", help=f"NeMo Gym {REFERENCE_VERSION}'s gym executable (default: search)")
    parser.add_argument("--no-gym", action="store_true", help=f"skip NeMo Gym {REFERENCE_VERSION}'s run")
    args = parser.parse_args(argv)
    large_rows = 2_000 if args.quick else args.rows
    if large_rows < 1 or args.repeat < 1:
        parser.error("--rows and --repeat must be at least 1")
    small_rows = max(1, large_rows // 4)
    failed = False
    for name in corpus_names(args.corpus):
        failed |= _bench_corpus(name, small_rows, large_rows, args)
    return 1 if failed else 0


def _bench_corpus(name: str, small_rows: int, large_rows: int, args: argparse.Namespace) -> bool:
    """Every figure of one corpus; whether any run failed."""
    large = ensure_corpus(large_rows, args.seed, args.avg_bytes, name)
    small = ensure_corpus(small_rows, args.seed, args.avg_bytes, name)
    large_file = large / ROLLOUTS
    size = large_file.stat().st_size
    tag = f"[corpus {name}]"
    print(f"{tag} {large_file.relative_to(REPO)} ({large_rows} rows, {size / 1e6:.0f} MB)", flush=True)
    if args.parse_only:
        warm_page_cache(large_file)
        parse_s, lines = min(parse_seconds(large_file) for _ in range(args.repeat))
        print(f"{tag} parse_s = {parse_s:.2f}  ({lines} lines, {size / 1e6 / parse_s:.0f} MB/s)")
        return False

    failed = False
    small_label, large_label = _label(small_rows), _label(large_rows)
    results = {
        small_label: measure_corpus(small, args.repeat),
        large_label: measure_corpus(large, args.repeat),
    }
    for label, (parse_s, lines, run) in results.items():
        if not run.ok:
            failed = True
            print(f"{tag} {label}: health_direct_s = {_failure(run)}")
            continue
        print(
            f"{tag} {label}: health_direct_s = {run.seconds:.2f}  floor parse_s = {parse_s:.2f} "
            f"({lines} lines, orjson, 1 process)  ratio = {run.seconds / parse_s:.2f}  "
            f"peak_tree_rss_mb = {_mb(run.peak_tree_rss)} (largest process {_mb(run.peak_single_rss)})  "
            f"({_console(run)})",
            flush=True,
        )
    peaks = [run.peak_tree_rss for _, _, run in results.values() if run.ok]
    if len(peaks) == 2:
        print(
            f"{tag} tree_rss_growth_mb ({small_label} -> {large_label}) = "
            f"{(peaks[1] - peaks[0]) / (1 << 20):+.0f}  "
            "(targets: ratio <= 1.0, peak tree RSS <= 150 MB, flat)"
        )
    parse_s, _, direct_large = results[large_label]
    reference = None if args.no_gym else reference_executable(args.gym)
    if reference is None:
        reason = "skipped" if args.no_gym else f"no gym executable of NeMo Gym {REFERENCE_VERSION} found"
        print(f"{tag} gym_{REFERENCE_VERSION}_s = {reason}")
    else:
        measured = reference_health_check(reference, large)
        if not measured.ok:
            print(f"{tag} gym_{REFERENCE_VERSION}_s = {_failure(measured)}  ({reference})")
        else:
            print(
                f"{tag} gym_{REFERENCE_VERSION}_s = {measured.seconds:.2f}  ratio = "
                f"{measured.seconds / parse_s:.2f} ({_console(measured) or reference}; "
                f"peak tree RSS {_mb(measured.peak_tree_rss)} MB)"
            )
            if direct_large.ok:
                speedup = measured.seconds / direct_large.seconds
                print(f"{tag} speedup = gym {REFERENCE_VERSION} / gymflow = {speedup:.1f}x")
    if not args.no_prefect:
        orchestrated = health_check(large, direct=False)
        if orchestrated.ok:
            print(
                f"{tag} health_prefect_s = {orchestrated.seconds:.2f}  "
                f"ratio = {orchestrated.seconds / parse_s:.2f}"
                f"  (peak tree RSS {_mb(orchestrated.peak_tree_rss)} MB)"
            )
        else:
            failed = True
            print(f"{tag} health_prefect_s = {_failure(orchestrated)}")
    return failed


def _label(rows: int) -> str:
    return f"{rows // 1000}k" if rows % 1000 == 0 else str(rows)


if __name__ == "__main__":
    sys.exit(main())
