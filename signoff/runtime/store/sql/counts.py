"""Tasks per state, kept by the database itself: what `count_by_state` reads.

Why: ``/metrics``, the console's change signature and the telemetry gauge ask how many
tasks are in each state, often. A ``GROUP BY state`` over ``tasks`` costs as many rows as
the states asked hold — at 100,000 pending requests a scrape cost 2.3x what it cost at
100 (bench/pending.py). The counts are kept instead, so a read costs the same at any size.

Why triggers (not writes in Python): a task's state is written by many statements — the
SQL store's unit of work and claims, the SQLite store's named hot statements, the
PostgreSQL store's shared batch statements, `reset`'s delete — and by older signoff
versions still running on a shared database during an upgrade. A trigger sees every one
of them, in the transaction of the change itself, so the counts are right after a crash
or a rollback, and a statement added later cannot forget them.

- SQLite: ``task_counts`` holds one row per state, moved by row triggers. SQLite has one
  writer at a time anyway, so a single row per state serialises nothing new.
- PostgreSQL: one row per state would be a hot row — every transition of every node
  would queue on it. Statement triggers (with transition tables: a batch statement of
  the hot path writes one delta per state, not one per row) instead append
  ``(state, delta)`` rows to ``task_count_deltas``, a table without indexes that writers
  only ever insert into. `FOLD` moves the deltas into the ``task_counts`` totals; it runs
  under a try-lock (``pg_try_advisory_xact_lock``), so at most one transaction folds and
  nobody ever waits for it: a reader folds before it reads, and a writer's trigger folds
  about once every `FOLD_ONE_IN` statements, so the deltas stay few even when nobody
  reads. A read is the totals plus the deltas not folded yet, in one snapshot. (The
  folded deltas stay in the table's file as dead rows until autovacuum, about a minute:
  right after a burst of transitions a read scans those pages — 7 → 11 ms after the
  100,000 inserts of bench/pending.py. Counter rows per backend, updated in place, would
  avoid that at the price of upserts and a cleanup of dead backends' rows.)

`ensure` runs at open (``SqlTaskStore._open``): it creates the tables and, when the
triggers are missing (a new database, or one made by an older signoff), creates them
and fills the counts from a ``GROUP BY`` once, in the same transaction — which holds
SQLite's write lock or, on PostgreSQL, the lock ``CREATE TRIGGER`` takes on ``tasks``,
so no task changes between the count and the triggers.
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from signoff.runtime.models import TaskState
from signoff.runtime.store.sql.rows import tasks_t

# The triggers' version: a change to them needs new names, so that `ensure` sees the old
# ones as missing, replaces them and counts afresh.
VERSION = 1
TRIGGERS = tuple(f"signoff_task_counts_{op}_v{VERSION}" for op in ("ins", "upd", "del"))
FUNCTION = f"signoff_task_counts_v{VERSION}"
FOLD_FUNCTION = "signoff_fold_task_counts"
FOLD_LOCK = 0x5167_6E6F_6663  # the advisory lock of a fold (beside SCHEMA_LOCK's key)
FOLD_ONE_IN = 256  # a writer's statement folds with probability 1/FOLD_ONE_IN

_meta = sa.MetaData()
counts_t = sa.Table("task_counts", _meta,
                    sa.Column("state", sa.String(20), primary_key=True),
                    sa.Column("n", sa.BigInteger, nullable=False))
# PostgreSQL only; no key and no index: writers append to it and never read it.
deltas_t = sa.Table("task_count_deltas", _meta,
                    sa.Column("state", sa.String(20), nullable=False),
                    sa.Column("delta", sa.BigInteger, nullable=False))

_SQLITE_BUMP = ("INSERT INTO task_counts (state, n) VALUES (NEW.state, 1) "
                "ON CONFLICT (state) DO UPDATE SET n = n + 1;")
_SQLITE_DROP = "UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;"
SQLITE_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGERS[0]} AFTER INSERT ON tasks BEGIN {_SQLITE_BUMP} END",
    f"CREATE TRIGGER {TRIGGERS[1]} AFTER UPDATE OF state ON tasks "
    f"WHEN OLD.state IS NOT NEW.state BEGIN {_SQLITE_DROP} {_SQLITE_BUMP} END",
    f"CREATE TRIGGER {TRIGGERS[2]} AFTER DELETE ON tasks BEGIN {_SQLITE_DROP} END",
)

# A fold: the deltas committed so far into the totals, by at most one transaction at a
# time (the others skip it: a read of totals + deltas is right either way).
PG_FOLD = f"""
CREATE OR REPLACE FUNCTION {FOLD_FUNCTION}() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF pg_try_advisory_xact_lock({FOLD_LOCK}) THEN
    WITH moved AS (DELETE FROM task_count_deltas RETURNING state, delta)
    INSERT INTO task_counts (state, n)
      SELECT state, sum(delta) FROM moved GROUP BY state
    ON CONFLICT (state) DO UPDATE SET n = task_counts.n + EXCLUDED.n;
  END IF;
END $$"""
# One function for the three statement triggers (TG_OP tells which): one delta per state
# a statement changed. PL/pgSQL plans a statement when it first runs it, so a branch may
# name a transition table that only another trigger has.
PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO task_count_deltas (state, delta)
      SELECT state, count(*) FROM new_rows GROUP BY state;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO task_count_deltas (state, delta)
      SELECT state, -count(*) FROM old_rows GROUP BY state;
  ELSE
    INSERT INTO task_count_deltas (state, delta)
      SELECT moved.state, sum(moved.delta)
      FROM new_rows n JOIN old_rows o ON o.seq = n.seq AND o.state <> n.state,
           LATERAL (VALUES (n.state, 1), (o.state, -1)) AS moved (state, delta)
      GROUP BY moved.state HAVING sum(moved.delta) <> 0;
  END IF;
  IF random() * {FOLD_ONE_IN} < 1 THEN
    PERFORM {FOLD_FUNCTION}();
  END IF;
  RETURN NULL;
END $$"""
PG_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGERS[0]} AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
    # No column list (transition tables forbid one): every UPDATE of tasks runs it, and
    # one that changes no state (a lease renewal) appends nothing.
    f"CREATE TRIGGER {TRIGGERS[1]} AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_rows "
    f"NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
    f"CREATE TRIGGER {TRIGGERS[2]} AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
)


def ensure(conn: Connection, *, postgres: bool) -> None:
    """Create the counts' tables; install the triggers and count once when they are
    missing (call inside the open's write transaction)."""
    _meta.create_all(conn, tables=[counts_t, deltas_t] if postgres else [counts_t])
    if _installed(conn, postgres=postgres):
        return
    for name in TRIGGERS:  # a partial install (never expected): start over
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}" + (" ON tasks" if postgres
                                                                 else ""))
    for statement in (PG_FOLD, PG_FUNCTION, *PG_TRIGGERS) if postgres else SQLITE_TRIGGERS:
        conn.exec_driver_sql(statement)
    # From here no other transaction can change a task until this one commits.
    if postgres:
        conn.execute(deltas_t.delete())
    conn.execute(counts_t.delete())
    conn.execute(counts_t.insert().from_select(
        ["state", "n"], sa.select(tasks_t.c.state, sa.func.count()).group_by(tasks_t.c.state)))


def _installed(conn: Connection, *, postgres: bool) -> bool:
    if postgres:
        q = sa.text("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tasks'::regclass "
                    "AND tgname IN :names").bindparams(sa.bindparam("names", expanding=True))
    else:
        q = sa.text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
                    "AND tbl_name = 'tasks' AND name IN :names"
                    ).bindparams(sa.bindparam("names", expanding=True))
    return conn.execute(q, {"names": list(TRIGGERS)}).scalar_one() == len(TRIGGERS)


def read(conn: Connection, states: Collection[TaskState] | None, *, postgres: bool
         ) -> dict[str, int]:
    """Tasks per state (only ``states``, when given); states with none are left out, as
    a ``GROUP BY`` leaves them out. On PostgreSQL it folds first (a write)."""
    if postgres:
        conn.exec_driver_sql(f"SELECT {FOLD_FUNCTION}()")
        both = sa.union_all(sa.select(counts_t.c.state, counts_t.c.n),
                            sa.select(deltas_t.c.state, deltas_t.c.delta)).subquery()
        q = sa.select(both.c.state, sa.func.sum(both.c.n)).group_by(both.c.state)
        wanted = both.c.state
    else:
        q = sa.select(counts_t.c.state, counts_t.c.n)
        wanted = counts_t.c.state
    if states is not None:
        q = q.where(wanted.in_([s.value for s in states]))
    counts = {row[0]: int(row[1]) for row in conn.execute(q)}
    return {state: n for state, n in counts.items() if n}
