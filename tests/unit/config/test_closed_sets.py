"""The config's closed sets agree with the runtime's, so nothing a listener hears is
unsubscribable and nothing in a file names an event that never happens."""

from __future__ import annotations

from signoff.config.fields import NotifyEvent
from signoff.runtime.events import TaskEvent


def test_team_channels_can_subscribe_to_every_task_event() -> None:
    """Every TaskEvent is a [[notify]] event; the only extra one is the daily audit head."""
    assert {e.value for e in NotifyEvent} - {e.value for e in TaskEvent} == {"audit_head"}
    assert {e.value for e in TaskEvent} <= {e.value for e in NotifyEvent}
