"""The one thread that fires every client's deadlines (workloads.postgres.Alarms): each alarm
fires once, in deadline order, and a cancelled one never fires."""

from __future__ import annotations

import threading

from workloads.postgres import Alarms


def test_alarms_fire_in_deadline_order_and_cancelled_ones_never() -> None:
    alarms = Alarms()
    fired: list[str] = []
    events = {name: threading.Event() for name in ("first", "second", "last")}

    def fire(name: str) -> None:
        fired.append(name)
        events[name].set()

    alarms.set(3.0, lambda: fire("last"))  # the thread waits for this one first
    alarms.set(0.10, lambda: fire("second"))
    cancelled = alarms.set(0.05, lambda: fire("cancelled"))
    alarms.set(0.01, lambda: fire("first"))
    alarms.cancel(cancelled)
    # a sooner alarm wakes the thread: it does not wait out the 3 s it was waiting for
    assert events["second"].wait(2.5), fired
    assert events["last"].wait(10)
    assert fired == ["first", "second", "last"]


def test_an_alarm_that_raises_leaves_the_others_firing() -> None:
    alarms = Alarms()
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("a socket already closed")

    alarms.set(0.01, boom)
    alarms.set(0.05, done.set)
    assert done.wait(10)


def test_a_cancel_after_the_alarm_fired_is_harmless() -> None:
    alarms = Alarms()
    done = threading.Event()
    token = alarms.set(0.0, done.set)
    assert done.wait(10)
    alarms.cancel(token)
    again = threading.Event()
    alarms.set(0.0, again.set)  # the thread still serves new alarms
    assert again.wait(10)
