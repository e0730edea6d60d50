"""`signoff handle` with approvals.hold: the approved action waits out its window in the
same process and then runs (audited as released)."""

from __future__ import annotations

import io

from signoff.adapters.terminal.surface import TerminalSurface
from signoff.cli.handle import run_once
from signoff.runtime.models import RunMode, TaskState
from tests.conftest import NodeFactory
from tests.factories import webhook
from tests.fakes.http_echo import HttpEcho


async def test_a_held_terminal_approval_runs_after_its_window(node_factory: NodeFactory) -> None:
    """Once at the prompt with a 1s hold on SEND: the card says it runs unless undone, the
    webhook is posted once after the window, and the audit log has the release."""
    async with HttpEcho() as echo:
        terminal = TerminalSurface(stdin=io.StringIO("o\n"), stdout=io.StringIO(), user="me")
        node = await node_factory({"approvals": {"hold": {"SEND": "1s"}}},
                                  surfaces={"terminal": terminal})
        task = await run_once(node, "ping", steps=[webhook(echo.url("/hook"))],
                              mode=RunMode.TERMINAL, terminal=terminal)
        assert task.state is TaskState.COMPLETED
        assert sum(1 for r in echo.requests if r.path == "/hook") == 1
        events = await node.store.audit_chain(after=0, limit=100)
        assert [e.kind for e in events].count("released") == 1
        assert "unless undone" in terminal.stdout.getvalue()
