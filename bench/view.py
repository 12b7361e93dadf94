"""``gymflow view`` and ``report.html`` at scale: a synthetic run of N rollouts (default 160,000),
then the size and load time of ``report.html`` and of the server's rollouts page.

    python -m bench.view [--rows 160000] [--dir /tmp/gymflow-view-bench] [--chromium /usr/bin/chromium]

The run is written directly (rollouts with a small trajectory, their verdicts, a quality summary,
re-verified rewards for every tenth row), not by running health-check: this measures the viewer.
Timings: indexing (``load_run``), writing ``report.html``, one rollouts page over HTTP (first,
middle, filtered), and, with Chromium, the browser's load event for each.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from gymflow.view import ViewServer, load_run, write_report_html
from gymflow.view._report import ReportJob

CHECKS = (
    "agent_turn_hollow",
    "model_call_zero_completion_tokens",
    "model_call_failed",
    "rollout_token_count_mismatch",
)
REPEATS = 8


def _rollout(task: int, rollout: int, reward: float, rng: random.Random) -> dict[str, Any]:
    answer = " ".join(rng.choice(("lo", "ma", "ri", "tesa", "nu", "kaval")) for _ in range(12))
    call: dict[str, Any] = {
        "model_call_id": f"mc-{task}-{rollout}",
        "duration_ms": 812.0,
        "request": {
            "model": "policy",
            "input": [{"type": "message", "role": "user", "content": f"question {task}"}],
        },
        "response": {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}
            ]
        },
        "response_metadata": {"model": "policy", "status_code": 200, "finish_reason": "stop"},
        "token_stats": {"prompt_tokens": 150, "completion_tokens": 20, "total_tokens": 170},
    }
    return {
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "responses_create_params": {"input": call["request"]["input"]},
        "response": {"output": call["response"]["output"], "usage": {"input_tokens": 150}},
        "reward": reward,
        "agent_ref": {"name": "bench_agent"},
        "ng_trajectory": {
            "schema_version": "1.0",
            "task_id": str(task),
            "rollout_id": f"{task}-{rollout}",
            "turns": [{"turn_no": 1, "question": f"question {task}", "answer": answer, "step_count": 0,
                       "model_calls": [{"model_call_id": call["model_call_id"]}]}],
            "model_calls": [call],
            "tool_calls": [],
            "gaps": [],
        },
    }  # fmt: skip


def write_synthetic_run(directory: Path, rows: int, seed: int = 7) -> dict[str, int]:
    """A run of ``rows`` rollouts (tasks of 8 repeats): rollouts.jsonl, rollout_verdicts.jsonl,
    quality_summary.json and rollouts_reverified.jsonl (every tenth row, its reward flipped every
    thirtieth). Rows with ``n % 7 == 3`` are unhealthy (one check each, by ``n % 4``), ``n % 11 == 5``
    unobserved. Returns the verdict counts."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    verdicts = {"healthy": 0, "unhealthy": 0, "unobserved": 0}
    issues = dict.fromkeys(CHECKS, 0)
    with (
        (directory / "rollouts.jsonl").open("wb") as out,
        (directory / "rollout_verdicts.jsonl").open("wb") as judged,
        (directory / "rollouts_reverified.jsonl").open("wb") as again,
    ):
        for n in range(rows):
            task, rollout = divmod(n, REPEATS)
            reward = 1.0 if n % 3 else 0.0
            out.write(orjson.dumps(_rollout(task, rollout, reward, rng)) + b"\n")
            findings: list[dict[str, Any]] = []
            if n % 7 == 3:
                check = CHECKS[n % 4]
                findings = [{"check": check, "locator": {"turn": 1}, "detail": {"n": n}}]
                verdict = "unhealthy"
                issues[check] += 1
            else:
                verdict = "unobserved" if n % 11 == 5 else "healthy"
            verdicts[verdict] += 1
            row = {"_ng_task_index": task, "_ng_rollout_index": rollout, "rollout_id": f"{task}-{rollout}",
                   "verdict": verdict, "findings": findings, "unobserved": []}  # fmt: skip
            judged.write(orjson.dumps(row) + b"\n")
            if n % 10 == 0:
                after = (1.0 - reward) if n % 30 == 0 else reward
                again.write(
                    orjson.dumps({"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": after})
                    + b"\n"
                )
    summary = {"run": {"verdicts": verdicts, "issues": issues}, "tasks": {}}
    (directory / "quality_summary.json").write_text(json.dumps(summary))
    return verdicts


def _get(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def _browser_load(chromium: str, urls: list[str]) -> list[float]:
    from playwright import sync_api

    out = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            for url in urls:
                page.goto(url, wait_until="load")
                out.append(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
        finally:
            browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=160_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gymflow-view-bench"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "")
    args = parser.parse_args()
    run = args.dir / f"run-{args.rows}"
    if not (run / "rollout_verdicts.jsonl").is_file():
        started = time.perf_counter()
        write_synthetic_run(run, args.rows)
        print(f"wrote the synthetic run in {time.perf_counter() - started:.1f} s")
    size = (run / "rollouts.jsonl").stat().st_size
    print(f"{args.rows} rollouts: rollouts.jsonl {size / 2**20:.1f} MiB")

    started = time.perf_counter()
    reports = load_run(str(run))
    print(f"load_run (index {len(reports.index or ())} rows): {time.perf_counter() - started:.2f} s")
    started = time.perf_counter()
    write_report_html(ReportJob(str(run)))
    html = run / "report.html"
    elapsed = time.perf_counter() - started
    print(f"report.html: {html.stat().st_size / 2**10:.0f} KiB, written in {elapsed:.2f} s")

    with ViewServer(reports, 0) as server:
        base = f"http://127.0.0.1:{server.port}"
        middle = (len(reports.index or ()) // 100) // 2
        pages = {
            "rollouts page 1": f"{base}/rollouts",
            f"rollouts page {middle + 1}": f"{base}/rollouts?page={middle}",
            "rollouts verdict=unhealthy check=model_call_failed page 3": (
                f"{base}/rollouts?verdict=unhealthy&check=model_call_failed&page=2"
            ),
            "rollout 80000": f"{base}/rollout/{min(80_000, args.rows - 1)}",
        }
        for label, url in pages.items():
            times = []
            for _ in range(5):
                elapsed, length = _get(url)
                times.append(elapsed)
            print(f"GET {label}: {length / 2**10:.0f} KiB, median {statistics.median(times) * 1000:.0f} ms")
        if args.chromium:
            loads = _browser_load(
                args.chromium, [html.as_uri(), pages["rollouts page 1"], pages[f"rollouts page {middle + 1}"]]
            )
            print(f"Chromium load event: report.html {loads[0]:.2f} s, rollouts page 1 {loads[1]:.2f} s, "
                  f"rollouts page {middle + 1} {loads[2]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
