"""One node among several: leadership, the shared replay ledger, the heartbeat, the
PostgreSQL wake-ups, and the reminders every node runs."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.config.settings import Settings
from signoff.runtime.clock import Clock
from signoff.runtime.leadership import Leadership
from signoff.runtime.outages import Outages
from signoff.runtime.replay import ReplayLedger
from signoff.wiring.node import Node
from signoff.wiring.state import node_id, prepare_state

if TYPE_CHECKING:
    from signoff.bot.routing.reminders import Reminder


def build_reminder(node: Node) -> Reminder | None:
    """The reminder service when ``approvals.remind_before`` is set."""
    from signoff.bot.routing.reminders import Reminder

    before = node.settings.approvals.remind_before
    if before is None:
        return None
    router = node.oncall
    reminder = Reminder(store=node.store, clock=node.clock, before=before,
                        approvers=node.settings.approvals.approvers,
                        oncall=router.current if router is not None else None,
                        wake=node.flow.dispatcher.wake,
                        outages=node.engine.outages)  # its outages show in /health
    return reminder


def cluster_services(node: Node) -> list[tuple[str, Any]]:
    """The node registry heartbeat and, on PostgreSQL, the LISTEN/NOTIFY wake-ups."""
    from signoff.runtime.nodes import Heartbeat
    from signoff.runtime.store.postgres.notify import TaskWakeups
    from signoff.runtime.store.sql.store import SqlTaskStore

    heartbeat = Heartbeat(store=node.store, clock=node.clock,
                          node_id=node.engine.config.node_id, host=socket.gethostname(),
                          interval=node.settings.daemon.heartbeat,
                          running=lambda: node.worker.busy, outages=node.engine.outages)
    services: list[tuple[str, Any]] = [("heartbeat", heartbeat.run)]
    if isinstance(node.store, SqlTaskStore) and not node.store.is_sqlite:
        # The node's own inserts already woke its worker (API, scheduler): skip the echo.
        wakeups = TaskWakeups(url=node.store.url, wake=node.worker.wake,
                              ignore=node.store.wakeup_sender, outages=node.engine.outages)
        services.append(("notify-listen", wakeups.run))
    return services


@dataclass(frozen=True)
class ClusterPorts:
    """What the surfaces need to behave as one node among several (`SurfaceDeps`)."""

    leadership: Leadership
    replay: ReplayLedger | None  # None: each surface keeps its own per-process record
    services: tuple[tuple[str, Any], ...] = ()


def cluster_ports(settings: Settings, *, work_dir: Path | None, database: str | None,
                  clock: Clock, state: Path | None = None,
                  outages: Outages | None = None) -> ClusterPorts:
    """On PostgreSQL, advisory-lock leadership and the shared replay table; on any other
    database (one node) always the leader, and replays remembered per process
    (``state``: the state dir when the caller prepared it already; ``outages``: where lost
    leases are reported, named in ``/health`` while they last)."""
    from signoff.runtime.leadership import SoleLeadership

    url = database or settings.database_url(work_dir)
    settings.resolved_work_dir(work_dir).mkdir(parents=True, exist_ok=True)
    nid = node_id(settings, state or prepare_state(settings, work_dir))
    if sa_backend(url) != "postgresql":
        return ClusterPorts(leadership=SoleLeadership(node_id=nid), replay=None)
    from signoff.runtime.store.postgres.leader import PgLeadership
    from signoff.runtime.store.postgres.replay import SqlReplayLedger

    ledger = SqlReplayLedger(url=url, clock=clock)
    return ClusterPorts(leadership=PgLeadership(url=url, node_id=nid, outages=outages),
                        replay=ledger,
                        services=(("replay-ledger", ledger.run),))


def sa_backend(url: str) -> str:
    """The database kind of a SQLAlchemy URL (``postgresql``, ``sqlite``)."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        return ""
