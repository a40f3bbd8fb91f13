"""The live display of a run: elapsed and remaining time, ops/s, ok/fail/info counts.

On a terminal it redraws in place (rich); elsewhere (CI, a pipe) it prints a line every few
seconds so a long run still shows it is alive.
"""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console
from rich.live import Live
from rich.table import Table

LINE_EVERY = 10.0


class Progress:
    def __init__(self, console: Console, total_seconds: float, counts: Counter[str]) -> None:
        self._console = console
        self._total = total_seconds
        self._counts = counts
        self._start = time.monotonic()
        self._last = (self._start, 0)
        self._rate = 0.0
        self._last_line = self._start
        self.phase = "running"
        self._live: Live | None = None

    def _completed(self) -> int:
        return sum(self._counts[t] for t in ("ok", "fail", "info"))

    def _render(self) -> Table:
        elapsed = time.monotonic() - self._start
        table = Table.grid(padding=(0, 2))
        table.add_row(
            f"[bold]{self.phase}[/]",
            f"{elapsed:5.0f}s elapsed",
            f"{max(0.0, self._total - elapsed):5.0f}s left",
            f"{self._rate:7.1f} ops/s",
            f"[green]ok {self._counts['ok']}[/]",
            f"[yellow]fail {self._counts['fail']}[/]",
            f"[magenta]info {self._counts['info']}[/]",
        )
        return table

    def tick(self) -> None:
        """Recompute the rate and redraw (or print a line when not on a terminal)."""
        now, done = time.monotonic(), self._completed()
        then, before = self._last
        if now - then >= 1.0:
            self._rate = (done - before) / (now - then)
            self._last = (now, done)
        if self._live is not None:
            self._live.update(self._render())
        elif now - self._last_line >= LINE_EVERY:
            self._last_line = now
            self._console.print(self._render())

    def __enter__(self) -> Progress:
        if self._console.is_terminal:
            self._live = Live(self._render(), console=self._console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
        else:
            self._console.print(self._render())
