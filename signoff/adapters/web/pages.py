"""The console's HTML, rendered by pure functions from cards, tasks and audit events.

No template engine: `string.Template` for the page frame (templates/base.html) and
f-strings for the parts, with every value passed through `e()` (html.escape) — nothing
from a task, a card or a request reaches the page unescaped. Decision buttons are real
`<button>` elements in a plain POST form, so a card works without JavaScript; the small
script in static/ only refreshes the live region and the countdowns.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from signoff.bot.cards import UNDO_LABEL, why_line
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import AuditEvent, Scope, Task
from signoff.runtime.refusals import outcome_words, refused_count
from signoff.runtime.text import shown
from signoff.runtime.transcript import TranscriptEntry, call_summary, shorten_text

TOOL_OUTPUT_SHOWN = 300  # characters of a tool's output on the task page

BUTTONS = {Scope.ONCE: "Once", Scope.SESSION: "Session", Scope.ALWAYS: "Always",
           Scope.DENY: "Deny"}


def e(value: object) -> str:
    """Escape anything for HTML text and attribute values, shown as every surface shows
    text (`shown`: URLs masked, invisible characters as escapes). The one door of every
    value to a page: a task's result, its targets, an error, the agent's words."""
    return html.escape(shown("" if value is None else str(value)), quote=True)


@cache
def _template(name: str) -> Template:
    text = resources.files("signoff.adapters.web").joinpath("templates", name).read_text("utf-8")
    return Template(text)


@dataclass(frozen=True)
class CardView:
    """A card plus what the console shows around it."""

    card: ApprovalCard
    asked_by: str | None = None
    task_state: str | None = None
    # The asked action's args as JSON, for the edit form (a task's pending request only:
    # an outside agent runs its own call, so its requests are not editable).
    args_json: str | None = None
    # All the request's arguments as JSON when the card shows some of them cut (a long
    # body, a bounded preview): what the chat cards send people here to see.
    whole: str | None = None
    reported: str | None = None  # an approved outside request: what its caller reported


def time_left(expires_at: datetime, now: datetime) -> str:
    """"expires in 29 min", "expires in 1 h 5 min", "expired"."""
    seconds = int((expires_at - now).total_seconds())
    if seconds <= 0:
        return "expired"
    if seconds < 60:
        return f"expires in {seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"expires in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"expires in {hours} h {minutes} min" if minutes else f"expires in {hours} h"


def _stamp(at: datetime | None) -> str:
    if at is None:
        return ""
    return f'<time datetime="{e(at.isoformat())}">{e(at.strftime("%Y-%m-%d %H:%M UTC"))}</time>'


def _dl(rows: Iterable[tuple[str, str]], cls: str = "meta") -> str:
    """A definition list; values are already-escaped HTML."""
    items = "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="{cls}">{items}</dl>'


def task_link(task_id: str) -> str:
    """A link to the console's task page."""
    return f'<a href="/console/tasks/{e(task_id)}">{e(task_id)}</a>'


# What the console offers for "for" (a time box on a Session or Always grant); the
# empty choice keeps the default (a session's own end; approvals.grant_ttl for Always).
LASTS = (("", "until the default end"), ("30m", "for 30 minutes"), ("1h", "for 1 hour"),
         ("8h", "for 8 hours"), ("1d", "for 1 day"), ("7d", "for 7 days"))


def _hidden(card: ApprovalCard, csrf: str, next_path: str) -> str:
    return (f'<input type="hidden" name="approval_id" value="{e(card.approval_id)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(next_path)}">')


def _lasts(card: ApprovalCard) -> str:
    """The optional time box, shown when Session or Always is offered."""
    if not {Scope.SESSION, Scope.ALWAYS} & set(card.allowed):
        return ""
    options = "".join(f'<option value="{e(v)}">{e(label)}</option>' for v, label in LASTS)
    return (f'<label class="lasts">Session / Always lasts '
            f'<select name="for" aria-label="How long a Session or Always grant lasts">'
            f'{options}</select></label>')


def _edit_form(view: CardView, csrf: str, next_path: str) -> str:
    """Edit before approve: the args as JSON; the edited action is what runs."""
    card = view.card
    approving = [s for s in card.allowed if s.approves]
    if view.args_json is None or not approving:
        return ""
    buttons = "".join(
        f'<button type="submit" name="scope" value="{e(s.value)}" '
        f'class="btn btn-{e(s.value)}">{e(BUTTONS[s])} (edited)</button>' for s in approving)
    field = f"args-{card.approval_id}"
    return (f'<details class="edit"><summary>Edit before approving</summary>'
            f'<form class="edit-form" method="post" action="/console/decide">'
            f'{_hidden(card, csrf, next_path)}'
            f'<label for="{e(field)}">Arguments (JSON); the risk is checked again and is '
            f'never lower than asked</label>'
            f'<textarea id="{e(field)}" name="args" rows="8" spellcheck="false">'
            f'{e(view.args_json)}</textarea>'
            f'<div class="buttons">{buttons}</div></form></details>')


def _step_up_note(card: ApprovalCard) -> str:
    if not card.step_up:
        return ""
    return ('<p class="step-up">Step-up: this request is decided here in the console; '
            'chat buttons only link to this page.</p>')


def _form(view: CardView, csrf: str, next_path: str) -> str:
    card = view.card
    buttons = "".join(
        f'<button type="submit" name="scope" value="{e(s.value)}" '
        f'class="btn btn-{e(s.value)}">{e(BUTTONS[s])}</button>'
        for s in card.allowed)
    reason = ""
    if Scope.DENY in card.allowed:
        reason = ('<input class="reason" type="text" name="reason" maxlength="500" '
                  'placeholder="Reason (optional, for Deny)" aria-label="Reason for a denial">')
    return (f'{_step_up_note(card)}<form class="decide" method="post" action="/console/decide">'
            f'{_hidden(card, csrf, next_path)}'
            f'{reason}{_lasts(card)}<div class="buttons">{buttons}</div></form>'
            f'{_edit_form(view, csrf, next_path)}')


def hold_left(until: datetime, now: datetime) -> str:
    """"runs in 25 s" (console.js keeps it counting down)."""
    seconds = math.ceil((until - now).total_seconds())  # as console.js counts
    if seconds <= 0:
        return "running now"
    if seconds < 60:
        return f"runs in {seconds} s"
    return f"runs in {seconds // 60} min {seconds % 60} s"


def _undo_form(card: ApprovalCard, csrf: str, next_path: str, now: datetime) -> str:
    """The one button of a held card, with the countdown to its release (rendered here
    too, so the page works without script)."""
    until = card.hold_until
    left = (f'<span class="hold" data-hold="{e(until.isoformat())}">'
            f'{e(hold_left(until, now))}</span>' if until is not None else "")
    return (f'<form class="decide undo" method="post" action="/console/decide">'
            f'<input type="hidden" name="approval_id" value="{e(card.approval_id)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(next_path)}">{left}'
            f'<div class="buttons"><button type="submit" name="scope" value="undo" '
            f'class="btn btn-undo">{e(UNDO_LABEL)}</button></div></form>')


def _whose(card: ApprovalCard) -> str:
    """Where a session or always grant of this card lives, in words."""
    if card.task_id is None:
        return f"policy {card.policy_id or '—'}"
    return f"schedule {card.schedule}" if card.schedule else "this task"


def scope_help(card: ApprovalCard) -> str:
    """What each offered answer means, in one short line each (only those offered)."""
    session = ("for the rest of this task" if card.task_id is not None
               else f"for the rest of this session (policy {card.policy_id or '—'})")
    words = {
        Scope.ONCE: "this exact action, now, this one time.",
        Scope.SESSION: f"this exact action now and again without asking, {session}.",
        Scope.ALWAYS: f"this exact action from now on, for {_whose(card)}, until revoked.",
        Scope.DENY: "refuse it; the task is told why.",
    }
    rows = "".join(f'<li><b>{e(BUTTONS[s])}</b>: {e(words[s])}</li>'
                   for s in card.allowed if s in words)
    return f'<ul class="scope-help" aria-label="What the answers mean">{rows}</ul>' \
        if rows else ""


def preview_html(card: ApprovalCard) -> str:
    """What the action will do (a diff, the whole command), escaped, in a <pre>."""
    if card.preview is None:
        return ""
    kind = card.preview.kind
    if kind == "diff":
        rows = "".join(_diff_row(line) for line in card.preview.text.splitlines())
    else:
        rows = e(card.preview.text)
    return (f'<section class="preview preview-{e(kind)}" aria-label="{e(card.preview.label)}">'
            f'<h3>{e(card.preview.label)}</h3><pre>{rows}</pre></section>')


def _diff_row(line: str) -> str:
    """One diff line, marked for colour; the text itself is what it says, escaped."""
    cls = ("add" if line.startswith("+") and not line.startswith("+++") else
           "del" if line.startswith("-") and not line.startswith("---") else
           "hunk" if line.startswith("@@") else "ctx")
    return f'<span class="d-{cls}">{e(line)}</span>\n'


def confirm_always_page(card: ApprovalCard, *, csrf: str, next_path: str,
                        carry: dict[str, str] | None = None) -> str:
    """The second step of an Always answer: what it means, then a form that really
    decides — a page, not a script dialog, so it works without JavaScript. ``carry``:
    the first press's "for" and edited args, sent on unchanged."""
    kept = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">'
                   for k, v in (carry or {}).items())
    edited = ('<p class="edited">You edited the arguments: the edited action is what '
              'Always approves.</p>' if "args" in (carry or {}) else "")
    body = (f'<section class="confirm-always"><h1>Approve always?</h1>'
            f'<p class="title">{e(card.title)}</p>{preview_html(card)}'
            f'<p>This approves <b>this exact action</b> now and <b>from now on</b> for '
            f'{e(_whose(card))}, without asking again, until the grant is revoked or lapses '
            f'(see <code>signoff grants</code>). Another file, URL, recipient or command '
            f'still asks.</p>'
            f'<form class="decide" method="post" action="/console/decide">'
            f'<input type="hidden" name="approval_id" value="{e(card.approval_id)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<input type="hidden" name="next" value="{e(next_path)}">'
            f'<input type="hidden" name="confirm" value="always">{kept}{edited}'
            f'<div class="buttons"><button type="submit" name="scope" value="always" '
            f'class="btn btn-always">Yes, approve always</button>'
            f'<a class="btn btn-cancel" href="{e(next_path)}">Cancel</a></div></form>'
            f'</section>')
    return body


BATCH_FORM = "batch"  # the id of the multi-select form the cards' checkboxes belong to


def _select(card: ApprovalCard) -> str:
    """The card's checkbox for the multi-select form (HTML's ``form`` attribute ties it to
    that form although it sits in the card: forms cannot nest, and no script is needed)."""
    return (f'<label class="select"><input type="checkbox" name="ids" '
            f'value="{e(card.approval_id)}" form="{BATCH_FORM}" '
            f'aria-label="Select: {e(card.title)}"> Select</label>')


def batch_form(csrf: str) -> str:
    """Approve once or deny every selected card (never session or always: see
    `signoff.api.batch`)."""
    return (f'<form id="{BATCH_FORM}" class="batch" method="post" action="/console/batch">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            f'<span class="batch-label">Selected:</span>'
            f'<button type="submit" name="decision" value="once" class="btn btn-once">'
            f'Approve selected once</button>'
            f'<button type="submit" name="decision" value="deny" class="btn btn-deny">'
            f'Deny selected</button></form>')


def card_html(view: CardView, *, csrf: str, now: datetime, next_path: str = "/",
              selectable: bool = False) -> str:
    """One approval card: the action in plain words, targets, context, buttons or outcome;
    ``selectable`` adds the checkbox of the multi-select form."""
    card = view.card
    risk = card.risk.lower()
    targets = "".join(f"<li>{e(t)}</li>" for t in card.targets) or "<li>(no target)</li>"
    expires = ""
    if card.open:
        expires = (f'<span class="expires" data-expires="{e(card.expires_at.isoformat())}">'
                   f'{e(time_left(card.expires_at, now))}</span>')
    if card.task_id is None:  # a request from an agent that is not ours
        meta = [("Goal", e(card.goal or "—")),
                ("Asked by", e(card.requester or view.asked_by or "—")),
                ("Policy", e(card.policy_id or "—")), ("Requested", _stamp(card.requested_at))]
    else:
        meta = [("Goal", e(card.goal)), ("Asked by", e(view.asked_by or "—")),
                ("Task", f"{task_link(card.task_id)} · step {card.step} of {card.steps_total}"),
                ("Schedule", e(card.schedule or "—")), ("Requested", _stamp(card.requested_at))]
    details = _dl([(k, e(v)) for k, v in card.details], "details") if card.details else ""
    why = why_line(card)
    details += f'<p class="why">{e(why)}</p>' if why else ""
    note = f'<p class="note">{e(card.note)}</p>' if card.note else ""
    details += preview_html(card) + _whole(view)
    if card.open and card.progress:
        note += f'<p class="progress">{e(card.progress)}</p>'
    if card.open:
        tail = scope_help(card) + _form(view, csrf, next_path)
    elif card.held:
        undo = _undo_form(card, csrf, next_path, now)
        tail = f'<p class="outcome">{e(card.outcome or card.status)}</p>{undo}'
    else:
        state = ""
        if view.task_state:
            state = (f'<p class="task-state state-{e(view.task_state)}">'
                     f'Task {e(view.task_state.replace("_", " "))}</p>')
        if view.reported:
            state += f'<p class="reported">{e(view.reported)}</p>'
        tail = f'<p class="outcome">{e(card.outcome or card.status)}</p>{state}'
    return (f'<article class="card risk-{e(risk)} status-{e(card.status)}" '
            f'id="card-{e(card.approval_id)}" data-approval="{e(card.approval_id)}">'
            f'<header class="card-head"><span class="risk">{e(card.risk)}</span>'
            f'<span class="tool">{e(card.tool)}</span>{expires}'
            f'{_select(card) if selectable and card.open else ""}</header>'
            f'<h2 class="title">{e(card.title)}</h2>'
            f'<ul class="targets" aria-label="Targets">{targets}</ul>'
            f'{_dl(meta)}{details}{note}{tail}</article>')


def _whole(view: CardView) -> str:
    """All the arguments of a request whose card shows part of them (see CardView)."""
    if view.whole is None:
        return ""
    return (f'<details class="whole" open><summary>Everything this approves (the card '
            f'shows part of it)</summary><pre>{e(view.whole)}</pre></details>')


def _state_badge(task: Task) -> str:
    """A task's state; a run that completed with refused actions says how many."""
    words = outcome_words(task.state.value, task.result)
    refused = " state-refused" if refused_count(task.result) else ""
    return (f'<span class="state state-{e(task.state.value)}{refused}">'
            f'{e(words.replace("_", " "))}</span>')


def _task_item(task: Task) -> str:
    return (f'<li class="task"><a href="/console/tasks/{e(task.id)}">'
            f'<span class="goal">{e(task.goal)}</span></a>'
            f'{_state_badge(task)}<span class="id">{e(task.id)}</span> '
            f'{_stamp(task.updated_at)}</li>')


def approvals_fragment(*, pending: Sequence[CardView], decided: Sequence[CardView],
                       tasks: Sequence[Task], notes: Sequence[str], csrf: str, now: datetime,
                       more_pending: bool = False) -> str:
    """The live region of the console: pending cards first, then decided ones, tasks, notes."""
    # Deciding several at once needs several: with one card its own buttons are enough.
    several = len(pending) > 1
    cards = "".join(card_html(v, csrf=csrf, now=now, selectable=several) for v in pending)
    if not cards:
        cards = '<p class="empty">Nothing is waiting for a decision.</p>'
    elif several:
        cards = batch_form(csrf) + cards
    more = ('<p class="more">More requests are waiting; the oldest are shown first.</p>'
            if more_pending else "")
    parts = [f'<section class="pending" aria-labelledby="h-pending">'
             f'<h1 id="h-pending">Waiting for a decision '
             f'<span class="count{"" if pending else " zero"}">'
             f'{len(pending)}{"+" if more_pending else ""}</span></h1>'
             f'{cards}{more}</section>']
    if decided:
        done = "".join(card_html(v, csrf=csrf, now=now) for v in decided)
        parts.append(f'<section class="decided"><h2>Recently decided</h2>{done}</section>')
    items = "".join(_task_item(t) for t in tasks) or '<li class="empty">No tasks yet.</li>'
    parts.append(f'<section class="tasks"><h2>Recent tasks</h2>'
                 f'<ul class="tasklist">{items}</ul></section>')
    if notes:
        lines = "".join(f"<li>{e(n)}</li>" for n in notes)
        parts.append(f'<section class="notes"><h2>Notes</h2><ul>{lines}</ul></section>')
    return "".join(parts)


def _history(task: Task) -> str:
    if not task.actions:
        return '<p class="empty">No action has run yet.</p>'
    rows = []
    for r in task.actions:
        who = f" by {e(r.decided_by)}" if r.decided_by else ""
        error = f'<p class="error">{e(r.error)}</p>' if r.error else ""
        risk = e(r.risk.value) if r.risk else ""
        rows.append(f'<li class="outcome-{e(r.outcome)}"><b>{e(r.tool)}</b> '
                    f'<span class="risk">{risk}</span> {e(", ".join(r.targets))}'
                    f'<br><span class="decision">{e(r.decision)}{who}</span> → '
                    f'<span class="result">{e(r.outcome)}</span> {_stamp(r.at)}{error}</li>')
    return f'<ol class="history">{"".join(rows)}</ol>'


def _audit(events: Sequence[AuditEvent]) -> str:
    if not events:
        return '<p class="empty">No audit events.</p>'
    rows = []
    for ev in events:
        bits = [ev.kind, ev.decision, ev.scope and f"scope {ev.scope}", ev.actor, ev.tool]
        text = " · ".join(e(b) for b in bits if b)
        reason = f'<br><span class="reason">{e(ev.reason)}</span>' if ev.reason else ""
        rows.append(f'<li><span class="id">#{ev.id}</span> {_stamp(ev.at)}<br>{text}{reason}</li>')
    return f'<ol class="audit">{"".join(rows)}</ol>'


def _conversation(entries: Sequence[TranscriptEntry], more: bool) -> str:
    """An agent's messages, oldest first; tool outputs shortened."""
    rows = []
    for m in entries:
        text = m.content or ""
        if m.role == "tool":
            text = shorten_text(text, TOOL_OUTPUT_SHOWN)
        calls = "".join(f'<li class="call"><code>{e(call_summary(c))}</code></li>'
                        for c in m.calls())
        body = f'<p class="content">{e(text)}</p>' if text else ""
        rows.append(f'<li class="msg role-{e(m.role)}"><span class="role">{e(m.role)}</span> '
                    f'{_stamp(m.at)}{body}{f"<ul>{calls}</ul>" if calls else ""}</li>')
    tail = '<p class="more">Later messages: see the transcript API.</p>' if more else ""
    return f'<ol class="conversation">{"".join(rows)}</ol>{tail}'


def _pretty(value: Any) -> str:
    return e(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def task_fragment(task: Task, events: Sequence[AuditEvent], *, card: CardView | None,
                  csrf: str, now: datetime, transcript: Sequence[TranscriptEntry] = (),
                  more_transcript: bool = False) -> str:
    """The live region of a task page: state, pending card, result, history, the agent's
    conversation, audit."""
    rows = [("State", _state_badge(task)),
            ("Goal", e(task.goal)), ("Submitted by", e(task.submitted_by or "—")),
            ("Schedule", e(task.schedule or "—")), ("Retries", e(task.retries)),
            ("Created", _stamp(task.created_at)), ("Updated", _stamp(task.updated_at))]
    parts = [f'<h1>Task <span class="id">{e(task.id)}</span></h1>', _dl(rows)]
    if card is not None:
        parts.append(card_html(card, csrf=csrf, now=now, next_path=f"/console/tasks/{task.id}"))
    if task.result is not None:
        parts.append(f'<h2>Result</h2><pre class="result">{_pretty(task.result)}</pre>')
    parts.append(f"<h2>Actions</h2>{_history(task)}")
    if transcript:
        parts.append(f"<h2>Conversation</h2>{_conversation(transcript, more_transcript)}")
    parts.append(f"<h2>Audit events</h2>{_audit(events)}")
    return "".join(parts)


def outage_banner(problem: str) -> str:
    """The banner over every console page while the database is unavailable or full."""
    return (f'<p class="flash error outage" role="alert">The database is unavailable '
            f'({e(problem)}): decisions and new tasks are refused until it is back, and '
            f'what you see may be out of date.</p>')


def page(*, title: str, body: str, who: str, csrf: str, flash: str | None = None,
         can_logout: bool = False) -> str:
    """The page frame around a body."""
    logout = ""
    if can_logout:
        logout = (f'<form class="logout" method="post" action="/logout">'
                  f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                  f'<button type="submit" class="link">Sign out</button></form>')
    notice = f'<p class="flash" role="status">{e(flash)}</p>' if flash else ""
    return _template("base.html").substitute(title=e(title), who=e(who), logout=logout,
                                             flash=notice, body=body, push=push_panel(csrf))


def push_panel(csrf: str) -> str:
    """Notifications on this device: hidden until the script finds push enabled."""
    return (f'<section id="push" class="push" hidden data-csrf="{e(csrf)}">'
            f'<span class="push-state" role="status"></span> '
            f'<button type="button" class="btn btn-once">Enable notifications</button>'
            f'</section>')


def live(src: str, inner: str) -> str:
    """The region the script re-fetches from ``src`` when the server says something changed."""
    return f'<div id="live" data-src="{e(src)}" aria-live="polite">{inner}</div>'


def login_page(*, error: str | None = None, next_path: str = "/") -> str:
    """The sign-in form (the API key, once; the browser keeps a session cookie)."""
    problem = f'<p class="flash error" role="alert">{e(error)}</p>' if error else ""
    body = (f'<section class="login"><h1>Sign in</h1>{problem}'
            f'<form method="post" action="/login">'
            f'<label for="key">API key</label>'
            f'<input id="key" name="key" type="password" autocomplete="current-password" '
            f'required autofocus>'
            f'<input type="hidden" name="next" value="{e(next_path)}">'
            f'<button type="submit" class="btn btn-once">Sign in</button></form>'
            f'<p class="hint">Use a key from the daemon\'s <code>[api]</code> config. '
            f'The browser keeps a session cookie, not the key.</p></section>')
    return _template("base.html").substitute(title="Sign in", who="", logout="", flash="",
                                             push="", body=body)


def message_page(*, title: str, text: str) -> str:
    """A short page for errors a person may see (unknown task, refused request)."""
    body = f'<section><h1>{e(title)}</h1><p>{e(text)}</p><p><a href="/">Back</a></p></section>'
    return _template("base.html").substitute(title=e(title), who="", logout="", flash="",
                                             push="", body=body)
