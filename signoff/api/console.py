"""The web console's routes: pages, live fragments, decisions by form, sign-in, SSE.

Pages render from the store, so a console is right even when another daemon on the same
database received the card or took the decision. The `WebSurface`'s memory only makes
the updates fast: a card change on this node is pushed at once, and every stream also
checks a cheap signature of the store (tasks per state, audit head) every couple of
seconds, which catches changes made on other nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from importlib import resources
from typing import Annotated
from urllib.parse import parse_qs, quote, unquote

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from signoff.adapters.web import pages
from signoff.adapters.web.pages import CardView
from signoff.adapters.web.stats_page import stats_body
from signoff.api.auth import (
    COOKIE,
    HTML_HEADERS,
    Authenticator,
    Identity,
    SignInRefused,
    client_address,
    cookie_secure,
    safe_next,
    set_session,
    sign_in_refused,
)
from signoff.api.batch import decide_all, summary
from signoff.api.context import ApiContext
from signoff.api.routes import identity_of
from signoff.bot.cards import build_card, complete
from signoff.bot.flow import ApprovalFlow
from signoff.bot.ports import Actor, ApprovalCard, CardRef, DecisionEvent
from signoff.runtime import record
from signoff.runtime.bounds import OutOfBounds, parse_json
from signoff.runtime.coalesce import group_size
from signoff.runtime.models import Approval, ApprovalStatus, JsonDict, Scope, Task
from signoff.runtime.refusals import reported_words
from signoff.runtime.schedule.durations import parse_duration
from signoff.runtime.store.port import PendingRequest, TaskStore
from signoff.runtime.text import shown as as_shown

FLASH = "signoff_flash"
SSE_POLL = 2.0  # seconds between store checks on each open stream
KEEPALIVE = 10.0
DECIDED_WINDOW = timedelta(hours=1)
TRANSCRIPT_SHOWN = 200  # messages of an agent's conversation on its task page
STATIC = {"console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8",
          "passkeys.js": "text/javascript; charset=utf-8",
          # The installable app: its service worker (scope "/"), manifest and icons.
          "sw.js": "text/javascript; charset=utf-8",
          "manifest.webmanifest": "application/manifest+json",
          "icon-192.png": "image/png", "icon-512.png": "image/png"}
Id = Annotated[str, Path(min_length=1, max_length=100)]
PAGES = 20  # pages of pending requests read to fill the console's first 50 cards
BATCH_MAX = 500  # cards one multi-select form may decide (as POST /approvals/batch)


def html(body: str, status: int = 200) -> HTMLResponse:
    """An HTML answer with the console's security headers."""
    return HTMLResponse(body, status_code=status, headers=HTML_HEADERS)


async def batch_form_of(request: Request) -> dict[str, list[str]] | None:
    """The multi-select form, every value of each field (None when it is not a form)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    try:
        return parse_qs((await request.body()).decode("utf-8", "replace"),
                        keep_blank_values=True, max_num_fields=BATCH_MAX + 5)
    except ValueError:
        return None


async def form_of(request: Request) -> dict[str, str] | None:
    """A urlencoded form's first values (None when the body is not a small form)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    try:
        parsed = parse_qs((await request.body()).decode("utf-8", "replace"),
                          keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return None
    return {key: values[0] for key, values in parsed.items()}


def answer_terms(form: dict[str, str], scope: Scope) -> tuple[timedelta | None, JsonDict | None]:
    """The console form's time box and edited args; ValueError says what is wrong. The
    time box is chosen next to every button, so it is ignored for Once and Deny."""
    lasts = None
    if form.get("for") and scope in (Scope.SESSION, Scope.ALWAYS):
        lasts = parse_duration(form["for"])
    if "args" not in form:
        return lasts, None
    try:
        args = parse_json(form["args"], "args")
    except json.JSONDecodeError as exc:
        raise ValueError(f"The edited arguments are not valid JSON: {exc}") from exc
    except OutOfBounds as exc:  # deeper or larger than any intake takes
        raise ValueError(f"The edited arguments are refused: {exc}") from exc
    if not isinstance(args, dict):
        raise ValueError("The edited arguments must be a JSON object of argument names.")
    return lasts, args


def asker(task: Task, flow: ApprovalFlow) -> str | None:
    """Who submitted ``task``, by their person's name when ``[[people]]`` lists them."""
    return flow.names.name(task.submitted_by) if task.submitted_by else None


async def view(task: Task, flow: ApprovalFlow, identical: int = 1) -> CardView | None:
    """The card of a task's current (or last) approval request, with its preview (the
    file as it is now) while pending, its args for the edit form, and how many identical
    requests it stands for."""
    approval = task.approval
    if approval is None:
        return None
    card = build_card(task, approval, preview=await flow.preview(approval),
                      step_up=flow.step_up, identical=identical, people=flow.names,
                      passkey=flow.passkeys is not None)
    return CardView(card, asked_by=asker(task, flow), task_state=task.state.value,
                    args_json=edit_form_args(approval), whole=whole_args(card, approval))


def edit_form_args(approval: Approval) -> str | None:
    """The args a pending request's edit form starts from; None: no edit form (decided,
    an outside request whose caller did not ask ``editable``, or args the console can
    show only masked)."""
    if approval.status is not ApprovalStatus.PENDING:
        return None
    if approval.outside and not approval.editable:
        return None  # its caller runs its own call: an edit would be refused
    args = json.dumps(approval.action.args, indent=2, ensure_ascii=False)
    # The console never shows a URL's secrets or an invisible character as it is, and
    # shown args cannot be edited back into the real ones: such a request is edited over
    # the API (POST .../approve).
    return None if as_shown(args) != args else args


def whole_args(card: ApprovalCard, approval: Approval) -> str | None:
    """All of a pending request's arguments, for a card that shows some of them cut: the
    chat cards send people here to see everything they approve (the page masks them)."""
    if approval.status is not ApprovalStatus.PENDING or complete(card, None):
        return None
    return json.dumps(approval.action.args, indent=2, ensure_ascii=False, default=str)


async def request_view(item: PendingRequest, flow: ApprovalFlow,
                       identical: int = 1) -> CardView | None:
    """The card of a pending request: of a task, or from an agent that is not ours."""
    if item.task is not None:
        return await view(item.task, flow, identical)
    card = build_card(None, item.approval, preview=await flow.preview(item.approval),
                      step_up=flow.step_up, identical=identical, people=flow.names,
                      passkey=flow.passkeys is not None)
    return CardView(card, asked_by=item.approval.requester,
                    args_json=edit_form_args(item.approval),
                    whole=whole_args(card, item.approval))


async def identical(store: TaskStore, approval: Approval) -> int:
    """How many requests ``approval``'s card stands for (coalescing)."""
    if approval.coalesce_key is None or approval.coalesced_into is not None:
        return 1
    return group_size(approval, await store.coalesced(approval.id))


async def pending_cards(store: TaskStore, flow: ApprovalFlow,
                        limit: int = 50) -> tuple[list[CardView], bool]:
    """The pending cards the console shows, oldest first, and whether there are more: a
    request that shares another's card is counted on it, not shown again (a burst of
    identical requests is one card, and does not push other requests off the page)."""
    shown: list[CardView] = []
    cursor: str | None = None
    for _ in range(PAGES):
        page = await store.pending_requests(limit=limit, cursor=cursor)
        for item in page.items:
            if item.approval.coalesced_into is not None:
                continue
            if len(shown) == limit:
                return shown, True
            found = await request_view(item, flow, await identical(store, item.approval))
            if found is not None:
                shown.append(found)
        cursor = page.next_cursor
        if cursor is None:
            return shown, False
    return shown, True


class Console:
    """Console handlers bound to one context."""

    def __init__(self, ctx: ApiContext, auth: Authenticator) -> None:
        self.ctx = ctx
        self.auth = auth

    async def approvals(self, identity: Identity) -> str:
        """The live region of the main page."""
        store, now = self.ctx.store, self.ctx.clock.now()
        flow = self.ctx.flow
        pending, more = await pending_cards(store, flow)
        # Held requests (approved, in their undo window) head the list: Undo is urgent.
        held = [v for a in await store.held_approvals() if (v := await self._held_view(a))]
        pending = held + pending
        recent = list((await store.list_tasks(limit=20)).items)
        decided = [v for t in recent if (v := await view(t, flow)) and t.approval is not None
                   and t.approval.status not in (ApprovalStatus.PENDING, ApprovalStatus.HELD)
                   and t.approval.decided_at is not None
                   and now - t.approval.decided_at < DECIDED_WINDOW][:10]
        notes = [text for _, text, _ in reversed(self.ctx.web.notes)][:10]
        return pages.approvals_fragment(pending=pending, decided=decided, tasks=recent,
                                        notes=notes, csrf=self.auth.csrf_token(identity),
                                        now=now, more_pending=more)

    async def _held_view(self, approval: Approval) -> CardView | None:
        if approval.task_id is None:
            return CardView(build_card(None, approval, people=self.ctx.flow.names),
                            asked_by=approval.requester)
        task = await self.ctx.store.get_task(approval.task_id)
        return await view(task, self.ctx.flow) if task is not None else None

    async def task(self, identity: Identity, task_id: str) -> str | None:
        """The live region of a task page, or None for an unknown task."""
        task = await self.ctx.store.get_task(task_id)
        if task is None:
            return None
        events = (await self.ctx.store.audit_events(task_id=task_id, limit=200)).items
        talk = await self.ctx.store.transcript(task_id, limit=TRANSCRIPT_SHOWN)
        card = await view(task, self.ctx.flow)
        return pages.task_fragment(task, list(events),
                                   card=card, csrf=self.auth.csrf_token(identity),
                                   now=self.ctx.clock.now(), transcript=list(talk.items),
                                   more_transcript=talk.next_cursor is not None,
                                   names=self.ctx.flow.names.name)

    async def card(self, identity: Identity, approval_id: str, *,
                   next_path: str = "/") -> str | None:
        """One card: from the store, else from this node's memory (cards of other tasks);
        a decision from it lands on ``next_path``."""
        approval = await self.ctx.store.get_approval(approval_id)
        task = (await self.ctx.store.get_task(approval.task_id)
                if approval is not None and approval.task_id else None)
        preview = await self.ctx.flow.preview(approval) if approval is not None else None
        count = await identical(self.ctx.store, approval) if approval is not None else 1
        if approval is not None and task is not None:
            current = task.approval is not None and task.approval.id == approval.id
            card = (await view(task, self.ctx.flow) if current else None) or CardView(
                build_card(task, approval, preview=preview, step_up=self.ctx.flow.step_up,
                           passkey=self.ctx.flow.passkeys is not None,
                           identical=count, people=self.ctx.flow.names),
                asked_by=asker(task, self.ctx.flow), task_state=task.state.value)
        elif approval is not None and approval.task_id is None:
            card = CardView(build_card(None, approval, preview=preview,
                                       step_up=self.ctx.flow.step_up, identical=count,
                                       passkey=self.ctx.flow.passkeys is not None,
                                       people=self.ctx.flow.names),
                            asked_by=approval.requester, reported=reported_words(approval))
        else:
            local = self.ctx.web.card(approval_id)
            if local is None:
                return None
            card = CardView(local)
        return pages.card_html(card, csrf=self.auth.csrf_token(identity),
                               now=self.ctx.clock.now(), next_path=next_path)

    async def confirm_always(self, identity: Identity, approval_id: str, next_path: str,
                             carry: dict[str, str] | None = None) -> str | None:
        """The page that asks to confirm an Always answer, or None when there is nothing
        to confirm (unknown or no longer pending: the decision itself says why);
        ``carry``: the answer's "for" and edited args, sent on with the confirmation."""
        approval = await self.ctx.store.get_approval(approval_id)
        if approval is None or approval.status is not ApprovalStatus.PENDING:
            return None
        task = await self.ctx.store.get_task(approval.task_id) if approval.task_id else None
        card = build_card(task, approval, preview=await self.ctx.flow.preview(approval))
        body = pages.confirm_always_page(card, csrf=self.auth.csrf_token(identity),
                                         next_path=next_path, carry=carry or {})
        return self.frame(identity, "Approve always?", body, None)

    def frame(self, identity: Identity, title: str, body: str,
              flash: tuple[str, str] | None) -> str:
        """A whole page around a body (under a banner while the database is away)."""
        down = self.ctx.engine.outages.database_problem()
        if down is not None:
            body = pages.outage_banner(str(down)) + body
        return pages.page(title=title, body=body, who=identity.actor,
                          csrf=self.auth.csrf_token(identity), flash=flash,
                          can_logout=identity.via == "cookie")

    async def signature(self) -> tuple[object, ...]:
        """Cheap summary of the store that changes whenever a task or decision does."""
        counts = await self.ctx.store.count_by_state()
        head = await self.ctx.store.audit_head()
        return tuple(sorted(counts.items())), head

    async def stream(self) -> AsyncIterator[str]:
        """Server-sent events: ``refresh`` whenever something the console shows changed."""
        with self.ctx.web.broadcaster.subscribe() as queue:
            yield "retry: 3000\nevent: hello\ndata: {}\n\n"
            last = await self.signature()
            quiet = 0.0
            while True:
                why: str | None = "poll"
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation (client gone) that races with an event arriving.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SSE_POLL):
                        why = await queue.get()
                if why is None:
                    return  # the platform stopped: end the stream so the server can close
                current = await self.signature()
                if why != "poll" or current != last:
                    last, quiet = current, 0.0
                    yield f"event: refresh\ndata: {json.dumps({'why': why})}\n\n"
                    continue
                quiet += SSE_POLL
                if quiet >= KEEPALIVE:  # lets the server notice a closed connection
                    quiet = 0.0
                    yield ": keep-alive\n\n"


def _with_flash(response: Response, message: str, *, done: bool = True) -> Response:
    """Carry what a decision did to the next page: its words, and whether it was done
    (an answer taken) or not (already decided, refused): the two look different."""
    kind = "done" if done else "refused"
    response.set_cookie(FLASH, quote(f"{kind}:{message[:300]}"), max_age=60, path="/",
                        httponly=True, samesite="strict")
    return response


def _framed(console: Console, request: Request, who: Identity, title: str,
            body: str) -> Response:
    """A whole page with the flash a redirect left, if any (shown once: then cleared)."""
    raw = request.cookies.get(FLASH)
    flash = None
    if raw:
        kind, _, text = unquote(raw).partition(":")
        flash = (text, kind) if kind in ("done", "refused") else (unquote(raw), "done")
    response = html(console.frame(who, title, body, flash))
    if raw:
        response.delete_cookie(FLASH, path="/", httponly=True, samesite="strict")
    return response


def _static(name: str) -> bytes:
    return resources.files("signoff.adapters.web").joinpath("static", name).read_bytes()


def build_router(ctx: ApiContext, auth: Authenticator) -> APIRouter:
    """The console's routes (none of them in the OpenAPI schema)."""
    console = Console(ctx, auth)
    router = APIRouter(include_in_schema=False)
    assets = {name: _static(name) for name in STATIC}

    @router.get("/")
    async def home(request: Request) -> Response:
        who = identity_of(request)
        body = pages.live("/console/fragment/approvals", await console.approvals(who))
        return _framed(console, request, who, "Approvals", body)

    @router.get("/console/fragment/approvals")
    async def approvals_fragment(request: Request) -> Response:
        return html(await console.approvals(identity_of(request)))

    @router.get("/console/tasks/{task_id}")
    async def task_page(request: Request, task_id: Id) -> Response:
        who = identity_of(request)
        inner = await console.task(who, task_id)
        if inner is None:
            return html(pages.message_page(title="Unknown task", text=f"No task {task_id}."),
                        404)
        body = pages.live(f"/console/fragment/tasks/{task_id}", inner)
        return _framed(console, request, who, f"Task {task_id}", body)

    @router.get("/console/fragment/tasks/{task_id}")
    async def task_fragment(request: Request, task_id: Id) -> Response:
        inner = await console.task(identity_of(request), task_id)
        return html(inner, 200) if inner is not None else html("", 404)

    @router.get("/console/stats")
    async def stats_page(request: Request, since: Annotated[str, Query(
            min_length=1, max_length=40)] = "30d") -> Response:
        """What `signoff stats` and `signoff suggest` print, for the window ``since``."""
        who = identity_of(request)
        now = ctx.clock.now()
        try:
            start = record.parse_since(since, now)
        except ValueError as exc:
            return html(pages.message_page(title="Stats", text=str(exc)), 422)
        events = await record.read_log(ctx.store)
        body = stats_body(record.stats(events, since=start, until=now),
                          record.suggest(events), since)
        return html(console.frame(who, "Stats", body, None))

    @router.get("/console/cards/{approval_id}")
    async def one_card(request: Request, approval_id: Id, here: bool = False) -> Response:
        """One card as a page of its own: where a chat's step-up link lands (a browser
        navigating here gets the whole page; a script asking for the card, the card).
        ``here``: a decision from the card comes back to this page (its live region)."""
        who = identity_of(request)
        page_path = f"/console/cards/{approval_id}"
        navigating = request.headers.get("sec-fetch-mode") == "navigate"
        inner = await console.card(who, approval_id,
                                   next_path=page_path if navigating or here else "/")
        if inner is None:
            return html("", 404)
        if not navigating:
            return html(inner, 200)
        body = pages.live(f"{page_path}?here=1", inner)
        return _framed(console, request, who, "Approval request", body)

    @router.get("/console/passkeys")
    async def passkeys_page(request: Request) -> Response:
        """Register, see and revoke one's passkeys (WebAuthn runs in passkeys.js)."""
        who = identity_of(request)
        mine = [p for p in await ctx.store.passkeys() if ctx.flow.people.same(p.owner, who.actor)]
        body = pages.passkeys_page(mine, csrf=auth.csrf_token(who),
                                   required=ctx.flow.passkeys is not None)
        return html(console.frame(who, "Passkeys", body, None))

    @router.post("/console/decide")
    async def decide(request: Request) -> Response:
        who = identity_of(request)
        form = await form_of(request)
        if form is None or not auth.check_csrf(who, form.get("csrf")):
            return html(pages.message_page(title="Refused", text="This form has expired or "
                                           "came from another site. Reload and try again."),
                        403)
        undo = form.get("scope") == "undo"  # the Undo button of a held card
        try:
            scope = Scope.DENY if undo else Scope(form.get("scope", ""))
        except ValueError:
            return html(pages.message_page(title="Unknown decision",
                                           text="Choose Once, Session, Always or Deny."), 422)
        approval_id = form.get("approval_id", "")[:100]
        try:
            lasts, args = answer_terms(form, scope)
        except ValueError as exc:
            return html(pages.message_page(title="Not decided", text=str(exc)), 422)
        if scope is Scope.ALWAYS and form.get("confirm") != "always":
            # Always outlives the task: a first press only asks (a page, so no JS needed).
            carry = {k: form[k] for k in ("for", "args") if form.get(k)}
            ask = await console.confirm_always(who, approval_id, safe_next(form.get("next")),
                                               carry)
            if ask is not None:
                return html(ask)
        reason = (form.get("reason") or "").strip()[:500] or None
        event = DecisionEvent(approval_id=approval_id, scope=scope, actor=Actor("web", who.name),
                              surface="web", reason=reason if scope is Scope.DENY else None,
                              ref=CardRef("web", "console", approval_id), undo=undo,
                              lasts=lasts, args=args)
        outcome = await ctx.web.decide(event, ctx.flow.on_decision)
        target = safe_next(form.get("next"))
        return _with_flash(RedirectResponse(target, status_code=303), outcome.message,
                           done=outcome.accepted)

    @router.post("/console/batch")
    async def batch(request: Request) -> Response:
        who = identity_of(request)
        form = await batch_form_of(request)
        if form is None or not auth.check_csrf(who, form.get("csrf", [""])[0]):
            return html(pages.message_page(title="Refused", text="This form has expired or "
                                           "came from another site. Reload and try again."),
                        403)
        choice = form.get("decision", [""])[0]
        if choice not in ("once", "deny"):
            return html(pages.message_page(title="Unknown decision", text="A batch is "
                                           "approved once or denied, nothing else."), 422)
        ids = [i[:100] for i in form.get("ids", []) if i][:BATCH_MAX]
        if not ids:
            return _with_flash(RedirectResponse("/", status_code=303),
                               "Nothing selected: tick the cards to decide together.",
                               done=False)
        scope = Scope(choice)
        results = await decide_all(ctx, functools.partial(ctx.web.decide,
                                                          fallback=ctx.flow.on_decision),
                                   Actor("web", who.name), ids, scope, None)
        return _with_flash(RedirectResponse("/", status_code=303), summary(results, scope))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await form_of(request) or {}
        target = safe_next(form.get("next"))
        try:
            token = await auth.sign_in(form.get("key", ""), client_address(request.scope))
        except SignInRefused as refusal:
            return sign_in_refused(request.headers, target, pages.login_page, refusal,
                                   form=True)
        response = RedirectResponse(target, status_code=303)
        set_session(response, token, secure=cookie_secure(request.scope, ctx.public_url),
                    ttl=auth.rules.ttl)
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        who = identity_of(request)
        form = await form_of(request) or {}
        if not auth.check_csrf(who, form.get("csrf")):
            return html(pages.message_page(title="Refused", text="Reload and try again."), 403)
        await auth.sign_out(who)  # ends it on every node: a copy of the cookie is dead too
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @router.get("/events")
    async def events(request: Request) -> Response:
        identity_of(request)
        return StreamingResponse(console.stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @router.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in assets:
            return Response(status_code=404)
        headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        if name == "sw.js":  # served under /static/, it may control the whole console
            headers["Service-Worker-Allowed"] = "/"
        return Response(assets[name], media_type=STATIC[name], headers=headers)

    return router
