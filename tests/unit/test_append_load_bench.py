"""bench/append_load.py: a row's rates are the history's client transactions a second by
outcome, over the workload's span, and the nemesis's and the final reads' are not counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from append_load import CONFIGS, rates

S = 1_000_000_000


def test_a_rows_rates_count_the_clients_transactions_by_outcome(tmp_path: Path) -> None:
    events = [
        {"process": 0, "type": "invoke", "time": 0},
        {"process": 0, "type": "ok", "time": 1 * S},
        {"process": 1, "type": "invoke", "time": 0},
        {"process": 1, "type": "fail", "time": 2 * S},
        {"process": 0, "type": "invoke", "time": 1 * S},
        {"process": 0, "type": "info", "time": 4 * S},
        {"process": "nemesis", "type": "info", "time": 9 * S},
        {"process": 10**9, "type": "ok", "time": 20 * S},  # a final read
    ]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "results.json").write_text(json.dumps({"verdict": "valid"}))
    assert rates(tmp_path) == {
        "attempted_per_s": 0.8,
        "ok_per_s": 0.2,
        "fail_per_s": 0.2,
        "info_per_s": 0.2,
        "verdict": "valid",
    }


def test_each_configuration_is_workers_keys_and_a_pause() -> None:
    for workers, keys, pause in CONFIGS.values():
        assert workers >= 1 and keys >= 1 and pause >= 0
    assert CONFIGS["search"] == (20, 5, 10)  # the Long Fork search's flat-out knobs
