"""`python3 -m walkeeper safekeeper|compute|status`: the daemons and an operator's status probe."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys

from . import bugs, wire
from .acceptor import VARIANTS
from .limbo import MODES


def address(text: str) -> tuple[str, tuple[str, int]]:
    """name=host:port"""
    name, _, hostport = text.partition("=")
    host, _, port = hostport.rpartition(":")
    return name, (host, int(port))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="walkeeper", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sk = sub.add_parser("safekeeper", help="store WAL for the elected proposer")
    sk.add_argument("--name", required=True)
    sk.add_argument("--data", required=True, help="directory for the WAL and control files")
    sk.add_argument("--listen", default="0.0.0.0:7676")
    sk.add_argument("--variant", choices=VARIANTS, default="term-history")
    sk.add_argument(
        "--pg-listen",
        default="",
        metavar="HOST:PORT",
        help="also serve committed WAL to Postgres standbys (streaming replication) here",
    )
    cp = sub.add_parser(
        "compute", help="run a compute node: Postgres primary with the proxy, or standby"
    )
    cp.add_argument("--name", required=True)
    cp.add_argument("--pgdata", required=True)
    cp.add_argument("--pg-bin", required=True)
    cp.add_argument("--pg-start", required=True, help="shell command that starts Postgres")
    cp.add_argument("--slot", default="walproposer")
    cp.add_argument(
        "--safekeeper",
        action="append",
        type=address,
        required=True,
        help="name=host:port, once per safekeeper",
    )
    cp.add_argument(
        "--compute",
        action="append",
        type=address,
        default=[],
        help="name=host:port of another compute's Postgres, once per compute",
    )
    cp.add_argument("--variant", choices=VARIANTS, default="term-history")
    cp.add_argument("--status-port", type=int, default=7677)
    cp.add_argument(
        "--client-port", type=int, default=5432, help="the front clients connect to (front.py)"
    )
    cp.add_argument(
        "--pg-port", type=int, default=5434, help="Postgres's own port, on the loopback"
    )
    cp.add_argument(
        "--failover-after",
        type=float,
        default=5.0,
        help="seconds a quorum of safekeepers hears no proposer before a standby takes over",
    )
    cp.add_argument(
        "--mode",
        choices=MODES,
        default="safekeeper",
        help="confirm-rollback: clients prepare, the leader confirms or rolls back (limbo.py)",
    )
    cp.add_argument(
        "--synchro-timeout",
        type=float,
        default=2.0,
        help="confirm-rollback: seconds a transaction may wait for the quorum before rollback",
    )
    for daemon in (sk, cp):
        daemon.add_argument(
            "--bug", action="append", choices=bugs.NAMES, default=[], help="plant a bug (tests)"
        )
    st = sub.add_parser("status", help="print a daemon's state as JSON")
    st.add_argument("--port", type=int, default=7676)
    st.add_argument("--host", default="127.0.0.1")
    st.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1` prints every thread's stack to the log
    bugs.ACTIVE.update(getattr(args, "bug", []))
    if bugs.ACTIVE:
        logging.getLogger("walkeeper").warning("planted bugs: %s", ", ".join(sorted(bugs.ACTIVE)))
    if args.command == "safekeeper":
        from .safekeeper import serve

        host, _, port = args.listen.rpartition(":")
        pg_host, _, pg_port = args.pg_listen.rpartition(":")
        pg_listen = (pg_host or "0.0.0.0", int(pg_port)) if args.pg_listen else None
        serve(host, int(port), args.data, args.variant, args.name, pg_listen)
    elif args.command == "compute":
        from .compute import Config
        from .compute import serve as serve_compute

        cfg = Config(
            args.name,
            args.pgdata,
            args.pg_bin,
            args.pg_start,
            args.slot,
            dict(args.safekeeper),
            dict(args.compute),
            args.variant,
            args.failover_after,
            args.mode,
            args.synchro_timeout,
            args.status_port,
            args.client_port,
            args.pg_port,
        )
        serve_compute(cfg)
    else:
        try:
            with wire.connect((args.host, args.port), args.timeout) as sock:
                reply, _ = wire.call(sock, {"type": "status"})
        except OSError as e:
            print(json.dumps({"ok": False, "error": str(e)}))
            return 1
        print(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
