"""What the record teaches: stats and suggestions on a seeded history with fixed dates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from signoff.runtime import record
from signoff.runtime.models import AuditEvent

NOW = datetime(2026, 3, 31, 12, 0, tzinfo=UTC)


def decision(fp: str, answer: str = "approve", *, at: datetime = NOW - timedelta(days=1),
             actor: str = "slack:U1", channel: str = "slack:C1", tool: str = "send_email",
             risk: str = "SEND", ms: float = 1000.0) -> AuditEvent:
    """A decision event on the exact action ``fp``."""
    return AuditEvent(kind="decision", decision=answer, scope="once" if answer == "approve"
                      else "deny", actor=actor, channel=channel, tool=tool, risk=risk,
                      targets=[f"{fp}@example.com"], fingerprint=fp, latency_ms=ms, at=at)


def expired(fp: str, *, at: datetime = NOW - timedelta(days=1)) -> AuditEvent:
    """An expiry of a request for ``fp``."""
    return AuditEvent(kind="expired", decision="deny", actor="auto:timeout", tool="send_email",
                      risk="SEND", targets=[f"{fp}@example.com"], fingerprint=fp, at=at)


def test_time_to_decide_is_given_per_approver_surface_tool_and_risk() -> None:
    """p50/p90 of the time to decide, grouped four ways; expiries and the answers counted;
    events before --since are left out."""
    events = [decision("a", ms=ms, actor="slack:U1") for ms in (100, 200, 300, 400, 1000)]
    events += [decision("b", "deny", actor="web:bob", channel="web", tool="run_command",
                        risk="DESTRUCTIVE", ms=5000), expired("c"),
               decision("old", at=NOW - timedelta(days=40), ms=99_999)]
    result = record.stats(events, since=NOW - timedelta(days=30), until=NOW)
    assert (result.decisions, result.approved, result.denied, result.expired) == (6, 5, 1, 1)
    by = result.time_to_decide
    assert by["approver"]["slack:U1"] == record.Timing(5, 300, 1000)
    assert by["approver"]["web:bob"] == record.Timing(1, 5000, 5000)
    assert set(by["surface"]) == {"slack", "web"} and by["surface"]["slack"].count == 5
    assert set(by["tool"]) == {"send_email", "run_command"}
    assert by["risk"]["DESTRUCTIVE"].p90_ms == 5000
    counts = {a.fingerprint: (a.approved, a.denied, a.expired) for a in result.actions}
    assert counts == {"a": (5, 0, 0), "b": (0, 1, 0), "c": (0, 0, 1)}
    assert result.public()["time_to_decide"]["approver"]["slack:U1"]["p50_ms"] == 300


def test_suggestions_are_actions_approved_n_times_in_a_row_and_never_denied() -> None:
    """Approved 5 times in a row → suggested; once denied, ended by an expiry, or only 4
    times → not; --min 3 lowers the bar; each names a time-boxed grant and a policy line."""
    events = [decision("steady") for _ in range(6)]
    events += [decision("denied-once", "deny")] + [decision("denied-once") for _ in range(6)]
    events += [decision("expired-last") for _ in range(5)] + [expired("expired-last")]
    events += [decision("four") for _ in range(4)]
    found = record.suggest(events)
    assert [s.action.fingerprint for s in found] == ["steady"]
    assert found[0].action.streak == 6
    assert "--scope always --for 7d" in found[0].grant
    assert found[0].policy == ('permit(principal, action == Signoff::Action::"send_email", '
                               'resource) when { resource == Signoff::Target::'
                               '"steady@example.com" };')
    lower = record.suggest(events, streak=3, grant_for="2d")
    assert [s.action.fingerprint for s in lower] == ["steady", "four"]
    assert "--for 2d" in lower[1].public()["grant"]
    with pytest.raises(ValueError, match="--min 0"):
        record.suggest(events, streak=0)
    with pytest.raises(ValueError):
        record.suggest(events, grant_for="soon")


def test_since_is_a_duration_back_from_now_or_a_date() -> None:
    """--since 30d counts back from the given now; a date is taken as UTC; nonsense is a
    clear error."""
    assert record.parse_since("30d", NOW) == NOW - timedelta(days=30)
    assert record.parse_since("2026-03-01", NOW) == datetime(2026, 3, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="--since 'lately'"):
        record.parse_since("lately", NOW)


def test_a_cedar_string_is_escaped_in_a_policy_line() -> None:
    """A target holding a quote cannot end the policy's string early."""
    events = [decision("q", tool='x"y') for _ in range(5)]
    events = [e.model_copy(update={"targets": ['a"b\\c']}) for e in events]
    line = record.suggest(events)[0].policy
    assert 'Signoff::Action::"x\\"y"' in line and 'Signoff::Target::"a\\"b\\\\c"' in line
