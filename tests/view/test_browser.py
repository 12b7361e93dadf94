"""A person's view of the example run, in headless Chromium (Debian's package, which ``.ci/run``
installs): every page of ``gymflow view`` and every page of ``report.html``, opened from disk
with every network request refused."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import viewing

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).is_file():
        pytest.skip("no Chromium on this machine (.ci/run installs Debian's chromium package)")
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_page_of_gymflow_view(browser: Any, example_run: Path) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    with viewing(example_run) as view:
        page.goto(view.url("/"))
        body = page.inner_text("main")
        assert re.search(r"healthy\s+21\s+unhealthy\s+8\s+unobserved\s+4\s+all\s+33", body)
        assert page.locator("svg.chart rect").count() == 14  # one bar per check
        assert "example_simple_agent\tmean/reward\t0.6666666666666666" in body
        assert re.search(r"health-check\s+done", body) and "Failures by class" in body

        page.get_by_role("link", name="unhealthy", exact=True).click()  # verdict -> its rollouts
        page.wait_for_url(re.compile(r"/rollouts\?.*verdict=unhealthy"))
        assert "Rollouts 1–8 of 8 matching (verdict = unhealthy); 33 in the run." in page.inner_text("main")

        page.goto(view.url("/rollouts"))
        page.select_option("select[name=check]", "agent_turn_hollow")
        page.get_by_role("button", name="filter").click()
        page.wait_for_url(re.compile(r"check=agent_turn_hollow"))
        assert "of 5 matching (check = agent_turn_hollow)" in page.inner_text("main")
        assert page.locator("table.rollouts tbody tr").count() == 5

        page.locator("table.rollouts tbody tr", has_text="unhealthy").first.locator("a").click()
        page.wait_for_url(re.compile(r"/rollout/\d+"))
        rollout = page.inner_text("main")
        assert "agent_turn_hollow" in rollout and "agent turn has no message or tool calls" in rollout
        assert "model calls" in rollout and "total tokens" in rollout

        page.get_by_role("link", name="metrics", exact=True).click()
        metrics = page.inner_text("main")
        assert "rewards: all rollouts and healthy rollouts only" in metrics
        assert "0.7619047619047619" in metrics and "not computed" not in metrics  # 21 healthy of 33
        assert "group (task) metrics" in metrics

        page.get_by_role("link", name="reverify", exact=True).click()
        assert "This run was not re-verified" in page.inner_text("main")

        page.get_by_role("link", name="provenance", exact=True).click()
        digest = _digest(example_run / "rollouts.jsonl")
        cell = page.locator("span.hash", has_text=digest).first
        assert cell.inner_text() == digest  # the whole SHA-256, none of it cut off
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1300
        page.get_by_role("button", name=re.compile("verify now")).first.click()
        page.wait_for_url(re.compile(r"/provenance/verify"))
        assert "all files verify" in page.inner_text("main")
    page.close()


def test_every_page_of_report_html_offline(browser: Any, example_run: Path) -> None:
    context = browser.new_context(viewport={"width": 1300, "height": 900}, offline=True)
    requested: list[str] = []

    def record(route: Any) -> None:
        requested.append(route.request.url)
        route.continue_()

    context.route("**/*", record)
    page = context.new_page()
    report = example_run / "report.html"
    page.goto(report.as_uri())
    assert re.search(
        r"healthy\s+21\s+unhealthy\s+8\s+unobserved\s+4\s+all\s+33", page.inner_text("#overview")
    )
    assert page.locator("#overview svg.chart rect").count() == 14
    assert not page.locator("#rollouts").is_visible()

    page.get_by_role("link", name="rollouts", exact=True).click()
    assert page.locator("#rollouts").is_visible() and not page.locator("#overview").is_visible()
    assert "Showing the first 33 of 33 rollouts. This file holds every rollout." in page.inner_text(
        "#rollouts"
    )
    page.select_option("#rollouts select[name=verdict]", "unhealthy")
    assert page.inner_text("#shown") == "8"
    page.select_option("#rollouts select[name=check]", "model_call_failed")
    assert page.inner_text("#shown") == "2"

    page.locator("#rollouts table.rollouts tbody tr:visible").first.locator("a").click()
    detail = page.locator(".page:target")
    text = detail.inner_text()
    assert "model_call_failed" in text and '"status": 500' in text and "server_error" in text

    page.get_by_role("link", name="metrics", exact=True).click()
    assert "healthy rollouts only" in page.inner_text("#metrics")
    page.get_by_role("link", name="reverify", exact=True).click()
    assert "not re-verified" in page.inner_text("#reverify")
    page.get_by_role("link", name="provenance", exact=True).click()
    digest = _digest(example_run / "rollouts.jsonl")
    assert page.locator("#provenance span.hash", has_text=digest).first.inner_text() == digest
    assert "gymflow provenance verify" in page.inner_text("#provenance")
    assert requested == [report.as_uri()]  # the page itself, nothing else: no CDN, no fonts
    context.close()
