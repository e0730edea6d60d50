"""The console's stats page: what `signoff stats` and `signoff suggest` print, as HTML.

Every value goes through `pages.e`; the page changes nothing (suggestions are text for
a person, as on the command line).
"""

from __future__ import annotations

from signoff.adapters.web.pages import e
from signoff.runtime.record import Stats, Suggestion, Timing


def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"


def _timings(dim: str, groups: dict[str, Timing]) -> str:
    rows = "".join(f"<tr><td>{e(key)}</td><td>{e(_seconds(t.p50_ms))}</td>"
                   f"<td>{e(_seconds(t.p90_ms))}</td><td>{t.count}</td></tr>"
                   for key, t in groups.items())
    return (f'<table class="stats" data-by="{e(dim)}"><caption>Time to decide by {e(dim)}'
            f"</caption><tr><th>{e(dim)}</th><th>p50</th><th>p90</th><th>n</th></tr>"
            f"{rows}</table>")


def _actions(stats: Stats) -> str:
    if not stats.actions:
        return ""
    rows = "".join(
        f'<tr><td><code>{e(a.fingerprint[:12])}</code></td><td>{e(a.tool)}</td>'
        f"<td>{e(', '.join(a.targets))}</td><td>{a.approved}</td><td>{a.denied}</td>"
        f"<td>{a.expired}</td></tr>" for a in stats.actions[:50])
    return ('<table class="stats actions"><caption>Exact actions</caption><tr>'
            "<th>fingerprint</th><th>tool</th><th>targets</th><th>approved</th>"
            f"<th>denied</th><th>expired</th></tr>{rows}</table>")


def _suggestions(found: list[Suggestion]) -> str:
    if not found:
        return '<p class="empty">No suggestions yet.</p>'
    items = "".join(
        f"<li><code>{e(s.action.fingerprint[:12])}</code> {e(s.action.tool)} → "
        f"{e(', '.join(s.action.targets))}: approved {s.action.streak} times in a row, "
        f"never denied.<br>Grant: <code>{e(s.grant)}</code><br>Policy: "
        f"<code>{e(s.policy)}</code></li>" for s in found)
    return (f'<ul class="suggestions">{items}</ul><p class="note">Nothing here is applied: '
            "a person gives the grant when approving, or edits the policy.</p>")


def stats_body(stats: Stats, found: list[Suggestion], since: str) -> str:
    """The page's body: the window form, totals, time to decide, actions, suggestions."""
    form = (f'<form method="get" action="/console/stats"><label>Since <input name="since" '
            f'value="{e(since)}" maxlength="40"></label> <button type="submit">Show</button>'
            "</form>")
    totals = (f'<p class="totals">{stats.decisions} decisions ({stats.approved} approved, '
              f"{stats.denied} denied), {stats.expired} expired, "
              f"{e(stats.since.strftime('%Y-%m-%d %H:%M'))} – "
              f"{e(stats.until.strftime('%Y-%m-%d %H:%M'))} UTC</p>")
    tables = "".join(_timings(dim, groups) for dim, groups in stats.time_to_decide.items()
                     if groups)
    return (f"<h1>Stats</h1>{form}{totals}{tables}{_actions(stats)}"
            f"<h2>Suggestions</h2>{_suggestions(found)}")
