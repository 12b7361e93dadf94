"""The screenshot of an ``eval post`` run's Artifacts tab in the Prefect UI, ``docs/flow-run-artifacts.png``
(run once by hand; the PNG is committed):

    python -m bench.ui_screenshot [--out docs] [--chromium /usr/bin/chromium]

Runs ``gymflow eval post`` on a copy of ``examples/post_run`` against a local Prefect server of a
temporary ``PREFECT_HOME`` (started by the command, stopped at the end), then opens the run's page
in headless Chromium.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "post_run"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    from playwright import sync_api

    with tempfile.TemporaryDirectory(prefix="gymflow-ui-shot-") as scratch:
        run = Path(scratch) / "post_run"
        shutil.copytree(EXAMPLE / "shards", run / "shards")
        env = {**os.environ, "PREFECT_HOME": str(Path(scratch) / "prefect")}
        env.pop("PREFECT_API_URL", None)
        gymflow = [sys.executable, "-m", "gymflow.cli"]
        try:
            done = subprocess.run(
                [*gymflow, "eval", "post", str(run)], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                sys.exit(f"eval post failed: {done.stderr.strip()}")
            url = next(
                line.split("flow run: ", 1)[1] for line in done.stdout.splitlines() if "flow run: " in line
            )
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=args.chromium,
                    args=[
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-quic",
                        "--disable-background-networking",
                    ],
                )
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(url)
                    page.get_by_text("Artifacts", exact=True).first.click(timeout=30_000)
                    page.get_by_text("eval-post-post-run-", exact=False).first.wait_for(timeout=20_000)
                    page.wait_for_timeout(1000)
                    page.screenshot(path=str(args.out / "flow-run-artifacts.png"))
                    print(f"wrote {args.out / 'flow-run-artifacts.png'}")
                finally:
                    browser.close()
        finally:
            subprocess.run([*gymflow, "ui", "--stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
