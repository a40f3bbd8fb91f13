"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, with websocket-client.

Enough for the browser tests: open a page, wait until a condition holds in it, evaluate
JavaScript, and take a screenshot of the whole page.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from itertools import count
from pathlib import Path
from typing import Any

import websocket

BINARY = "chromium"


class Chromium:
    """One headless browser with one tab; `close` ends it."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        binary = shutil.which(BINARY)
        assert binary, "Debian's chromium is not installed: `make setup` installs it"
        profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",  # tests run as root
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = self._port(profile / "DevToolsActivePort")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
                tab = next(t for t in json.load(r) if t["type"] == "page")
            self.ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=60)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise
        self.ids = count(1)
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _port(self, file: Path, wait: float = 60) -> int:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if file.exists() and file.read_text().strip():
                return int(file.read_text().split()[0])
            assert self.proc.poll() is None, f"chromium exited {self.proc.returncode}"
            time.sleep(0.1)
        raise AssertionError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        number = next(self.ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == number:
                assert "error" not in message, f"{method}: {message['error']}"
                return message["result"]
            self.events.append(message)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 120
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            assert time.monotonic() < deadline, f"{url} did not load"
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        """Evaluate until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"never true: {expression}"
            time.sleep(0.2)

    def errors(self) -> list[str]:
        """Uncaught exceptions of the page since it was opened."""
        return [
            e["params"]["exceptionDetails"].get("text", "")
            + str(e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
            for e in self.events
            if e.get("method") == "Runtime.exceptionThrown"
        ]

    def screenshot(self, path: Path) -> Path:
        """The whole page, not only the window, as PNG."""
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
