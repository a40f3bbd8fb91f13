"""bench/explore.py's reading of a run: its verdict, the steps and pairs its aimed faults
reached and how often each moment was, and an error for a run that left no results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from explore import chains_of


def test_a_run_is_read_for_its_steps_pairs_and_moments(tmp_path: Path) -> None:
    results = {
        "verdict": "valid",
        "checkers": {
            "cluster-state": {
                "moments": [{"moment": "term-won", "reached": 2, "aimed": {"kill on voters": 3}}],
                "chains": {
                    "chains": 1,
                    "steps": {"a:b:kill": 1},
                    "pairs": {"a:b:kill > c:d:pause": 1},
                },
            }
        },
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    read = chains_of(tmp_path)
    assert read["verdict"] == "valid" and read["pairs"] == {"a:b:kill > c:d:pause": 1}
    assert read["moments"] == {"term-won": 3}  # the aimed strikes, the polls missed one
    assert chains_of(tmp_path / "none")["verdict"] == "error"
