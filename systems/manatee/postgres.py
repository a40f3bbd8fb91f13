"""The sitter's hands on its Postgres peer: start it as primary (synchronous replication to the
sync peer, read-only until that peer has caught up) or as a standby of an upstream, stop it, and
tell its WAL position.

A standby that must follow another upstream than the one it was built from, or a primary of an
earlier generation that must follow the new one, is rebuilt from its new upstream with
pg_basebackup: the seed calls that step manual ("likely require a rollback"), and this is what an
operator's script would do. Commands run as the `postgres` user when the sitter runs as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
TOOL_TIMEOUT = 120.0  # seconds any one Postgres tool may take (a base backup included)
ROLE_FILE = "manatee.role"  # beside the data directory: "primary <sync>" or "standby <upstream>"


class Postgres:
    """`listen`: Postgres's listen_addresses ("*" for every interface); `env`: what the
    postmaster's environment adds (libfaketime's variables, say), for Postgres alone."""

    def __init__(
        self,
        datadir: Path,
        port: int,
        name: str,
        listen: str = "127.0.0.1",
        env: dict[str, str] | None = None,
    ) -> None:
        self.datadir, self.port, self.name, self.listen = datadir, port, name, listen
        self.host = "127.0.0.1" if listen in ("*", "0.0.0.0") else listen  # where it is asked
        self.env = env or {}
        self.role_file = datadir.parent / f"{datadir.name}.{ROLE_FILE}"

    # what it is now

    def running(self) -> bool:
        return self._run("pg_ctl", "status", "-D", str(self.datadir), check=False).returncode == 0

    def role(self) -> str:
        """What it was last made: "primary <sync>", "standby <upstream>", or "" (nothing)."""
        return self.role_file.read_text().strip() if self.role_file.exists() else ""

    def wal(self) -> int:
        """Its WAL position (an integer LSN): written as primary, replayed as standby; 0 when it
        is not running or was never made."""
        if not self.running():
            return 0
        lsn = self.sql(
            "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_lsn() END"
        )
        return lsn_int(lsn) if lsn else 0

    def sql(self, query: str) -> str:
        done = self._run("psql", "-h", self.host, "-p", str(self.port), "-U", "postgres", "-d",
                         "postgres", "-Atc", query)  # fmt: skip
        return done.stdout.strip()

    # making it so

    def make_primary(self, sync: str) -> None:
        """Serve as primary with `sync` its synchronous standby, read-only until it caught up.

        Also when it already serves with another sync (the primary replaced a dead one): the
        writes waiting for the old one are then released by the new one alone."""
        if not (self.datadir / "PG_VERSION").exists():
            self._initdb()
        self._conf(sync_names=sync, read_only=True, upstream=None)
        self.role_file.write_text(f"primary {sync}\n")
        self._start_or_reload()
        if (self.datadir / "standby.signal").exists():  # a standby until now (running or not)
            self._run("pg_ctl", "promote", "-w", "-D", str(self.datadir))

    def open_for_writes(self, sync: str) -> bool:
        """Read-write once `sync` streams synchronously and has flushed all WAL written; True
        when it is (or already was) open."""
        row = self.sql(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = "
            f"'{sync}' AND sync_state = 'sync' AND flush_lsn >= pg_current_wal_lsn()"
        )
        if row != "1":
            return False
        if self.sql("SHOW default_transaction_read_only") == "on":
            self._conf(sync_names=sync, read_only=False, upstream=None)
            self._run("pg_ctl", "reload", "-D", str(self.datadir))
        return True

    def make_standby(self, upstream: str, rebuild: bool = False) -> None:
        """Replicate from `upstream` (host:port). Rebuilt from it when it followed another, when
        it cannot start from what it has (a timeline it cannot follow: its upstream was
        promoted after it had replayed past the fork), or when told (`rebuild`: it has not
        been streaming for long)."""
        wanted = f"standby {upstream}"
        if self.role() == wanted and self.running() and not rebuild:
            return
        self.stop()
        if self.role() == wanted and not rebuild:
            try:
                self._conf(sync_names="", read_only=False, upstream=upstream)
                self._start_or_reload()
                return
            except RuntimeError:
                self.stop()  # it cannot follow from here: rebuilt below
        # Copied beside the old data first, which stays until the copy is whole: an upstream
        # out of reach must not cost this peer the WAL it holds.
        fresh = self.datadir.with_name(self.datadir.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        host, port = upstream.rsplit(":", 1)
        self._run("pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D",
                  str(fresh), "-X", "stream", "-R", "-c", "fast")  # fmt: skip
        shutil.rmtree(self.datadir, ignore_errors=True)
        fresh.rename(self.datadir)
        self._conf(sync_names="", read_only=False, upstream=upstream)
        self.role_file.write_text(wanted + "\n")
        self._start_or_reload()

    def streaming(self) -> bool:
        """A standby whose WAL receiver streams from its upstream now."""
        return self.running() and self.sql("SELECT status FROM pg_stat_wal_receiver") == "streaming"

    def stop(self) -> None:
        if self.running():
            self._run("pg_ctl", "stop", "-m", "fast", "-w", "-D", str(self.datadir))

    # helpers

    def _initdb(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        self._own(self.datadir)
        self._run("initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust")
        with (self.datadir / "pg_hba.conf").open("a") as f:
            f.write("host replication all 0.0.0.0/0 trust\nhost all all 0.0.0.0/0 trust\n")

    def _conf(self, sync_names: str, read_only: bool, upstream: str | None) -> None:
        """The settings the role needs, in a file of their own that postgresql.conf includes."""
        lines = [
            f"port = {self.port}",
            f"listen_addresses = '{self.listen}'",
            f"cluster_name = '{self.name}'",
            "wal_level = replica",
            "hot_standby = on",
            "wal_keep_size = '256MB'",  # an async that lags keeps its upstream's segments
            f"synchronous_standby_names = '{sync_names}'",
            f"default_transaction_read_only = {'on' if read_only else 'off'}",
        ]
        if upstream is not None:
            host, port = upstream.rsplit(":", 1)
            lines.append(f"primary_conninfo = 'host={host} port={port} user=postgres "
                         f"application_name={self.name}'")  # fmt: skip
        (self.datadir / "manatee.conf").write_text("\n".join(lines) + "\n")
        main = self.datadir / "postgresql.conf"
        if "include 'manatee.conf'" not in main.read_text():
            with main.open("a") as f:
                f.write("\ninclude 'manatee.conf'\n")
        self._own(self.datadir)

    def _start_or_reload(self) -> None:
        if self.running():
            self._run("pg_ctl", "reload", "-D", str(self.datadir))
        else:
            log = self.datadir.parent / f"{self.datadir.name}.log"
            self._run("pg_ctl", "start", "-w", "-D", str(self.datadir), "-l", str(log),
                      env=self.env)  # fmt: skip

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "postgres:postgres", str(path)], check=True)
            if path == self.datadir:
                subprocess.run(["chown", "postgres:postgres", str(path.parent)], check=False)

    def _run(
        self, tool: str, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [str(BIN / tool), *args]
        if env:  # after the privilege drop: a preloaded library then starts as the user
            command = ["env", *(f"{k}={v}" for k, v in env.items()), *command]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        # Its own process group, so that a tool that outlives TOOL_TIMEOUT goes with all it
        # started (runuser forks): a sitter stuck in one step would hold its whole peer.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) as proc:  # fmt: skip
            try:
                out, err = proc.communicate(timeout=TOOL_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise RuntimeError(
                    f"{tool} {' '.join(args)} took over {TOOL_TIMEOUT:g} s"
                ) from None
        done = subprocess.CompletedProcess(command, proc.returncode, out, err)
        if check and done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
        return done


def lsn_int(lsn: str) -> int:
    """'0/16B3748' as the integer position it names."""
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)
