"""The sitter: one per Postgres peer, it keeps its peer in the role seed 004 gives it.

Each second: make sure this peer's ephemeral node exists (a new one after its session expired),
read the cluster state, stop Postgres if the generation changed under it (the seed's "stop
postgres and proceed to step 1"), decide (state.py) and act: declare by test-and-set, serve as
primary (read-only until the sync caught up), or replicate from the upstream the state names.

Where the seed is silent: as written, a primary that lost its ZooKeeper session keeps Postgres
running; with `--stop-on-session-loss` it stops Postgres as soon as the session is gone (the
operator's obvious fix), and starts again only through the loop above.

    python3 -m systems.manatee.sitter --zookeeper H:P[,H:P] --cluster C --name N
        --datadir DIR --port PORT [--listen ADDR] [--advertise HOST:PORT] [--pg-env K=V …]
        [--session-timeout S] [--stop-on-session-loss]
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from pathlib import Path

from kazoo.client import KazooState

from .coordinator import Coordinator
from .postgres import Postgres
from .state import ClusterState, Decision, decide

log = logging.getLogger("sitter")
PERIOD = 1.0
REBUILD_AFTER = 15.0  # seconds a standby may go without streaming before it is rebuilt


class Sitter:
    def __init__(self, coordinator: Coordinator, postgres: Postgres, stop_on_loss: bool) -> None:
        self.zk, self.pg = coordinator, postgres
        self.stop_on_loss = stop_on_loss
        self.generation: int | None = None  # the generation this peer acts in
        self.said = ""
        self.stopped = threading.Event()
        self.lost = threading.Event()  # ZooKeeper said the session expired
        self.suspended: float | None = None  # since when the connection is down (monotonic)
        self.stalled_since: float | None = None  # since when this standby has not streamed
        self.following: str | None = None  # the upstream it last replicated from

    def run(self) -> None:
        self.zk.zk.add_listener(self._session)
        self.zk.join()
        if self.stop_on_loss:
            threading.Thread(target=self._watch, name="session-watch", daemon=True).start()
        while not self.stopped.wait(PERIOD):
            try:
                self.step()
            except Exception as e:  # Postgres or ZooKeeper not ready yet: try again
                self._say(f"step failed, retrying: {type(e).__name__}: {e}")

    def session_gone(self) -> bool:
        """Expired, or down for longer than the session timeout: the server has expired it by
        then, though the client hears so only once it reconnects."""
        down = self.suspended is not None and time.monotonic() - self.suspended >= self.zk.timeout
        return self.lost.is_set() or down

    def _watch(self) -> None:
        """Apart from the step loop: a step that called ZooKeeper just before the link went down
        waits for the reconnection, which a cut link never brings, and the expiry it would have
        noticed is then never acted on."""
        while not self.stopped.wait(PERIOD):
            try:
                if self.session_gone() and self.pg.running():
                    self._say("ZooKeeper session lost: stopping Postgres (--stop-on-session-loss)")
                    self.pg.stop()
            except Exception as e:  # Postgres between states: look again next period
                self._say(f"session watch failed, retrying: {type(e).__name__}: {e}")

    def step(self) -> None:
        if not self.zk.zk.connected:
            return
        if not self.zk.zk.exists(self.zk.node or "/-"):
            self.zk.join()  # the session expired and took the ephemeral node with it
            self.lost.clear()
            self._say(f"joined again as {self.zk.node}")
        state, version = self.zk.read()
        if state is not None and self.generation not in (None, state.g):
            self._say(f"generation {self.generation} → {state.g}: stopping Postgres")
            self.pg.stop()
            self.generation = None
        elif (state is not None and self.generation is None and state.p != self.zk.me
              and self.pg.role().startswith("primary") and self.pg.running()):  # fmt: skip
            # a sitter (re)started beside a Postgres it had made primary in a generation gone
            self._say(f"Postgres runs as a primary but generation {state.g}'s is {state.p}: "
                      "stopping it")  # fmt: skip
            self.pg.stop()
        decision = decide(state, self.zk.me, self.zk.present(), self.pg.wal())
        self._act(decision, state, version)

    def _act(self, d: Decision, state: ClusterState | None, version: int) -> None:
        self._say(f"{d.kind}: {d.why}")
        if d.kind == "declare" and d.state is not None:
            if not self.zk.write(d.state, version):
                self._say("another peer wrote the cluster state first")
                return
            self._say(f"declared generation {d.state.g}: {d.state}")
            self.generation = d.state.g
            self._primary(d.state)
        elif d.kind == "primary" and state is not None:
            if d.state is not None and self.zk.write(d.state, version):
                self._say(f"async peers now {list(d.state.a)}")
            self.generation = state.g
            self._primary(state)
        elif d.kind in ("sync", "async") and state is not None and d.upstream:
            address = self.zk.address_of(d.upstream)
            if address is None:
                return
            self.generation = state.g
            if address != self.following:  # the clock starts again with each upstream
                self.following, self.stalled_since = address, None
            stalled = self.stalled_since is not None and (
                time.monotonic() - self.stalled_since > REBUILD_AFTER
            )
            if stalled:
                self._say(f"not streaming from {address} for {REBUILD_AFTER:g} s: rebuilding")
                self.stalled_since = None
            self.pg.make_standby(address, rebuild=stalled)
            if self.pg.streaming():
                self.stalled_since = None
            elif self.stalled_since is None:
                self.stalled_since = time.monotonic()

    def _primary(self, state: ClusterState) -> None:
        self.following = None
        if self.pg.role() != f"primary {state.s}" or not self.pg.running():
            self.pg.make_primary(state.s)
        if self.pg.sql("SHOW default_transaction_read_only") == "on" and self.pg.open_for_writes(
            state.s
        ):
            self._say(f"sync {state.s} caught up: read-write")

    def _session(self, event: str) -> None:
        if event == KazooState.LOST:
            self.lost.set()
        elif event == KazooState.SUSPENDED:
            self.suspended = self.suspended or time.monotonic()
        else:
            self.suspended = None

    def _say(self, line: str) -> None:
        if line != self.said:
            log.info("%s", line)
            self.said = line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zookeeper", required=True, help="host:port[,host:port…]")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--datadir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=5432)
    parser.add_argument("--listen", default="127.0.0.1", help="Postgres's listen_addresses")
    parser.add_argument(
        "--advertise", help="where the other peers reach this Postgres (default LISTEN:PORT)"
    )
    parser.add_argument(
        "--pg-env", action="append", default=[], metavar="K=V",
        help="set in Postgres's environment (repeatable): libfaketime's variables, say",
    )  # fmt: skip
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--stop-on-session-loss", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s", level=logging.INFO)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    address = args.advertise or f"{args.listen}:{args.port}"
    coordinator = Coordinator(args.zookeeper, args.cluster, args.name, address,
                              args.session_timeout)  # fmt: skip
    env = dict(item.split("=", 1) for item in args.pg_env)
    postgres = Postgres(args.datadir, args.port, args.name, args.listen, env)
    Sitter(coordinator, postgres, args.stop_on_session_loss).run()


if __name__ == "__main__":
    main()
