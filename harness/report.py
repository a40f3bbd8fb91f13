"""report.html: one self-contained page per run that works offline (plotly is inlined, no CDN).

Everything from the history is escaped by Jinja's autoescape; plot data is embedded as JSON with
`</` neutralised so no value can close the script element.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from harness import store
from harness.cycle_svg import cycle_svg

TYPE_COLOURS = {"ok": "#2a9d8f", "fail": "#e9c46a", "info": "#b5179e"}


@cache
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("harness", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )
    env.filters["tojson_compact"] = lambda v: json.dumps(v, separators=(",", ":"), default=str)
    env.globals["cycle_svg"] = cycle_svg
    return env


def _script_json(data: str) -> Markup:
    """JSON safe to place inside a <script> element."""
    return Markup(data.replace("</", "<\\/"))


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
                    f"{p.get('workload', '')} {p.get('f', '')} p{p.get('process', '')}"
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


def _files(out_dir: Path) -> list[str]:
    """Files of the run worth linking: the history, node logs and state."""
    names = [store.HISTORY, store.CONFIG, store.RESULTS]
    found = [n for n in names if (out_dir / n).exists()]
    nodes = out_dir / store.NODES
    if nodes.is_dir():
        found += sorted(str(p.relative_to(out_dir)) for p in nodes.rglob("*") if p.is_file())
    return found


def shade_faults(fig: go.Figure, windows: list[dict[str, Any]]) -> go.Figure:
    """Grey bands where a fault was in place, labelled with the fault's name."""
    for w in windows:
        fig.add_vrect(
            x0=w["start"],
            x1=w["end"],
            fillcolor="#888",
            opacity=0.15,
            line_width=0,
            annotation_text=w["fault"],
            annotation_position="top left",
        )
    return fig


def _counts_table(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload and f with a column per outcome."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in stats.get("counts", []):
        key = (row.get("workload") or "", row["f"])
        rows.setdefault(key, {"workload": key[0], "f": key[1]})[row["type"]] = row["count"]
    return list(rows.values())


def render_report(results: dict[str, Any], path: Path, out_dir: Path) -> None:
    stats = results.get("checkers", {}).get("stats", {})
    windows = stats.get("fault_windows", [])
    figures = {
        "latency": shade_faults(latency_figure(stats.get("series", [])), windows).to_json(),
        "rate": shade_faults(rate_figure(stats.get("rate", [])), windows).to_json(),
    }
    template = _env().get_template("report.html.j2")
    page = template.render(
        results=results,
        checkers={k: v for k, v in results.get("checkers", {}).items() if k != "stats"},
        stats=stats,
        counts=_counts_table(stats),
        config=results.get("config", {}),
        files=_files(out_dir),
        figures={k: _script_json(v) for k, v in figures.items()},
        plotly_js=Markup(get_plotlyjs()),
    )
    path.write_text(page, encoding="utf-8")
