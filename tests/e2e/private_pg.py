"""A throwaway PostgreSQL cluster of a test's own, on a port of its own, which the test may
restart (fast or immediate) or stop without disturbing the shared test server.

Built from the server binaries installed for the shared server (``pg_config --bindir``,
or Debian's /usr/lib/postgresql/<version>/bin); as root it runs them as the ``postgres``
user (the server refuses to run as root). `PrivatePostgres.start` and `stop` always
leave it in a known state; the fixture removes it whatever happens.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.e2e.daemons import free_port


def server_bindir() -> Path | None:
    """Where initdb and pg_ctl are, or None when no server is installed."""
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(out.stdout.strip())
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    return None


class PrivatePostgres:
    """One cluster in a temporary directory: ``url`` for SQLAlchemy, ``conninfo`` for psycopg."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="signoff-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            os.chown(self.root, pwd.getpwnam(self.user).pw_uid, -1)
        self.conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)

    def create(self) -> None:
        """initdb (trust on loopback), then start."""
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", timeout=120)
        self.start()

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "start")
        self.wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are ended cleanly; ``immediate``: as a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str) -> None:
        """Stop with ``mode`` and start again, however the stop went."""
        try:
            self.stop(mode)
        finally:
            self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until a connection succeeds."""
        end = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.conninfo, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)

    def destroy(self) -> None:
        """Stop it (if it runs) and remove its files."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
