"""report.html: one self-contained page per run that works offline (plotly is inlined, no CDN).

Everything from the history is escaped by Jinja's autoescape; data for the scripts is embedded as
JSON with `<`, `>` and `&` written as \\u escapes, so no value can close the script element; text
that plotly draws (which reads a little HTML) is escaped as HTML first, and the timeline's script
escapes what it hands plotly the same way.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from core import store
from harness.cycle_svg import cycle_svg

TYPE_COLOURS = {"ok": "#2a9d8f", "fail": "#e9c46a", "info": "#b5179e"}
# Where a cluster kind's defaults are not in config.json (older runs), the report says them.
LABELLED_FAULTS = 12  # more fault bands than this in a plot go unlabelled: the names would overlap
POSTGRES_LOG = "postgres.log"
_POSTGRES_STARTS = re.compile(rb"starting PostgreSQL (\S+)")
_LOG_HEAD = 256 * 1024  # Postgres says its version when it starts: the head of its log has it
_JSON_IN_SCRIPT = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


@cache
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("harness", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )
    env.filters["tojson_compact"] = lambda v: json.dumps(v, separators=(",", ":"), default=str)
    env.globals["cycle_svg"] = cycle_svg
    return env


def script_json(data: Any) -> Markup:
    """`data` as JSON safe to place inside a <script> element: no `<`, `>` or `&` appears in it
    (they are \\u escapes, which JSON and JavaScript read back as the same characters)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), default=str)
    return Markup(text.translate(_JSON_IN_SCRIPT))


def _plot_text(value: Any) -> str:
    """Text for plotly to draw: it reads tags such as <b> and entities, so HTML-escape it."""
    return html.escape(str(value if value is not None else ""))


def latency_figure(series: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure()
    for kind, colour in TYPE_COLOURS.items():
        points = [p for p in series if p.get("type") == kind]
        if not points:
            continue
        fig.add_trace(
            go.Scattergl(
                x=[p["t"] for p in points],
                y=[p["latency_ms"] for p in points],
                mode="markers",
                name=kind,
                marker={"color": colour, "size": 4, "opacity": 0.7},
                text=[
                    _plot_text(f"{p.get('workload') or ''} {p.get('f')} p{p.get('process')}")
                    for p in points
                ],
            )
        )
    fig.update_layout(
        title="Latency over time",
        xaxis_title="time since start (s)",
        yaxis_title="latency (ms)",
        yaxis_type="log",
        height=420,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def rate_figure(rates: list[dict[str, Any]]) -> go.Figure:
    fig = go.Figure()
    for kind, colour in TYPE_COLOURS.items():
        points = sorted((p for p in rates if p.get("type") == kind), key=lambda p: p["t"])
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[p["t"] for p in points],
                    y=[p["count"] for p in points],
                    mode="lines",
                    name=kind,
                    line={"color": colour},
                )
            )
    fig.update_layout(
        title="Completions per second",
        xaxis_title="time since start (s)",
        yaxis_title="operations / s",
        height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def shade_faults(fig: go.Figure, windows: list[dict[str, Any]]) -> go.Figure:
    """Grey bands where a fault was in place, labelled with the fault's name while there are few
    enough for the names to be read (the Faults table names them all). Set at once: plotly's
    add_vrect copies the layout for each band."""
    band = {"type": "rect", "xref": "x", "yref": "paper", "y0": 0, "y1": 1, "layer": "below"}
    label = {"xref": "x", "yref": "paper", "y": 1, "showarrow": False, "yanchor": "top"}
    fig.update_layout(
        shapes=[
            band
            | {"x0": w["start"], "x1": w["end"], "fillcolor": "#888", "opacity": 0.15}
            | {"line": {"width": 0}}
            for w in windows
        ],
        annotations=[
            label | {"x": w["start"], "xanchor": "left", "text": _plot_text(w["fault"])}
            for w in (windows if len(windows) <= LABELLED_FAULTS else [])
        ],
    )
    return fig


def mark_recoveries(fig: go.Figure, availability: dict[str, Any]) -> go.Figure:
    """After each heal, a red line near the top to the first acknowledged write (dotted to the
    end of the writes when none came), labelled with the seconds while few enough to read."""
    rows = [r for r in availability.get("windows") or [] if r.get("free_s") is not None]
    line = {"type": "line", "xref": "x", "yref": "paper", "y0": 0.9, "y1": 0.9}
    label = {"xref": "x", "yref": "paper", "y": 0.9, "showarrow": False, "yanchor": "bottom"}
    shapes, labels = [], []
    for r in rows:
        end = r.get("first_write_s") or availability.get("writes_end_s") or r["end"]
        style = {"color": "#c1121f", "dash": "solid" if r.get("first_write_s") else "dot"}
        shapes.append(line | {"x0": r["end"], "x1": end, "line": style})
        text = f"{r['recovery_s']:.1f} s" if r.get("recovery_s") is not None else "no write"
        labels.append(label | {"x": r["end"], "xanchor": "left", "text": _plot_text(text)})
    fig.update_layout(
        shapes=[*fig.layout.shapes, *shapes],
        annotations=[*fig.layout.annotations, *(labels if len(rows) <= LABELLED_FAULTS else [])],
    )
    return fig


def _files(out_dir: Path) -> list[dict[str, Any]]:
    """Files of the run worth linking, relative to the report: the history, the configuration
    and results, then every file the run collected from the nodes (logs, control files, state)."""
    names = [store.HISTORY, store.CONFIG, store.RESULTS]
    paths = [out_dir / n for n in names if (out_dir / n).is_file()]
    nodes = out_dir / store.NODES
    if nodes.is_dir():
        paths += sorted(p for p in nodes.rglob("*") if p.is_file())
    return [
        {
            "name": p.relative_to(out_dir).as_posix(),
            "href": quote(p.relative_to(out_dir).as_posix()),
            "size": p.stat().st_size,
        }
        for p in paths
    ]


def _counts_table(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload and f with a column per outcome."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in stats.get("counts", []):
        key = (row.get("workload") or "", row["f"])
        rows.setdefault(key, {"workload": key[0], "f": key[1]})[row["type"]] = row["count"]
    return list(rows.values())


def configuration(
    config: dict[str, Any], plan: dict[str, Any], out_dir: Path
) -> list[tuple[str, Any]]:
    """What was tested, first: the cluster, the contract it was held to and its options (as
    the plan has them, defaults included), the workloads, the faults, the seed, and the
    versions the run recorded (nothing that it did not)."""
    rows: list[tuple[str, Any]] = []
    if plan.get("kind"):
        rows.append(("cluster", plan["kind"]))
    if plan.get("contract"):
        rows.append(("contract", plan["contract"]))
    options = plan.get("options") or {}
    # the mode option chose the contract, shown above
    rows += [
        (k.replace("_", " "), v) for k, v in options.items() if v not in (None, "") and k != "mode"
    ]
    for key, label in (("workloads", "workloads"), ("nemesis", "nemesis")):
        if config.get(key):
            rows.append((label, ", ".join(str(v) for v in config[key])))
    for key in ("seed", "isolation", "model", "concurrency", "rate", "time_limit"):
        if config.get(key) is not None:
            rows.append((key.replace("_", " "), config[key]))
    rows.append(("versions", versions(config, out_dir)))
    return rows


def versions(config: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """The harness's version, and Postgres's where the run recorded it (config.json's
    `versions`, else the version a collected postgres.log says Postgres started as)."""
    found = {"harness": metadata.version("harness")}
    found.update({str(k): str(v) for k, v in (config.get("versions") or {}).items()})
    if "postgres" not in found and (out_dir / store.NODES).is_dir():
        for log in sorted((out_dir / store.NODES).rglob(POSTGRES_LOG)):
            with log.open("rb") as f:
                match = _POSTGRES_STARTS.search(f.read(_LOG_HEAD))
            if match:
                found["postgres"] = match.group(1).decode("utf-8", "replace")
                break
    return found


def _timeline(results: dict[str, Any], out_dir: Path) -> tuple[dict[str, Any] | None, dict]:
    """The timeline's data, and for each anomaly (by its element id) the positions of its
    operations in the timeline and the time window they span (s)."""
    from checkers.spark.pipeline import OPS_TABLE
    from checkers.spark.timeline import build

    config = results.get("config") or {}
    timeline = build(out_dir / OPS_TABLE, config.get("concurrency"))
    links: dict[str, dict[str, Any]] = {}
    if timeline is None:  # nothing to link to
        return None, links
    for name, checker in results.get("checkers", {}).items():
        for number, anomaly in enumerate(checker.get("anomalies") or [], start=1):
            ops = [op for op in anomaly.get("ops") or [] if isinstance(op, dict)]
            times = [t for op in ops for t in (op.get("invoke_time"), op.get("complete_time"))]
            window = [t for t in times if t is not None] or list(anomaly.get("window_ns") or [])
            if not window:
                continue
            indices = [op["invoke_index"] for op in ops if op.get("invoke_index") is not None]
            links[anomaly_id(name, number)] = {
                "t": [min(window) / 1e9, max(window) / 1e9],
                "pos": timeline.positions(indices),
            }
    return timeline.page, links


def anomaly_id(checker: str, number: int) -> str:
    """The element id of a checker's anomaly (numbered from 1) in the page."""
    return f"{checker}-{number}"


def led_at(leaders: list[dict[str, Any]], t: float | None) -> str:
    """Who led at `t` (s), as the leader lane names it: "n2 (generation 5)", "n1 (term 3)",
    "none", or "" when the polls say nothing of that time."""
    if t is None:
        return ""
    for stretch in leaders:
        if stretch["start"] <= t and (stretch["end"] is None or t < stretch["end"]):
            if not stretch["nodes"]:
                return "none"
            term = stretch.get("term")
            unit = stretch.get("unit") or "term"
            return " + ".join(stretch["nodes"]) + ("" if term is None else f" ({unit} {term})")
    return ""


def with_leaders(availability: dict[str, Any], leaders: list[dict[str, Any]]) -> dict[str, Any]:
    """The availability figures with each fault window's leader at its start and at its first
    write after the heal (the report's table names the generation or term of each window)."""
    if not leaders or not availability.get("windows"):
        return availability
    windows = [
        w | {"led_before": led_at(leaders, w["start"]),
             "led_after": led_at(leaders, w.get("first_write_s"))}
        for w in availability["windows"]
    ]  # fmt: skip
    return availability | {"windows": windows, "has_leaders": True}


def render_report(results: dict[str, Any], path: Path, out_dir: Path) -> None:
    stats = results.get("checkers", {}).get("stats", {})
    leaders = (results.get("checkers", {}).get("cluster-state") or {}).get("leaders") or []
    availability = with_leaders(results.get("checkers", {}).get("availability", {}), leaders)
    windows = stats.get("fault_windows", [])
    figures = {
        "latency": shade_faults(latency_figure(stats.get("series", [])), windows).to_json(),
        "rate": mark_recoveries(
            shade_faults(rate_figure(stats.get("rate", [])), windows), availability
        ).to_json(),
    }
    config = results.get("config") or {}
    timeline, links = _timeline(results, out_dir)
    page_data = {
        "timeline": timeline,
        "faults": [{"fault": w["fault"], "start": w["start"], "end": w["end"]} for w in windows],
        "anomalies": links,
        "leaders": leaders,
    }
    template = _env().get_template("report.html.j2")
    page = template.render(
        results=results,
        title=run_name(config, results, out_dir),
        checkers={k: v for k, v in results.get("checkers", {}).items() if k != "stats"},
        stats=stats,
        availability=availability,
        counts=_counts_table(stats),
        config=config,
        summary=configuration(config, results.get("plan") or {}, out_dir),
        files=_files(out_dir),
        figures={k: script_json(v) for k, v in figures.items()},
        page_data=Markup(PAGE_DATA),
        has_timeline=timeline is not None,
        labelled_faults=LABELLED_FAULTS,
        links=links,
        anomaly_id=anomaly_id,
        timeline_js=Markup(_env().loader.get_source(_env(), "timeline.js.j2")[0]),
        plotly_js=Markup(get_plotlyjs()),
    )
    head, found, tail = page.partition(PAGE_DATA)
    assert found, "the report's template has no place for the page's data"
    # The page's data written piece by piece: as one JSON text, then inside the page's text,
    # then encoded, ten million operations' timeline was held four times over.
    with path.open("w", encoding="utf-8") as out:
        out.write(head)
        for piece in _PAGE_ENCODER.iterencode(page_data):
            out.write(piece.translate(_JSON_IN_SCRIPT))
        out.write(tail)


PAGE_DATA = "\x00page-data\x00"  # where the page's data goes in the rendered template
_PAGE_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def run_name(config: dict[str, Any], results: dict[str, Any], out_dir: Path) -> str:
    """The run's name as the store files it (its folder's parent), else the history's name."""
    if config.get("name"):
        return str(config["name"])
    if config.get("cluster"):
        return out_dir.resolve().parent.name
    return Path(str((results.get("history") or {}).get("path") or out_dir)).name
