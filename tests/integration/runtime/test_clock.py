"""One time source: a node on a clock far from today still delivers, expires and audits
on its own time (the store never stamps anything with the wall clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, TaskState
from signoff.testing import RecordingSurface
from signoff.wiring import build_node


@pytest.mark.parametrize("start", [datetime(2001, 1, 1, tzinfo=UTC),
                                   datetime(2093, 6, 30, 23, 0, tzinfo=UTC)],
                         ids=["long-ago", "far-ahead"])
@pytest.mark.parametrize("backend", ["sqlite", "memory"])
async def test_a_node_far_from_today_posts_cards_and_stamps_its_own_time(
        tmp_path: Path, start: datetime, backend: str) -> None:
    """Cards go out, audit events carry the node's time, and expiry follows its clock."""
    from signoff.runtime.store.memory import MemTaskStore

    work = tmp_path / "work"
    work.mkdir()
    (work / "old.txt").write_text("old")
    clock = FakeClock(start)
    platform = RecordingSurface(name="recording")
    settings = Settings.model_validate({"daemon": {"work_dir": str(work)},
                                        "approvals": {"timeout": "10m"}})
    node = build_node(settings, surfaces={"recording": platform}, clock=clock,
                      store=MemTaskStore() if backend == "memory" else None,
                      database=f"sqlite:///{tmp_path / 'signoff.db'}")
    await node.store.open()
    try:
        task = await node.engine.submit(
            "clean up", steps=[Action(tool="delete_file", args={"path": "old.txt"})],
            claim=True)
        assert task is not None
        task = await node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL
        await node.flow.dispatcher.run_once()
        assert len(platform.messages) == 1, "the card was not posted on the node's clock"
        clock.advance(timedelta(minutes=11))
        (expired,) = await node.decider.expire_due()
        assert expired.result is not None and expired.result["reason"] == "approval timed out"
        page = await node.store.audit_events(task_id=task.id)
        stamps = [e.at for e in page.items]  # type: ignore[attr-defined]
        assert stamps and all(start <= at <= clock.now() for at in stamps)
    finally:
        await node.store.close()
