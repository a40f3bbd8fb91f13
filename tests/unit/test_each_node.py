"""`clusters.backend.each`: a cluster's nodes acted on side by side, as one call."""

from __future__ import annotations

import threading
import time

import pytest

from clusters.backend import each


def test_every_item_is_acted_on_at_once_and_the_results_keep_their_order() -> None:
    arrived = threading.Barrier(3, timeout=5)  # broken unless all three wait together

    def act(n: int) -> int:
        arrived.wait()
        return n * 10

    assert each(act, [1, 2, 3]) == [10, 20, 30]


def test_a_failure_is_raised_once_the_others_have_ended() -> None:
    ended = []

    def act(n: int) -> int:
        if n == 1:
            raise ValueError("n1 failed")
        time.sleep(0.2)
        ended.append(n)
        return n

    with pytest.raises(ValueError, match="n1 failed"):
        each(act, [1, 2, 3])
    assert sorted(ended) == [2, 3]


def test_one_item_or_none_needs_no_thread() -> None:
    assert each(lambda n: threading.current_thread() is threading.main_thread(), [1]) == [True]
    assert each(lambda n: n, []) == []
