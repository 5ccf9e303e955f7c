"""Headless Chromium (Debian's package) driven by Playwright, against a served console
in front of a real `jobgate serve` that each test starts (`gateway` here overrides
the in-memory one of tests/console/conftest.py: tests/console/serve_gateway.py).

No browser is downloaded: Playwright launches /usr/bin/chromium (`.ci/run`
installs the `chromium` package). Without it these tests skip, except under
CI or JOBGATE_REQUIRE_TOOLS=1, where they fail. Each test gets a fresh
browser context (its own cookies); a test fails if its page logged a console
error or threw. Playwright gives every launch a fresh --user-data-dir.

Screenshots go to $JOBGATE_CONSOLE_SCREENSHOTS when set (`make
console-screenshots` sets docs/console), else to the test's tmp dir.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

from tests.console.conftest import LiveFactory
from tests.console.serve_gateway import ServeGateway

CHROMIUM = os.environ.get("JOBGATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1360, "height": 860}


def _required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("JOBGATE_REQUIRE_TOOLS"))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[ServeGateway]:
    """A real `jobgate serve` (embedded store, --auth-file), fresh for each test."""
    served = ServeGateway(tmp_path).start()
    yield served
    served.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """A failed test's report carries its serve's log."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    served = getattr(item, "funcargs", {}).get("gateway")
    if report.failed and isinstance(served, ServeGateway):
        report.sections.append(("jobgate serve log", served.server.log_tail()))


# Module scope: the sync API keeps an event loop running in this thread while it
# is open, which the asyncio tests of other modules must not find.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        message = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        if _required():
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, live_console: LiveFactory) -> Iterator[Page]:
    # Depends on live_console so the page closes before the console stops
    # (an EventSource would log its reconnect to a closed port as an error).
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(15_000)
    opened = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_error(error: Error) -> None:
        problems.append(f"page error: {error.message}")

    opened.on("console", on_console)
    opened.on("pageerror", on_error)
    yield opened
    context.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("JOBGATE_CONSOLE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target
