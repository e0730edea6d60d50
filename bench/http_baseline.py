"""The HTTP baseline of bench/throughput.py: the same server stack as the daemon doing the
same commits, with nothing else.

Run by bench/throughput.py as ``python bench/http_baseline.py DB PORT``: a bare Starlette
app on uvicorn with the daemon's own server settings (`signoff.wiring.daemon.server_config`:
httptools, no lifespan, no access log, the same keep-alive; the same event loop), in one process and one event
loop like the daemon. ``POST /tasks`` parses the JSON body, checks it has a goal and steps,
inserts the queued row (its own ``BEGIN IMMEDIATE … COMMIT``) and answers 202; a worker
in the same loop claims the oldest queued row (``UPDATE … RETURNING``, parsing its JSON)
and saves it finished, two more commits: three per task, as the plain-sqlite3 baseline.
sqlite3 is called straight from the loop (WAL, ``synchronous=NORMAL``): the least a
server can do per task, so the ratio against it is a harsh one. ``GET /health`` answers
200 for the start-up check; ``GET /v1/approvals/{id}`` parks for up to 60 s on a future
that ``POST /approvals/{id}/approve`` resolves right after a bare commit (`Decisions`):
bench/waiters.py's measure of what the stack alone spends on a parked long poll, and of
the least a decision can take to reach its waiter through HTTP.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.wiring import event_loop
from signoff.wiring.daemon import server_config

SCHEMA = ("CREATE TABLE IF NOT EXISTS tasks (seq INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,"
          " state TEXT NOT NULL, claimed_by TEXT, lease_until TEXT, version INT NOT NULL, "
          "data TEXT NOT NULL)")
INSERT = "INSERT INTO tasks (id, state, version, data) VALUES (?, 'queued', 0, ?)"
CLAIM = ("UPDATE tasks SET state='in_progress', claimed_by='bench', "
         "lease_until='2026-01-01T00:00:00', version=version+1 WHERE seq = "
         "(SELECT seq FROM tasks WHERE state='queued' ORDER BY seq LIMIT 1) "
         "AND state='queued' RETURNING id, version, data")
SAVE = ("UPDATE tasks SET state='completed', claimed_by=NULL, version=version+1, data=? "
        "WHERE id=? AND version=?")


class Queue:
    """The baseline's three commits per task, on one connection."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(SCHEMA)
        self.db.execute("CREATE INDEX IF NOT EXISTS ix_state_seq ON tasks (state, seq)")
        self.wake = asyncio.Event()

    def _commit(self, sql: str, args: tuple[object, ...]) -> tuple[str, int, str] | None:
        self.db.execute("BEGIN IMMEDIATE")
        row = self.db.execute(sql, args).fetchone()
        self.db.execute("COMMIT")
        return row

    async def submit(self, request: Request) -> Response:
        """POST /tasks: validate, insert queued, 202."""
        spec = json.loads(await request.body())
        if not isinstance(spec, dict) or not isinstance(spec.get("goal"), str) \
                or not isinstance(spec.get("steps"), list):
            return JSONResponse({"detail": "goal and steps are required"}, status_code=422)
        task_id = uuid.uuid4().hex
        self._commit(INSERT, (task_id, json.dumps({"id": task_id, "state": "queued", **spec})))
        self.wake.set()
        return JSONResponse({"id": task_id, "state": "queued"}, status_code=202)

    async def work(self) -> None:
        """Claim and finish tasks until cancelled; sleep on the wake-up when idle."""
        while True:
            row = self._commit(CLAIM, ())
            if row is None:
                self.wake.clear()
                await self.wake.wait()
                continue
            task = json.loads(row[2])
            task["state"] = "completed"
            self._commit(SAVE, (json.dumps(task), row[0], row[1]))
            await asyncio.sleep(0)  # let the requests in between two tasks


class Decisions:
    """bench/waiters.py's fair baseline: long polls parked on one future each in a dict
    keyed by id, answered by ``POST /approvals/{id}/approve`` right after its bare commit
    (``BEGIN IMMEDIATE``/``UPDATE``/``COMMIT`` of a row of the same size on this WAL file)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.execute("CREATE TABLE IF NOT EXISTS approvals (id TEXT PRIMARY KEY, "
                        "status TEXT, data TEXT)")
        self.waiting: dict[str, set[asyncio.Future[float]]] = {}

    async def park(self, request: Request) -> Response:
        """GET /v1/approvals/{id}: pending until approved, or after 60 s."""
        approval_id = request.path_params["approval_id"]
        wake: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(approval_id, set()).add(wake)
        try:
            async with asyncio.timeout(60):
                decided_at = await wake
        except TimeoutError:
            return JSONResponse({"status": "pending"})
        finally:
            self.waiting.get(approval_id, set()).discard(wake)
        return JSONResponse({"status": "approved",
                             "decided_at": datetime.fromtimestamp(decided_at, UTC).isoformat()})

    async def approve(self, request: Request) -> Response:
        """POST /approvals/{id}/approve: the bare commit, then wake its waiters."""
        approval_id = request.path_params["approval_id"]
        await request.body()
        decided_at = time.time()  # stamped before the commit, as the daemon does
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("INSERT INTO approvals VALUES (?, 'approved', ?) ON CONFLICT (id) DO "
                        "UPDATE SET status = 'approved', data = excluded.data",
                        (approval_id, "x" * 1200))
        self.db.execute("COMMIT")
        for wake in self.waiting.pop(approval_id, ()):
            if not wake.done():
                wake.set_result(decided_at)
        return JSONResponse({"status": "approved"})


async def health(request: Request) -> Response:
    """GET /health."""
    return JSONResponse({"status": "ok"})


async def serve(path: str, port: int) -> None:
    """The app and its worker in one loop until killed."""
    queue = Queue(path)
    decisions = Decisions(queue.db)
    app = Starlette(routes=[Route("/tasks", queue.submit, methods=["POST"]),
                            Route("/v1/approvals/{approval_id}", decisions.park),
                            Route("/approvals/{approval_id}/approve", decisions.approve,
                                  methods=["POST"]),
                            Route("/health", health)])
    server = uvicorn.Server(server_config(app, "127.0.0.1", port))
    worker = asyncio.create_task(queue.work())
    try:
        await server.serve()
    finally:
        worker.cancel()


if __name__ == "__main__":
    # The daemon's own loop too ("auto": uvloop where installed), as its server settings.
    event_loop.run(serve(sys.argv[1], int(sys.argv[2])), "auto")
