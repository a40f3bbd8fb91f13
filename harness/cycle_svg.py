"""A small drawing of a dependency cycle for the report: transactions on a circle, one arrow per
edge, labelled with its kind. Plain SVG, so the report stays one offline file."""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup, escape

COLOURS = {"ww": "#264653", "wr": "#2a9d8f", "rw": "#c1121f", "process": "#6c757d"}
REALTIME = "#b5179e"
SIZE = 260
RADIUS = 90
NODE = 22


def cycle_svg(anomaly: dict[str, Any]) -> Markup:
    """The cycle of an anomaly (its `steps`: from, to, edge) as an inline SVG element."""
    steps = anomaly.get("steps") or []
    if not steps:
        return Markup("")
    names = [s["from"] for s in steps]
    c = SIZE / 2
    at = {
        name: (c + RADIUS * math.sin(2 * math.pi * i / len(names)),
               c - RADIUS * math.cos(2 * math.pi * i / len(names)))
        for i, name in enumerate(names)
    }  # fmt: skip
    parts = [
        f'<svg class="cycle" width="{SIZE}" height="{SIZE}" viewBox="0 0 {SIZE} {SIZE}" '
        'xmlns="http://www.w3.org/2000/svg" role="img">',
        "<defs>",
        *(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/>'
            "</marker>"
            for kind, colour in {**COLOURS, "realtime": REALTIME}.items()
        ),
        "</defs>",
    ]
    for step in steps:
        (x1, y1), (x2, y2) = at[step["from"]], at[step["to"]]
        kind = str(step["edge"])
        colour = COLOURS.get(kind, REALTIME)
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy) or 1.0
        ux, uy = dx / length, dy / length
        # bend each arrow outwards a little so two opposite edges do not overlap
        mx, my = (x1 + x2) / 2 - uy * 18, (y1 + y2) / 2 + ux * 18
        sx, sy = x1 + ux * NODE, y1 + uy * NODE
        ex, ey = x2 - ux * NODE, y2 - uy * NODE
        parts.append(
            f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" '
            f'stroke="{colour}" stroke-width="2" marker-end="url(#arrow-{escape(kind)})"/>'
            f'<text x="{mx:.1f}" y="{my:.1f}" fill="{colour}" font-size="12" '
            f'text-anchor="middle">{escape(kind)}</text>'
        )
    for name, (x, y) in at.items():
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE}" fill="#fff" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="12" text-anchor="middle">'
            f"{escape(name)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
