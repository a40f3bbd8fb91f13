"""One run, as DESIGN.md's flow: deploy, run clients and nemesis, heal, final reads, collect, check.

Whatever happens — success, an exception, Ctrl-C, SIGTERM — the nemesis heals and the cluster is
torn down (unless the user asked to keep it), and the history on disk stays analysable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

import nemesis
from checkers.cluster_state import RECOVERY_S, Recovery, missing
from clusters.kinds.base import ClusterKind
from clusters.kinds.on_node import wait_until
from clusters.registry import cluster_kind, make_backend
from core import store
from core.endpoint import Endpoint
from core.errors import BadInput
from core.history import FINAL_READS_PROCESS, HistoryWriter
from harness.config import RunConfig
from harness.generator import Generator, Pacer
from harness.inflight import InFlight, Op, RunOver
from harness.plan import TestPlan
from harness.polls import INTERVAL as POLL_INTERVAL
from harness.polls import PollRecorder
from harness.progress import Progress
from nemesis import replay
from nemesis.base import Nemesis
from nemesis.schedule import timescale
from workloads import build as build_workloads
from workloads.append import REALTIME_MODEL_FOR_ISOLATION
from workloads.base import Workload, WorkloadOptions
from workloads.clients import Client, client_for

FINAL_READ_DEADLINE = 60.0
FINAL = "final reads"  # the final reads' key among the operations in flight
SETUP_DEADLINE = 60.0


@dataclass
class RunResult:
    run_dir: Path
    interrupted: bool = False


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def on_interrupt(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Ctrl-C and SIGTERM handled by `handler` while the block runs."""
    previous = {sig: signal.signal(sig, handler) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, was in previous.items():
            signal.signal(sig, was)


def interruptible() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt while the run goes. SIGINT too: a run started
    in the background of a script inherits it ignored, and `kill -INT` must still heal and tear
    down rather than do nothing."""
    return on_interrupt(_raise_interrupt)


@contextlib.contextmanager
def polling(recorder: PollRecorder) -> Iterator[None]:
    """The cluster polled in the background while the block runs."""
    stop = threading.Event()
    poller = threading.Thread(target=recorder.run, args=(stop,), name="polls")
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join()


@contextlib.contextmanager
def shielded(console: Console) -> Iterator[None]:
    """Ctrl-C and SIGTERM wait while the run heals and tears down: a second one must not leave a
    fault or a node behind (the first already ends the run)."""
    told = False

    def hold(signum: int, frame: Any) -> None:
        nonlocal told
        if not told:
            console.print("[yellow]still healing and tearing down: it ends in a moment[/]")
            told = True

    with on_interrupt(hold):
        yield


class Runner:
    """Drives one test run; the CLI builds it from flags, tests can build it directly."""

    def __init__(self, cfg: RunConfig, console: Console) -> None:
        cfg.validate()
        self.cfg = cfg
        self.console = console
        self.kind_class = cluster_kind(cfg.cluster)
        model = cfg.model
        checked = self.kind_class.checked_options(cfg.cluster_options)
        if refused := self.kind_class.isolation_refused(checked, cfg.isolation):
            raise BadInput(refused)
        if model is None and self.kind_class.realtime_order_of(checked):
            model = REALTIME_MODEL_FOR_ISOLATION.get(cfg.isolation)
        self.options = WorkloadOptions(
            isolation=cfg.isolation,
            model=model,
            op_pause=cfg.op_pause_ms / 1000,
            key_count=cfg.key_count,
            max_writes_per_key=cfg.max_writes_per_key,
            max_txn_length=cfg.max_txn_length,
        )
        self.workloads = build_workloads(cfg.workloads, self.options)
        self.plan = TestPlan.of_run(
            self.kind_class, cfg.cluster_options, self.workloads, cfg.max_recovery
        )
        nodes = self.kind_class.nodes_needed(self.plan.options)
        self.replayed: list[replay.Entry] | None = None
        if cfg.schedule is not None:  # every fault checked before anything starts
            replaying = replay.replaying_on(self.kind_class, self.plan.options)
            names = [f"n{i}" for i in range(1, nodes + 1)]
            self.replayed = replay.entries(cfg.schedule, names, replaying)
        else:
            coordinated = self.kind_class.coordinated_with(self.plan.options)
            nemesis.validate(cfg.nemesis, nodes, cfg.cluster, coordinated, self.kind_class)
        if cfg.chains is not None:  # checked against the kind's moments before anything starts
            nemesis.chained(cfg.chains, self.plan.moments, nodes)
        self.backend = make_backend(cfg.backend, **cfg.backend_options)
        # the packages whose needs the backend must meet: those the schedule's faults come from
        self.packages = cfg.nemesis if self.replayed is None else replay.packages(self.replayed)
        if nemesis.needs_power(self.packages):
            if self.backend.offers_power:
                self.backend.power = True
            elif nemesis.POWER in self.packages:
                raise BadInput(
                    f"the power fault needs the power layer, which --backend {cfg.backend} does "
                    "not offer: use --backend docker"
                )
        self.backend.proxied = nemesis.interposes(self.packages)
        # the faults' interval and least length: the kind's failover time where it is longer
        # than the default's faults, so that a run's faults bring failovers about
        failover = self.kind_class.failover_s(self.plan.options)
        self.timescale = timescale(failover, cfg.nemesis_interval)
        if self.timescale[1] and cfg.nemesis != ["none"]:
            console.print(
                f"[dim]faults on the {cfg.cluster} cluster's timescale (it fails over within "
                f"{failover:g} s): one every {self.timescale[0]:g} s on average, each lasting "
                f"{self.timescale[1]:g} s at least; --nemesis-interval sets another[/]"
            )
        self.stop = threading.Event()
        self.run_dir: Path | None = None  # once the run has its folder
        self.workers: list[threading.Thread] = []

    def _client(self, ep: Endpoint) -> Client:
        return client_for(ep, self.cfg.isolation, self.cfg.op_timeout, self.cfg.cancel_after)

    def run(self) -> RunResult:
        """The run as a stack of resources, each released in turn whatever happens (success, an
        exception, Ctrl-C, SIGTERM): the interrupt handlers, the cluster (healed and torn down),
        the history, the nemesis (healed), the poller (stopped)."""
        run_dir, config = self._open_run()
        kind = self.kind_class(self.backend, config["cluster_name"], self.plan.options)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(interruptible())
                stack.callback(self._release_cluster, kind)
                self._deploy(kind, run_dir, config)
                if self._drive(kind, run_dir, stack):
                    return RunResult(run_dir, interrupted=True)
                kind.collect(run_dir / store.NODES)
                return RunResult(run_dir)
        except KeyboardInterrupt:
            self.console.print("[yellow]interrupted: healed and torn down[/]")
            return RunResult(run_dir, interrupted=True)

    def _open_run(self) -> tuple[Path, dict[str, Any]]:
        """The run's folder, with its configuration (the plan included) written first."""
        cfg = self.cfg
        run_dir = store.new_run_dir(cfg.store, cfg.test_name)
        self.run_dir = run_dir
        config = cfg.to_json() | {
            "cluster_options": dict(self.plan.options),
            "workload_params": {w.name: dict(w.params) for w in self.plan.workloads},
            # Unique on this machine: runs of two stores started in the same second (two users,
            # or tests in parallel) must not take the same containers' names.
            "cluster_name": f"{cfg.cluster}-{run_dir.name}-{_folder_tag(run_dir)}".lower(),
            "plan": self.plan.to_json(),
        }
        store.write_json(run_dir / store.CONFIG, config)
        store.point_latest(cfg.store, run_dir)
        self.console.print(f"run folder: {run_dir}")
        return run_dir, config

    def _deploy(self, kind: ClusterKind, run_dir: Path, config: dict[str, Any]) -> None:
        """The cluster up and answering, and the workloads' tables made; when it does not come
        up, its nodes' logs are kept in the run folder before it is torn down."""
        try:
            kind.deploy(lambda msg: self.console.print(f"[dim]{msg}[/]"))
        except Exception:
            self._keep_logs(kind, run_dir / store.NODES)
            raise
        if self.backend.power:  # what the setup wrote is on disk, as on a settled machine
            for node in kind.nodes:
                node.sync_power()
        config["versions"] = self._setup_workloads(kind.endpoints()[0])
        store.write_json(run_dir / store.CONFIG, config)

    def _keep_logs(self, kind: ClusterKind, dest: Path) -> None:
        """The nodes' logs of a cluster that did not come up, as far as they can be read."""
        try:
            kind.collect_files(dest)
        except Exception as exc:  # the deploy's own error is the one to report
            self.console.print(f"[yellow]could not keep the nodes' logs: {exc}[/]")
        else:
            self.console.print(f"the nodes' logs: {dest}")

    def _drive(self, kind: ClusterKind, run_dir: Path, outer: contextlib.ExitStack) -> bool:
        """Clients and faults for the run's time, the heal, the settle and the final reads, with
        the history open and the cluster polled; True when Ctrl-C ended it early."""
        cfg = self.cfg
        endpoints = nemesis.interposed(self.packages, kind, kind.endpoints())
        with contextlib.ExitStack() as stack:
            history = stack.enter_context(HistoryWriter(run_dir / store.HISTORY))
            inflight = InFlight(history)
            faults: Nemesis = (
                nemesis.build(
                    cfg.nemesis, kind, history, cfg.seed, *self.timescale, chains=cfg.chains
                )
                if self.replayed is None
                else replay.ReplayNemesis(kind, history, self.replayed)
            )
            outer.callback(self._release_faults, kind, faults)  # before the teardown, whatever
            recorder = PollRecorder(kind.poll, history.now, run_dir / store.POLLS)
            stack.enter_context(polling(recorder))
            try:
                self._run_clients(endpoints, inflight, faults)
                self._heal(kind, faults)
                healed = history.now()
                self.console.print(f"[dim]healed; settling for {cfg.settle:g}s[/]")
                time.sleep(cfg.settle)
                # what survived is what the primary holds, whoever serves the workers' reads
                self._final_reads(dataclasses.replace(endpoints[0], reads=None), inflight)
                if Recovery in self.plan.rules:
                    self._await_whole(recorder, healed, history.now)
            except KeyboardInterrupt:
                with shielded(self.console):
                    self._wind_down(kind, faults, inflight)
                return True
        return False

    def _await_whole(self, recorder: PollRecorder, healed: int, now: Callable[[], int]) -> None:
        """Poll until the cluster is whole again (the `recovery` rule judges the polls), for
        RECOVERY_S after the heal at most."""
        told = False
        deadline = healed + (RECOVERY_S + 2 * POLL_INTERVAL) * 1e9
        while True:
            latest = recorder.latest
            why = ["no poll since the heal"]
            if latest is not None and (latest.begun or latest.time) >= healed:
                why = missing(latest.nodes, recorder.members)
            if not why:
                return
            if now() > deadline:
                self.console.print(
                    f"[yellow]not whole {RECOVERY_S:g}s after the heal: {'; '.join(why)}[/]"
                )
                return
            if not told:
                self.console.print(
                    f"[dim]waiting for the cluster to be whole again ({RECOVERY_S:g}s after "
                    f"the heal at most): {'; '.join(why)}[/]"
                )
                told = True
            time.sleep(POLL_INTERVAL)

    def _release_faults(self, kind: ClusterKind, faults: Nemesis) -> None:
        """Stop the workers and heal the nemesis's faults, deaf to a second Ctrl-C."""
        with shielded(self.console):
            self.stop.set()
            self._heal(kind, faults)

    def _release_cluster(self, kind: ClusterKind) -> None:
        """Stop the workers and tear the cluster down, deaf to a second Ctrl-C (faults exist
        only once the nemesis does, and its release heals them and the nodes first)."""
        with shielded(self.console):
            self.stop.set()
            self._teardown(kind)

    def _wind_down(self, kind: ClusterKind, faults: Nemesis, inflight: InFlight) -> None:
        """After Ctrl-C while the history is open: stop the workers, heal (recorded), give the
        operations in flight one timeout to end, and record those still going as `info`."""
        self.console.print(
            "[yellow]interrupted: healing, then waiting for the operations in flight[/]"
        )
        self.stop.set()
        self._heal(kind, faults)
        deadline = time.monotonic() + self.cfg.op_timeout + 2
        for t in self.workers:
            t.join(max(0.0, deadline - time.monotonic()))
        left = inflight.abandon("interrupted: the run ended before the operation did")
        if left:
            self.console.print(f"[dim]{left} operations still in flight recorded as info[/]")

    def _setup_workloads(self, ep: Endpoint) -> dict[str, str]:
        """Create the workloads' tables, retrying while the cluster finishes starting; return
        the server's version, for the report."""
        versions: dict[str, str] = {}

        def attempt() -> bool:
            versions.update(self._client(ep).setup(self.workloads))
            return True

        wait_until("creating the workloads' tables", attempt, SETUP_DEADLINE, every=1.0)
        return versions

    def _run_clients(self, endpoints: list[Endpoint], inflight: InFlight, faults: Nemesis) -> None:
        cfg = self.cfg
        generator = Generator(self.workloads, cfg.seed)
        pacer = Pacer(cfg.rate)
        by_name = {w.name: w for w in self.workloads}
        threads = [
            threading.Thread(
                target=self._worker,
                args=(i, endpoints[i % len(endpoints)], generator, pacer, by_name, inflight),
                name=f"worker-{i}",
                daemon=True,
            )
            for i in range(cfg.concurrency)
        ]
        self.workers = list(threads)
        threads.append(threading.Thread(target=faults.run, args=(self.stop,), name="nemesis"))
        for t in threads:
            t.start()
        deadline = time.monotonic() + cfg.time_limit
        with Progress(self.console, cfg.time_limit, inflight.history.counts) as progress:
            while time.monotonic() < deadline:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                progress.tick()
            self.stop.set()
            progress.phase = "finishing"
            for t in threads:
                t.join(timeout=cfg.op_timeout + 5)
                progress.tick()

    def _worker(
        self,
        index: int,
        ep: Endpoint,
        generator: Generator,
        pacer: Pacer,
        workloads: dict[str, Workload],
        inflight: InFlight,
    ) -> None:
        """One logical client: after an indeterminate result it becomes a new process (Jepsen)."""
        process = index
        client = self._client(ep)
        try:
            while pacer.wait(self.stop):
                op = generator.next()
                workload = workloads[op.workload]
                write = workload.writes(op.f, op.value)
                inflight.invoke(index, Op(process, op.f, op.value, ep.node, op.workload, write))
                done = client.run(workload, op.f, op.value)
                node = client.node or ep.node
                if not inflight.complete(
                    index, done.type, done.value, node, done.error, done.lsn, done.warning
                ):
                    return  # the run ended first and recorded it as info
                if done.type == "info":
                    process += self.cfg.concurrency
                    client.close()
                if done.type != "ok":
                    self.stop.wait(0.05)  # do not spin against a node that is down
        except RunOver:
            return
        finally:
            client.close()

    def _final_reads(self, ep: Endpoint, inflight: InFlight) -> None:
        """Each workload's final reads, retried until they succeed or the deadline passes."""
        process = FINAL_READS_PROCESS  # apart from every worker's process numbers
        deadline = time.monotonic() + FINAL_READ_DEADLINE
        client = self._client(ep)
        try:
            for w in self.workloads:
                for f, value in w.final_ops():
                    while True:
                        write = w.writes(f, value)
                        inflight.invoke(FINAL, Op(process, f, value, ep.node, w.name, write))
                        done = client.run(w, f, value)
                        node = client.node or ep.node
                        inflight.complete(FINAL, done.type, done.value, node, done.error, done.lsn)
                        if done.type == "ok" or time.monotonic() > deadline:
                            break
                        if done.type == "info":
                            process += 1
                            client.close()
                        time.sleep(1.0)
        finally:
            client.close()

    def _heal(self, kind: ClusterKind, faults: Nemesis | None) -> None:
        """Undo the nemesis's faults, then anything a fault could have left on the nodes."""
        try:
            if faults is not None:
                faults.heal()
            nemesis.heal_nodes(kind.nodes)
        except Exception as e:  # the teardown still runs; say what could not be undone
            self.console.print(f"[red]could not heal every fault: {e}[/]")

    def _teardown(self, kind: ClusterKind) -> None:
        if self.cfg.keep_cluster:
            self.console.print(f"cluster kept: {kind.cluster} (`harness cluster down` removes it)")
            return
        with contextlib.suppress(KeyboardInterrupt):
            removed = kind.teardown()
            self.console.print(f"[dim]tore down {len(removed)} containers and networks[/]")


def _folder_tag(run_dir: Path) -> str:
    """Six hex digits of the run folder's absolute path, for names that must not collide."""
    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:6]
