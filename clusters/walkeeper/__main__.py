"""`python3 -m walkeeper safekeeper|proxy|status`: the daemons and an operator's status probe."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys

from . import wire
from .acceptor import VARIANTS


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
    px = sub.add_parser("proxy", help="stream Postgres's WAL to a quorum of safekeepers")
    px.add_argument("--postgres", required=True, help="libpq conninfo of the local Postgres")
    px.add_argument("--slot", default="walproposer")
    px.add_argument(
        "--safekeeper",
        action="append",
        type=address,
        required=True,
        help="name=host:port, once per safekeeper",
    )
    px.add_argument("--variant", choices=VARIANTS, default="term-history")
    px.add_argument("--status-port", type=int, default=7677)
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
    if args.command == "safekeeper":
        from .safekeeper import serve

        host, _, port = args.listen.rpartition(":")
        pg_host, _, pg_port = args.pg_listen.rpartition(":")
        pg_listen = (pg_host or "0.0.0.0", int(pg_port)) if args.pg_listen else None
        serve(host, int(port), args.data, args.variant, args.name, pg_listen)
    elif args.command == "proxy":
        from .proxy import serve as serve_proxy

        serve_proxy(args.postgres, args.slot, dict(args.safekeeper), args.variant, args.status_port)
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
