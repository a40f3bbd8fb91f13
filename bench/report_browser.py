"""A big report in a real browser: how long headless Chromium takes to draw a report's timeline,
and to redraw it zoomed in to single operations.

    .venv/bin/python bench/report_scale.py --ops 1000000 --keep /tmp/r1m
    .venv/bin/python bench/report_browser.py /tmp/r1m/…/report.html [--window 0.05]

It prints the page's size, the time from navigation to the timeline's first drawing (the page
records it), then zooms the timeline to `--window` seconds in the middle of the run and prints
how long the redraw took and how many operations it drew one by one, with one's hover text.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.browser.cdp import Chromium

SINGLE = "operations, each drawn"  # what the timeline's status says once it draws each operation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--window", type=float, default=0.05, help="seconds to zoom in to")
    args = parser.parse_args()
    page = args.report.resolve()
    print(f"{page}: {page.stat().st_size / 2**20:.1f} MiB")
    with tempfile.TemporaryDirectory() as profile:
        browser = Chromium(Path(profile))
        try:
            started = time.monotonic()
            browser.open(page.as_uri())
            drawn = browser.wait_for("document.getElementById('timeline').dataset.drawnAt", 300)
            print(
                f"loaded and timeline drawn: {drawn} ms after navigation "
                f"({time.monotonic() - started:.1f} s wall, with chromium's start)"
            )
            middle = browser.evaluate(
                "(() => { const r = document.getElementById('timeline').layout.xaxis.range;"
                " return (r[0] + r[1]) / 2; })()"
            )
            zoomed = time.monotonic()
            browser.evaluate(
                "Plotly.relayout(document.getElementById('timeline'), {'xaxis.range': "
                f"[{middle}, {middle + args.window}]}}).then(() => true)"
            )
            browser.wait_for(
                f"document.getElementById('timeline-status').textContent.includes('{SINGLE}')", 120
            )
            points, hover = browser.evaluate(
                "(() => { const d = document.getElementById('timeline').data"
                ".filter(t => t.mode === 'markers');"
                " const n = d.reduce((s, t) => s + t.x.length, 0);"
                " const h = d.find(t => t.text && t.text.length);"
                " return [n, h ? String(h.text[0]) : '']; })()"
            )
            print(
                f"zoomed to {args.window:g} s: redrawn in {time.monotonic() - zoomed:.2f} s, "
                f"{points} operations drawn one by one; one's hover: {hover[:120]!r}"
            )
            errors = browser.errors()
            if errors:
                print("page errors:", errors)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
