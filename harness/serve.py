"""`harness serve`: the store in a browser. An index of every run, each run's report and files,
and a zip of a run.

| URL | what |
|---|---|
| `/` | the index: one row per run, sortable and filterable |
| `/index.json` | the same rows as JSON |
| `/runs/<test>/<stamp>/…` | a run's files (its folder is listed; `report.html` is its report) |
| `/zip/<test>/<stamp>.zip` | the run folder as a zip, made as it is sent |

The index comes from the Spark job of checkers/spark/runs_index.py, kept between requests; a page
load looks at the store's folders and re-reads only the runs whose config.json or results.json
changed since (a run that is being checked, a new run). The server is the standard library's
threading HTTP server; it answers on loopback unless told otherwise, and serves nothing outside
the store (links that lead out of it are refused).
"""

from __future__ import annotations

import http.server
import json
import signal
import socketserver
import sys
import threading
import time
import zipfile
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from rich.console import Console

from core import store
from core.errors import BadInput

if TYPE_CHECKING:
    from checkers.spark.runs_index import RunRow

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
RUNS = "/runs/"
ZIP = "/zip/"
TEXT = "text/plain; charset=utf-8"


@cache
def _env() -> Environment:
    return Environment(
        loader=PackageLoader("harness", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )


def url_of(root: Path, path: Path) -> str:
    """The URL path of a file or folder of the store, each part quoted."""
    return "/".join(quote(part) for part in path.relative_to(root).parts)


class RunsIndex:
    """The index of one store, re-read run by run as the runs' files change."""

    def __init__(self, root: Path, spark_master: str | None) -> None:
        self.root = root.resolve()
        self.spark_master = spark_master
        self._rows: dict[Path, tuple[tuple[float, ...], RunRow]] = {}
        self._lock = threading.Lock()
        self.built_s = 0.0  # how long the last refresh took

    def rows(self) -> list[RunRow]:
        """Every run of the store, newest first."""
        from checkers.spark.runs_index import build_index, runs_below
        from checkers.spark.session import get_spark

        with self._lock:
            started = time.monotonic()
            runs = runs_below(self.root) if self.root.is_dir() else []
            stamps = {run: _stamp(run) for run in runs}
            stale = [r for r in runs if r not in self._rows or self._rows[r][0] != stamps[r]]
            if stale:
                for row in build_index(get_spark(self.spark_master), stale):
                    self._rows[row.dir] = (stamps[row.dir], row)
            self._rows = {r: v for r, v in self._rows.items() if r in stamps}
            self.built_s = time.monotonic() - started
            rows = [row for _, row in self._rows.values()]
        return sorted(rows, key=_newest_first, reverse=True)


def _newest_first(row: RunRow) -> tuple[str, str]:
    return (row.started.isoformat() if row.started else "", row.key)


def _stamp(run: Path) -> tuple[float, ...]:
    """What tells that a run's row is out of date: when its files last changed."""
    times = []
    for name in (store.CONFIG, store.RESULTS):
        try:
            times.append((run / name).stat().st_mtime)
        except OSError:
            times.append(0.0)
    return tuple(times)


def render_index(index: RunsIndex) -> str:
    rows = index.rows()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    return (
        _env()
        .get_template("index.html.j2")
        .render(
            rows=rows,
            url=partial(url_of, index.root),
            store=str(index.root),
            counts=counts,
            version=metadata.version("harness"),
            built_s=index.built_s,
        )
    )


class Handler(http.server.SimpleHTTPRequestHandler):
    """The index, the store's files below /runs/, zips below /zip/."""

    index: RunsIndex  # set on the subclass made for one server
    extensions_map = {  # noqa: RUF012 (the base class's attribute, overridden)
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".jsonl": TEXT,
        ".log": TEXT,
        ".conf": TEXT,
        ".json": "application/json",
    }

    def log_message(self, format: str, *args: Any) -> None:  # a quiet server
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            self._send(render_index(self.index).encode(), "text/html; charset=utf-8")
        elif path == "/index.json":
            data = [row.to_json() for row in self.index.rows()]
            self._send(json.dumps(data, indent=1).encode(), "application/json")
        elif path.startswith(ZIP) and path.endswith(".zip"):
            self._zip(unquote(path[len(ZIP) : -len(".zip")]))
        elif path.startswith(RUNS):
            super().do_GET()
        else:
            self.send_error(404, "no such page: the index is at /")

    def do_HEAD(self) -> None:
        if urlsplit(self.path).path.startswith(RUNS):
            super().do_HEAD()
        else:
            self.send_error(405)

    def translate_path(self, path: str) -> str:
        """A URL below /runs/ as a path in the store; anything that leads out of it, nowhere."""
        inside = super().translate_path("/" + urlsplit(path).path[len(RUNS) :])
        resolved = Path(inside).resolve()
        if not resolved.is_relative_to(self.index.root):
            return str(self.index.root / ".refused")  # does not exist: 404
        return inside

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _zip(self, relative: str) -> None:
        from checkers.spark.runs_index import is_run

        run = (self.index.root / relative).resolve()
        if not run.is_relative_to(self.index.root) or not run.is_dir() or not is_run(run):
            self.send_error(404, "no such run")
            return
        name = "-".join(run.relative_to(self.index.root).parts)
        self.send_response(200)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Disposition", f'attachment; filename="{quote(name)}.zip"')
        self.end_headers()  # HTTP/1.0: the end of the zip is the end of the connection
        with zipfile.ZipFile(self.wfile, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(run.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    archive.write(path, f"{name}/{path.relative_to(run).as_posix()}")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    index: RunsIndex


def make_server(root: Path, host: str, port: int, spark_master: str | None) -> Server:
    """A server for the store at `root`, bound, its index built; `serve_forever` starts it."""
    if root.exists() and not root.is_dir():
        raise BadInput(f"{root} is not a folder: give the results store with --store")
    index = RunsIndex(root, spark_master)
    handler = type("StoreHandler", (Handler,), {"index": index})
    try:
        server = Server((host, port), partial(handler, directory=str(index.root)))
    except OSError as e:
        raise BadInput(
            f"cannot listen on {host}:{port} ({e.strerror}): choose --host/--port"
        ) from e
    server.index = index
    index.rows()  # Spark starts and reads the store before the first page is asked for
    return server


def serve(root: Path, host: str, port: int, spark_master: str | None, console: Console) -> None:
    """Serve until Ctrl-C or SIGTERM."""
    server = make_server(root, host, port, spark_master)
    bound_host, bound_port = server.server_address[:2]
    count = len(server.index.rows())
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]note:[/] {host} is not loopback: other machines can read the store")
    console.print(
        f"serving {count} runs of {root} at http://{bound_host}:{bound_port}/ (Ctrl-C stops)"
    )
    sys.stdout.flush()
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
