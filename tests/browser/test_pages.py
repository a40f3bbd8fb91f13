"""Headless Chromium loads what `harness serve` serves: the index of runs and a run's report.

The store holds real checked runs (one valid, one invalid whose test name and options are
markup, one never checked). Screenshots of each page are saved under test-artifacts/browser/
(HARNESS_TEST_ARTIFACTS moves it), whether the test passes or not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.cdp import Chromium
from tests.runs_store import HOSTILE, LOST, serve_checked_store

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

ARTIFACTS = Path(
    os.environ.get("HARNESS_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
COLOURS = {
    "valid": "rgb(42, 157, 143)",
    "invalid": "rgb(193, 18, 31)",
    "unknown": "rgb(233, 162, 59)",
}
# Every call of alert() is noted, so that markup run as script would show.
NO_ALERTS = "window.__alerts = []; window.alert = m => window.__alerts.push(String(m));"


Site = tuple[dict[str, Path], str]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The runs of a checked store, and the URL `harness serve` serves it at."""
    yield from serve_checked_store(tmp_path_factory.mktemp("browser") / "results")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = Chromium(tmp_path / "profile")
    chromium.call("Page.addScriptToEvaluateOnNewDocument", source=NO_ALERTS)
    try:
        yield chromium
    finally:
        chromium.close()


def rows(browser: Chromium) -> list[dict]:
    return browser.evaluate(
        """Array.from(document.querySelectorAll('#runs tbody tr')).map(tr => ({
            key: tr.dataset.key, hidden: tr.hidden, text: tr.textContent,
            verdict: tr.querySelector('.verdict').textContent,
            colour: getComputedStyle(tr.querySelector('.verdict')).backgroundColor,
            report: (tr.querySelector('a.report') || {}).href || null,
        }))"""
    )


def test_the_index_shows_every_run_in_its_colour(browser: Chromium, site: Site) -> None:
    _, url = site
    browser.open(url)
    try:
        shown = rows(browser)
        assert [(r["verdict"], r["colour"]) for r in shown] == [
            ("unknown", COLOURS["unknown"]),
            ("invalid", COLOURS["invalid"]),
            ("valid", COLOURS["valid"]),
        ]
        invalid = shown[1]
        assert HOSTILE in invalid["text"] and "<script>alert(2)</script>" in invalid["text"]
        assert "set: lost" in invalid["text"]
        assert browser.evaluate("document.querySelectorAll('#runs img, #runs script').length") == 0
        assert browser.evaluate("window.__alerts") == []
        assert browser.errors() == []
    finally:
        browser.screenshot(ARTIFACTS / "browser" / "index.png")


def test_the_index_filters_and_sorts(browser: Chromium, site: Site) -> None:
    _, url = site
    browser.open(url + "?verdict=invalid&verdict=valid")
    assert [r["verdict"] for r in rows(browser) if not r["hidden"]] == ["invalid", "valid"]
    browser.evaluate(
        "const f = document.getElementById('filter'); f.value = 'kill';"
        "f.dispatchEvent(new Event('input'))"
    )
    assert [r["verdict"] for r in rows(browser) if not r["hidden"]] == ["invalid"]
    assert browser.evaluate("document.getElementById('shown').textContent") == "1 of 3 shown"
    browser.open(url)
    header = "Array.from(document.querySelectorAll('#runs th')).find(th => th.textContent == '{}')"
    browser.evaluate(header.format("verdict") + ".click()")
    assert [r["verdict"] for r in rows(browser)] == ["invalid", "unknown", "valid"]
    browser.evaluate(header.format("verdict") + ".click()")
    assert [r["verdict"] for r in rows(browser)] == ["valid", "unknown", "invalid"]
    browser.evaluate(header.format("started") + ".click()")
    assert [r["verdict"] for r in rows(browser)] == ["valid", "invalid", "unknown"]


@pytest.mark.parametrize("verdict", ["invalid", "valid"])
def test_a_report_shows_its_verdict_anomalies_and_plots(
    browser: Chromium, site: Site, verdict: str
) -> None:
    _, url = site
    browser.open(url)
    report = next(r["report"] for r in rows(browser) if r["verdict"] == verdict)
    browser.open(report)
    try:
        banner = browser.wait_for(
            "(b => b && {text: b.textContent.trim(), colour: getComputedStyle(b).backgroundColor})"
            "(document.querySelector('.banner'))"
        )
        assert banner["text"].upper().startswith(verdict.upper())
        assert banner["colour"] == COLOURS[verdict]
        anomalies = browser.evaluate(
            "Array.from(document.querySelectorAll('.anomaly')).map(a => a.textContent)"
        )
        if verdict == "invalid":
            assert len(anomalies) == 1 and f"element {LOST} was lost" in anomalies[0]
        else:
            assert anomalies == []
        # Each plot is drawn by plotly: an SVG and the traces it drew from its data.
        plots = browser.wait_for(
            """(() => {
                const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
                const drawn = plots.filter(p => p.querySelector('svg.main-svg')
                    && p._fullData && p._fullData.length > 0);
                return drawn.length >= 3 && drawn.length === plots.length
                    && plots.map(p => p.id);
            })()"""
        )
        assert {"latency", "rate", "timeline"} <= set(plots), plots
        lane = browser.evaluate(
            """(() => {
                const t = document.getElementById('timeline');
                const y = t.layout.yaxis;
                return {ticks: y.ticktext, labels: (t.layout.annotations || [])
                    .filter(a => a.yref === 'y').map(a => a.text)};
            })()"""
        )
        if verdict == "invalid":  # its polls saw n1 lead term 1, nobody, then n2 in term 2
            assert lane["ticks"][0] == "leader", lane
            assert lane["labels"] == ["n1 t1", "no leader", "n2 t2"], lane
        else:  # no polls, no lane
            assert "leader" not in lane["ticks"], lane
        assert browser.evaluate("window.__alerts") == []
        assert browser.errors() == []
        assert verdict != "invalid" or HOSTILE in browser.evaluate("document.title")
    finally:
        browser.screenshot(ARTIFACTS / "browser" / f"report-{verdict}.png")


def test_screenshots_are_kept_as_artifacts() -> None:
    """Runs last in this file: the pages above left their pictures."""
    shots = sorted((ARTIFACTS / "browser").glob("*.png"))
    assert {p.name for p in shots} >= {"index.png", "report-invalid.png", "report-valid.png"}
    for shot in shots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    (ARTIFACTS / "browser" / "pages.json").write_text(json.dumps([p.name for p in shots]))
