"""The ``--html`` pages in a real browser: Debian's Chromium, driven by Playwright (no browser download).

Skipped when ``chromium`` is not installed, unless ``ETF_REQUIRE_CHROMIUM`` is set (scripts/test sets
it after installing the package): then a missing browser fails. Screenshots are kept under
``test-artifacts/`` (gitignored) for a human to look at.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from etf_otel.cli import main

from ..cli.test_html_audit import CANARY as AUDIT_CANARY
from ..cli.test_html_audit import orphaned_turn, write_traces

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PARALLEL = ROOT / "docs" / "images" / "parallel-calls.jsonl"
SHIPPED_TRACES = ROOT / "docs" / "images" / "audit-traces.jsonl"


def load_screenshots() -> ModuleType:
    """scripts/update-screenshots, imported: the launch, the pages and the digest chunk are its."""
    loader = SourceFileLoader("update_screenshots", str(ROOT / "scripts" / "update-screenshots"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


SHOTS = load_screenshots()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if SHOTS.chromium_path() is None:
        reason = "Debian's chromium is not installed (scripts/test installs it)"
        if os.environ.get("ETF_REQUIRE_CHROMIUM"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = SHOTS.launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


class Loaded:
    """A page loaded from a file, with every console error and every request it made."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport=SHOTS.VIEWPORT)
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        started = time.perf_counter()
        self.page.goto(path.as_uri(), wait_until="load")
        self.seconds = time.perf_counter() - started
        self.uri = path.as_uri()

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.requests == [self.uri], "the page made a request other than its own file"

    def screenshot(self, name: str, **options: Any) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        target = ARTIFACTS / name
        self.page.screenshot(path=str(target), **options)
        assert target.stat().st_size > 1000
        return target


def render(argv: list[str], out: Path) -> Path:
    code = main([*argv, "--html", str(out)])
    assert code in (0, 1), code
    return out


def test_replay_page_lanes_verdicts_and_keyboard_focus(browser: Any, tmp_path: Path) -> None:
    loaded = Loaded(browser, render(["replay", str(PARALLEL)], tmp_path / "replay.html"))
    page = loaded.page
    loaded.assert_clean()
    lanes = page.locator("[role=group][data-lane]")
    assert lanes.evaluate_all("(els) => els.map((e) => e.dataset.lane)") == [
        "response",
        *(f"choice 0 \u00b7 tool_calls[{i}]" for i in range(3)),
    ]
    verdicts = page.locator("[data-verdict]")
    assert verdicts.evaluate_all("(els) => els.map((e) => e.dataset.verdict)") == [
        "stream",
        "rejected",  # valid, but its sibling's id_conflict blocks the response
        "rejected",
        "rejected",
    ]
    for index in range(verdicts.count()):
        assert verdicts.nth(index).is_visible()
    rejected = page.locator('.mark[data-kind="reject"]')
    assert rejected.count() == 1 and rejected.get_attribute("data-category") == "id_conflict"
    assert "id_conflict" in (rejected.get_attribute("aria-label") or "")
    assert page.get_by_text("id_conflict", exact=True).first.is_visible()  # written under the mark
    # keyboard: Tab from the top reaches the first mark (the response lane's), and the panel describes it
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.getAttribute('data-detail')")
    assert focused and page.locator("#detail").inner_text() == focused
    page.keyboard.press("Tab")
    assert page.locator("#detail").inner_text() != focused  # the next mark takes over
    rejected.focus()
    detail = page.locator("#detail").inner_text()
    assert "transition reject" in detail and "category id_conflict" in detail
    loaded.screenshot("replay.png")
    page.emulate_media(media="print")
    assert page.locator("[data-verdict]").count() == 4
    assert page.locator('.mark[data-kind="reject"]').is_visible()  # the lanes still print
    pdf = page.pdf()
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    loaded.screenshot("replay-print.png", full_page=True)
    page.close()


def test_audit_page_thousands_of_findings(browser: Any, tmp_path: Path) -> None:
    spans = [span for number in range(1, 3001) for span in orphaned_turn(number)]
    traces = write_traces(tmp_path / "many.jsonl", spans)
    path = render(["audit", str(traces), "--no-progress"], tmp_path / "audit.html")
    loaded = Loaded(browser, path)
    loaded.assert_clean()
    page = loaded.page
    size = path.stat().st_size
    print(f"\naudit page of 3000 findings: {size} bytes, loaded in {loaded.seconds:.2f} s")
    assert loaded.seconds < 10
    assert AUDIT_CANARY not in path.read_text(encoding="utf-8")
    assert page.locator("tr[data-kind=orphaned_execution]").is_visible()  # the summary is on screen first
    first = page.locator("details.trace").first
    assert not first.evaluate("(d) => d.open")
    first.locator("summary").focus()
    page.keyboard.press("Enter")  # opens with the keyboard
    assert first.evaluate("(d) => d.open")
    badge = first.locator("[data-finding=orphaned_execution]")
    badge.focus()
    assert "orphaned_execution" in page.locator("#detail").inner_text()
    page.get_by_role("button", name="open all").click()
    assert page.locator("details.trace[open]").count() == page.locator("details.trace").count()
    loaded.screenshot("audit-3000.png")
    page.emulate_media(media="print")
    assert page.pdf().startswith(b"%PDF")
    page.close()


def test_the_shipped_audit_page_loads_clean(browser: Any, tmp_path: Path) -> None:
    loaded = Loaded(browser, render(["audit", str(SHIPPED_TRACES), "--no-progress"], tmp_path / "a.html"))
    loaded.assert_clean()
    loaded.page.locator("details.trace summary").first.click()
    assert loaded.page.locator("details.trace[open] .row").count() > 1
    loaded.screenshot("audit.png")
    loaded.page.close()


@pytest.mark.parametrize("name", sorted(SHOTS.SOURCES))
def test_readme_screenshots_are_not_stale(name: str, tmp_path: Path) -> None:
    """Each README image records the sha256 of its page: regenerate the page, compare (no pixels)."""
    image = ROOT / "docs" / "images" / name
    recorded = SHOTS.read_digest(image.read_bytes())
    assert recorded is not None, f"{image} has no digest: run scripts/update-screenshots"
    page_path = SHOTS.render(name, tmp_path)
    assert SHOTS.sha256(page_path) == recorded, f"docs/images/{name} is stale: run scripts/update-screenshots"


def test_the_digest_chunk_round_trips() -> None:
    png = (ROOT / "docs" / "images" / "replay.png").read_bytes()
    assert SHOTS.read_digest(SHOTS.with_digest(png, "ab" * 32)) == "ab" * 32
