"""The cycle drawing in the report: one circle per transaction, one labelled arrow per edge."""

from __future__ import annotations

from harness.cycle_svg import cycle_svg


def test_a_cycle_is_drawn_with_its_edges() -> None:
    steps = [
        {"from": "T1", "to": "T2", "edge": "rw"},
        {"from": "T2", "to": "T3", "edge": "wr"},
        {"from": "T3", "to": "T1", "edge": "realtime"},
    ]
    svg = str(cycle_svg({"steps": steps}))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<circle") == 3 and svg.count("marker-end=") == 3
    assert all(f">{t}</text>" in svg for t in ("T1", "T2", "T3"))
    assert all(f">{e}</text>" in svg for e in ("rw", "wr", "realtime"))


def test_names_are_escaped_and_no_steps_draw_nothing() -> None:
    svg = str(cycle_svg({"steps": [{"from": "<b>", "to": "<b>", "edge": "ww"}]}))
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert str(cycle_svg({"type": "G1a"})) == ""
