"""The HTTP baseline of bench/throughput.py: the same server stack as the daemon doing the
same commits, with nothing else.

Run by bench/throughput.py as ``python bench/http_baseline.py DB PORT``: a bare Starlette
app on uvicorn with the daemon's own server settings (`signoff.wiring.daemon.server_config`:
httptools, no lifespan, no access log, the same keep-alive), in one process and one event
loop like the daemon. ``POST /tasks`` parses the JSON body, checks it has a goal and steps,
inserts the queued row (its own ``BEGIN IMMEDIATE … COMMIT``) and answers 202; a worker
in the same loop claims the oldest queued row (``UPDATE … RETURNING``, parsing its JSON)
and saves it finished, two more commits: three per task, as the plain-sqlite3 baseline.
sqlite3 is called straight from the loop (WAL, ``synchronous=NORMAL``): the least a
server can do per task, so the ratio against it is a harsh one. ``GET /health`` answers
200 for the start-up check; ``GET /v1/approvals/{id}`` parks on an `asyncio.Event` for
60 s and answers pending — bench/waiters.py's measure of what the stack alone spends on a
parked long poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
import uuid
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


async def park(request: Request) -> Response:
    """GET /v1/approvals/{id}: a long poll that nothing decides."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            await asyncio.Event().wait()
    return JSONResponse({"status": "pending"})


async def health(request: Request) -> Response:
    """GET /health."""
    return JSONResponse({"status": "ok"})


async def serve(path: str, port: int) -> None:
    """The app and its worker in one loop until killed."""
    queue = Queue(path)
    app = Starlette(routes=[Route("/tasks", queue.submit, methods=["POST"]),
                            Route("/v1/approvals/{approval_id}", park),
                            Route("/health", health)])
    server = uvicorn.Server(server_config(app, "127.0.0.1", port))
    worker = asyncio.create_task(queue.work())
    try:
        await server.serve()
    finally:
        worker.cancel()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2])))
