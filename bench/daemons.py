"""What the benchmarks share to measure the real path: ``signoff daemon start`` as
subprocesses, and scratch PostgreSQL databases.

- `start_daemons` writes a config per node (database, work dir, extra ``[daemon]`` keys),
  starts ``python -m signoff daemon start`` on a free port and waits for ``/health``;
  `stop` ends the processes (SIGTERM, then SIGKILL after 30 s).
- `fresh_database` creates a database on the server of a PostgreSQL URL and drops it
  afterwards, so a benchmark never touches the shared database the URL names.

bench/cluster.py and bench/throughput.py use it; a benchmark imports it as ``daemons`` (a
script's own directory is first on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

START_TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parents[1]  # the daemons run this checkout's signoff


# -- databases ----------------------------------------------------------------------------
def conninfo(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg's connection string."""
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(
        hide_password=False)


@contextlib.contextmanager
def fresh_database(base: str, tag: str) -> Iterator[str]:
    """A new database on the server of ``base`` (SQLAlchemy URL), dropped afterwards."""
    import psycopg

    name = f"signoff_bench_{tag}_{secrets.token_hex(4)}"
    admin_url = conninfo(sa.engine.make_url(base).set(database="postgres")
                         .render_as_string(hide_password=False))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield sa.engine.make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


# -- processes ----------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """End the processes: SIGTERM (the daemon's clean shutdown), SIGKILL if it hangs."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def start_daemons(url: str, count: int, tmp: Path, *, pythonpath: str | None = None,
                  toml: str = "", **daemon: str) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """``signoff daemon start`` × count on ``url``; returns (base URL, process) pairs once
    every one answers ``/health``. Each node's log is ``tmp/node<n>/daemon.log``;
    ``pythonpath`` is prepended to the daemons' ``PYTHONPATH`` (plug-ins, see
    bench/noop_tool.py); ``toml`` is appended to each config (more tables, e.g. ``[api]``)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH"))
                                            if p)
    out: list[tuple[str, subprocess.Popen[bytes]]] = []
    for n in range(count):
        root = tmp / f"node{n}"
        (root / "work").mkdir(parents=True)
        port = free_port()
        extra = "".join(f'{k} = "{v}"\n' for k, v in daemon.items())
        (root / "signoff.toml").write_text(
            f'[daemon]\ndatabase = "{url}"\nwork_dir = "{root / "work"}"\n{extra}{toml}')
        with open(root / "daemon.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "signoff", "daemon", "start",
                                     "--config", str(root / "signoff.toml"), "--port",
                                     str(port)], stdout=subprocess.DEVNULL, stderr=log,
                                    cwd=ROOT, env=env)
        out.append((f"http://127.0.0.1:{port}", proc))
    for base, proc in out:
        end = time.monotonic() + START_TIMEOUT
        while not _healthy(base):
            if time.monotonic() > end or proc.poll() is not None:
                stop([p for _, p in out])
                raise SystemExit(f"signoff daemon at {base} did not start (see {tmp})")
            time.sleep(0.1)
    return out
