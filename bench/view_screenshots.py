"""The screenshots of ``gymflow view`` in ``docs/`` (run once by hand; the PNGs are committed):

    python -m bench.view_screenshots [--out docs] [--chromium /usr/bin/chromium]

Every page of the example run (``examples/post_run`` after ``eval post --direct``), served by
``gymflow view`` in-process, and the reverify page of a re-verified run made against the tests'
``/verify`` server (``tests/view/conftest.py``), in headless Chromium.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from gymflow.view import ViewServer, load_run
from gymflow.view._site import ServerLinks
from tests.view.conftest import post_example, post_reverified


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    from playwright import sync_api

    with tempfile.TemporaryDirectory(prefix="gymflow-shots-") as scratch:
        example = post_example(Path(scratch) / "post_run")
        reverified = post_reverified(Path(scratch) / "reverified" / "run")
        shots: list[tuple[str, ViewServer, str]] = []
        with (
            ViewServer(load_run(str(example)), 0) as plain,
            ViewServer(load_run(str(reverified)), 0) as again,
        ):
            links = ServerLinks(plain.reports.run)
            first_unhealthy = plain.reports.index.by_verdict["unhealthy"][1]  # type: ignore[union-attr]
            shots = [
                ("view-overview", plain, links.page("overview")),
                ("view-rollouts", plain, links.page("rollouts") + "&verdict=unhealthy"),
                ("view-rollout", plain, links.rollout(first_unhealthy)),
                ("view-metrics", plain, links.page("metrics")),
                ("view-reverify", again, ServerLinks(again.reports.run).page("reverify")),
                ("view-provenance", plain, links.page("provenance")),
            ]
            with sync_api.sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                try:
                    page = browser.new_page(viewport={"width": 1280, "height": 860})
                    for name, server, path in shots:
                        page.goto(f"http://127.0.0.1:{server.port}{path}")
                        page.screenshot(path=str(args.out / f"{name}.png"))
                        print(f"wrote {args.out / name}.png")
                    page.goto((example / "report.html").as_uri() + "#rollouts")
                    page.screenshot(path=str(args.out / "report-html-rollouts.png"))
                    print(f"wrote {args.out / 'report-html-rollouts'}.png")
                finally:
                    browser.close()


if __name__ == "__main__":
    main()
