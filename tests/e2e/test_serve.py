"""`harness serve` over a store of real checked runs, through HTTP as a browser would ask."""

from __future__ import annotations

import io
import json
import socket
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.e2e.conftest import harness
from tests.e2e.test_bad_input import assert_one_sentence
from tests.runs_store import HOSTILE, make_run, serve_checked_store

pytestmark = pytest.mark.e2e


Site = tuple[dict[str, Path], str]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The runs of a checked store, and the URL `harness serve` serves it at."""
    yield from serve_checked_store(tmp_path_factory.mktemp("serve") / "results")


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


class Rows(HTMLParser):
    """The index's run rows: each row's data attributes, cell texts and links."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "run":
            self.rows.append({**a, "text": "", "links": []})
        elif tag == "a" and self.rows:
            self.rows[-1]["links"].append(a["href"])

    def handle_data(self, data: str) -> None:
        if self.rows:
            self.rows[-1]["text"] += data


def index_rows(url: str) -> dict[str, dict]:
    status, kind, body = get(url)
    assert status == 200 and kind.startswith("text/html")
    parser = Rows()
    parser.feed(body.decode())
    return {row["data-key"]: row for row in parser.rows}


def key(run: Path) -> str:
    return f"{run.parent.name}/{run.name}"


def test_the_index_lists_every_run_with_its_verdict(site: Site) -> None:
    runs, url = site
    rows = index_rows(url)
    assert {k: r["data-verdict"] for k, r in rows.items()} == {
        key(runs["valid"]): "valid",
        key(runs["invalid"]): "invalid",
        key(runs["unchecked"]): "unknown",
    }
    bad = rows[key(runs["invalid"])]
    assert "set: lost" in bad["text"] and "safekeeper" in bad["text"] and "kill" in bad["text"]
    assert "not checked" in rows[key(runs["unchecked"])]["text"]
    assert list(rows) == [key(runs[n]) for n in ("unchecked", "invalid", "valid")]  # newest first
    page = get(url)[2].decode()
    for verdict, colour in (("valid", "#2a9d8f"), ("invalid", "#c1121f"), ("unknown", "#e9a23b")):
        assert f".{verdict} {{ background: {colour}; }}" in page


def test_everything_from_the_store_is_escaped(site: Site) -> None:
    _, url = site
    page = get(url)[2].decode()
    assert HOSTILE not in page and "<script>alert(2)" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    listing = get(url + "runs/")[2].decode()
    assert HOSTILE not in listing and "&lt;img src=x onerror=alert(1)&gt;" in listing


def test_each_run_links_to_its_report_files_and_zip(site: Site) -> None:
    runs, url = site
    run = runs["invalid"]
    links = index_rows(url)[key(run)]["links"]
    report, files, archive = links
    status, kind, body = get(url + report)
    assert status == 200 and kind.startswith("text/html") and b"lost" in body
    status, _, body = get(url + files)
    assert status == 200 and b'href="history.jsonl"' in body and b'href="nodes/"' in body
    status, kind, body = get(url + files + "history.jsonl")
    assert (status, kind) == (200, "text/plain; charset=utf-8")
    assert body == (run / "history.jsonl").read_bytes()
    assert get(url + files + "nodes/n1/postgres.log")[1] == "text/plain; charset=utf-8"
    status, kind, body = get(url + archive)
    assert (status, kind) == (200, "application/zip")
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    prefix = f"{run.parent.name}-{run.name}/"
    assert {prefix + n for n in ("config.json", "results.json", "report.html")} <= set(names)
    assert prefix + "nodes/n1/postgres.log" in names
    assert "index.json" in get(url)[2].decode()
    listed = json.loads(get(url + "index.json")[2])
    assert {r["key"]: r["verdict"] for r in listed}[key(run)] == "invalid"


@pytest.mark.parametrize(
    "path", ["runs/%2e%2e/%2e%2e/etc/passwd", "runs/..%2f..%2fetc/passwd", "zip/..%2f..%2fetc.zip"]
)
def test_nothing_outside_the_store(site: Site, path: str) -> None:
    _, url = site
    assert get(url + path)[0] == 404


def test_unknown_pages_and_runs_are_404(site: Site) -> None:
    _, url = site
    assert get(url + "nope")[0] == 404
    assert get(url + "zip/single-set-none/19990101T000000.zip")[0] == 404


def test_a_new_run_shows_without_a_restart(site: Site) -> None:
    runs, url = site
    store = runs["valid"].parent.parent
    new = make_run(store, "single-set-none", "20261121T100300")
    try:
        assert index_rows(url)[key(new)]["data-verdict"] == "unknown"
    finally:
        for path in sorted(new.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        new.rmdir()
    assert key(new) not in index_rows(url)


def test_a_port_in_use_or_a_file_as_store_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = harness("serve", "--store", str(tmp_path), "--port", str(port), timeout=120)
    assert "in use" in assert_one_sentence(result)
    file = tmp_path / "file"
    file.write_text("")
    result = harness("serve", "--store", str(file), "--port", "0", timeout=120)
    assert "not a folder" in assert_one_sentence(result)
