"""A person's view: the flow-run page of an ``eval post`` run, in headless Chromium (Debian's
package, which ``.ci/run`` installs), shows the run's summary artifact, whose report links open
the report's page in ``gymflow view``."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from gymflow.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "post_run"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_flow_run_page_shows_the_summary_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium package)")
    from playwright import sync_api

    from gymflow.flows import _server

    run = tmp_path / "browser-run"
    shutil.copytree(EXAMPLE / "shards", run / "shards")
    assert main(["eval", "post", str(run)]) == 0
    out = capsys.readouterr().out
    url = next(line.split("flow run: ", 1)[1] for line in out.splitlines() if "flow run: " in line)
    assert url.startswith(_server.base_url())
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.get_by_text("Artifacts", exact=True).first.click(timeout=30_000)
            summary = page.get_by_text("eval-post-browser-run-", exact=False).first
            summary.wait_for(timeout=20_000)
            text = page.inner_text("body")
            page.screenshot(path=str(tmp_path / "flow-run.png"))
            page.get_by_text(re.compile(r"^eval-post-browser-run-\w+-summary$")).first.click()
            opened = _open_a_report_link(page, run)
        finally:
            browser.close()
    assert "-summary" in text and "inputs and their SHA-256" in text
    assert (tmp_path / "flow-run.png").stat().st_size > 10_000
    if opened is not None:  # the link artifact opened the report's page in gymflow view
        assert run.as_uri() in opened and re.search(r"healthy\s+21\s+unhealthy\s+8", opened)


def _open_a_report_link(page: Any, run: Path) -> str | None:
    """Follow a report link of the run's artifacts, as the UI renders it, with ``gymflow view RUN``
    running on the port the artifacts link to; None when that port is taken on this machine."""
    from gymflow.view import DEFAULT_PORT
    from tests.view.conftest import viewing

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", DEFAULT_PORT)) == 0:
            return None
    link = page.locator(f'a[href^="http://127.0.0.1:{DEFAULT_PORT}/?run="]').first
    link.wait_for(timeout=20_000)
    href = link.get_attribute("href")
    with viewing(run, DEFAULT_PORT):
        page.goto(href)
        return str(page.inner_text("body"))
