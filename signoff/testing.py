"""Test helpers shipped with signoff: an in-memory surface and the surface contract suites.

`RecordingSurface` is a complete `Surface` that keeps every card and notification in
memory, so the flow can be tested without any network. `SurfaceContract` is the suite
every surface must pass: subclass it in a test module as ``TestXContract`` and provide a
``harness`` fixture returning a `SurfaceHarness` for your surface.

For a surface plug-in (see "Writing a surface" in the README): `PluginContract` checks
its registration, its section model and what its ``build`` returns; `surface_deps` gives
``build`` what the daemon would; `route_client` calls the surface's own HTTP routes
in-process, as the daemon would serve them.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.routing import Route as StarletteRoute

from signoff.bot.cards import BUTTON_LABELS, why_line
from signoff.bot.plugins import surface_registry
from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecidesThroughRoutes,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    Route,
    Surface,
    SurfaceDeps,
    SurfacePlugin,
    with_people,
)
from signoff.errors import PlatformUnavailable
from signoff.runtime.clock import Clock, FakeClock
from signoff.runtime.models import ALL_SCOPES, DecisionCode, Scope
from signoff.runtime.store.memory import MemTaskStore

__all__ = [
    "BUTTON_LABELS",
    "PluginContract",
    "RecordingHarness",
    "RecordingSurface",
    "Rendered",
    "SurfaceContract",
    "SurfaceHarness",
    "cancel_and_wait",
    "route_client",
    "sample_card",
    "surface_deps",
]


@dataclass(frozen=True)
class Rendered:
    """What a person sees of one card right now."""

    text: str
    buttons: tuple[str, ...]


@dataclass
class _Message:
    card: ApprovalCard
    edits: int = 0


@dataclass
class RecordingSurface(DecidesThroughRoutes):
    """An in-memory `Surface`: records posts, edits and notifications.

    ``fail_next`` makes the next N calls raise `PlatformUnavailable`, for fault tests.
    """

    name: str = "recording"
    channel_prefix: str | None = None
    messages: dict[str, _Message] = field(default_factory=dict)
    notes: list[tuple[str, str, CardRef | None]] = field(default_factory=list)
    note_mentions: list[tuple[str, ...]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    fail_next: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _posted: asyncio.Event = field(default_factory=asyncio.Event)

    def _maybe_fail(self, what: str) -> None:
        self.calls.append(what)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise PlatformUnavailable(f"{self.name}: injected failure on {what}")

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Record a new card."""
        self._maybe_fail("post_card")
        message_id = str(next(self._ids))
        self.messages[message_id] = _Message(card)
        self._posted.set()
        return CardRef(surface=self.name, channel="recording", message_id=message_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Replace a recorded card in place."""
        self._maybe_fail("update_card")
        message = self.messages[ref.message_id]
        message.card = card
        message.edits += 1

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Record a notification (``mentions`` also in `note_mentions`, by index)."""
        self._maybe_fail("notify")
        self.notes.append((channel, with_people(text, mentions), thread))
        self.note_mentions.append(tuple(mentions))

    async def check(self) -> None:
        """Nothing to verify in memory."""

    def routes(self) -> tuple[Route, ...]:
        """No HTTP routes."""
        return ()

    async def run(self, on_decision: DecisionHandler) -> None:
        """Keep the handler so `click` can reach it; wait until cancelled."""
        await self.keep_handler(on_decision)

    def attach(self, on_decision: DecisionHandler) -> None:
        """Use without running a background task (the flow's unit tests do this)."""
        self.handler = on_decision

    async def click(self, ref: CardRef, scope: Scope, user_id: str,
                    reason: str | None = None) -> DecisionOutcome:
        """Press a button on a recorded card as ``recording:<user_id>``."""
        if self.handler is None:
            raise RuntimeError("RecordingSurface is not running")
        card = self.messages[ref.message_id].card
        event = DecisionEvent(
            approval_id=card.approval_id,
            scope=scope,
            actor=Actor(platform=self.name, user_id=user_id),
            surface=self.name,
            reason=reason,
            ref=ref,
        )
        outcome = await self.handler(event)
        self.feedback.append(outcome.message)
        return outcome

    def card(self, ref: CardRef) -> ApprovalCard:
        """The current state of a posted card."""
        return self.messages[ref.message_id].card

    def rendered(self, ref: CardRef) -> Rendered:
        """Text and buttons, as a person would see them."""
        card = self.card(ref)
        text = " | ".join(filter(None, [card.title, ", ".join(card.targets),
                                        why_line(card), card.outcome]))
        buttons = tuple(BUTTON_LABELS[s] for s in card.allowed) if card.open else ()
        return Rendered(text=text, buttons=buttons)

    async def wait_posted(self, timeout: float = 5.0) -> None:
        """Wait until at least one card has been posted."""
        async with asyncio.timeout(timeout):
            await self._posted.wait()


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (a harness's background `run`; None: nothing started) and wait until
    it has ended, whatever it raised: what every harness's `stop` does first."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class SurfaceHarness(Protocol):
    """Drives one surface the way its users and its servers would."""

    surface: object  # the Surface under test
    user_id: str  # a user id on this surface
    notify_channel: str  # a channel id notifications may go to

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface (its `run`) in the background."""
        ...

    async def stop(self) -> None:
        """Stop what `start` started."""
        ...

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Send a native click on a posted card; return once the surface handled it."""
        ...

    async def rendered(self, ref: CardRef) -> Rendered:
        """What the card looks like now on the surface (from the server's records)."""
        ...

    async def feedback(self) -> list[str]:
        """Messages shown to people who clicked (toasts, ephemeral replies)."""
        ...

    async def notifications(self, channel: str) -> list[str]:
        """Texts posted to ``channel`` by `notify`."""
        ...


def sample_card(**changes: object) -> ApprovalCard:
    """A realistic card for a SEND action, for contract tests."""
    now = datetime(2026, 3, 14, 9, 26, tzinfo=UTC)  # a fixed, realistic moment
    card = ApprovalCard(
        approval_id="ap7Q2xK9",
        task_id="t-contract",
        title="Send email to john@example.com — subject 'Weekly report'",
        tool="send_email",
        risk="SEND",
        capability="email.send",
        targets=("john@example.com",),
        goal="send the weekly report to John",
        schedule=None,
        step=2,
        steps_total=2,
        details=(("body", "Hi John, here is the report…"),),
        allowed=ALL_SCOPES,
        requested_at=now,
        expires_at=now + timedelta(minutes=30),
    )
    return replace(card, **changes)  # type: ignore[arg-type]


class SurfaceContract:
    """The behaviour every Surface must show. Subclass as ``TestXContract``.

    The subclass provides an async ``harness`` fixture returning a started-or-not
    `SurfaceHarness`; each test starts and stops it itself.
    """

    async def test_post_card_shows_action_targets_and_allowed_buttons(
            self, harness: SurfaceHarness) -> None:
        """A posted card shows the action in words, its target and only the allowed buttons."""
        surface = harness.surface
        card = sample_card(allowed=(Scope.ONCE, Scope.DENY))
        ref = await surface.post_card(card)  # type: ignore[attr-defined]
        assert ref.surface == surface.name  # type: ignore[attr-defined]
        seen = await harness.rendered(ref)
        assert "john@example.com" in seen.text
        assert "Send email" in seen.text
        assert seen.buttons == ("Once", "Deny")

    async def test_update_card_replaces_buttons_with_outcome(
            self, harness: SurfaceHarness) -> None:
        """After a decision the same message shows the outcome and has no buttons."""
        surface = harness.surface
        card = sample_card()
        ref = await surface.post_card(card)  # type: ignore[attr-defined]
        decided = replace(card, status="approved",
                          outcome="Approved for this session by x:alice at 14:03 UTC",
                          decided_by="x:alice", decided_at=card.requested_at)
        await surface.update_card(ref, decided)  # type: ignore[attr-defined]
        seen = await harness.rendered(ref)
        assert "Approved for this session" in seen.text
        assert "john@example.com" in seen.text, "the action text stays on the edited card"
        assert seen.buttons == ()

    async def test_click_reaches_the_flow_with_approval_scope_and_actor(
            self, harness: SurfaceHarness) -> None:
        """A click becomes one DecisionEvent naming the approval, the scope and who clicked."""
        surface = harness.surface
        events: list[DecisionEvent] = []

        async def on_decision(event: DecisionEvent) -> DecisionOutcome:
            events.append(event)
            return DecisionOutcome(True, "Approved for this session")

        await harness.start(on_decision)
        try:
            card = sample_card()
            ref = await surface.post_card(card)  # type: ignore[attr-defined]
            await harness.click(ref, card, Scope.SESSION, harness.user_id)
            assert len(events) == 1
            event = events[0]
            assert event.approval_id == card.approval_id
            assert event.scope is Scope.SESSION
            assert event.actor.key == f"{surface.name}:{harness.user_id}"  # type: ignore[attr-defined]
            assert event.surface == surface.name  # type: ignore[attr-defined]
        finally:
            await harness.stop()

    async def test_refused_click_is_answered_to_the_clicker(
            self, harness: SurfaceHarness) -> None:
        """When the flow refuses a click, the person who clicked is told why."""
        surface = harness.surface

        async def on_decision(event: DecisionEvent) -> DecisionOutcome:
            return DecisionOutcome(False, "Not authorized to decide this",
                                   code=DecisionCode.NOT_AUTHORIZED)

        await harness.start(on_decision)
        try:
            card = sample_card()
            ref = await surface.post_card(card)  # type: ignore[attr-defined]
            await harness.click(ref, card, Scope.ONCE, harness.user_id)
            assert any("Not authorized" in text for text in await harness.feedback())
            assert (await harness.rendered(ref)).buttons, "a refused click leaves the card open"
        finally:
            await harness.stop()

    async def test_an_agents_words_are_shown_labelled_as_its_own(
            self, harness: SurfaceHarness) -> None:
        """A call proposed by an agent shows the model's words as "Why (agent): …"."""
        surface = harness.surface
        ref = await surface.post_card(sample_card(why="The notes ask to tell John."))  # type: ignore[attr-defined]
        seen = await harness.rendered(ref)
        assert "Why (agent): The notes ask to tell John." in seen.text

    async def test_notify_posts_one_line(self, harness: SurfaceHarness) -> None:
        """A notification arrives in the named channel."""
        surface = harness.surface
        await surface.notify(harness.notify_channel, "Task t1 completed")  # type: ignore[attr-defined]
        seen = await harness.notifications(harness.notify_channel)
        assert any("Task t1 completed" in t for t in seen)


@dataclass
class RecordingHarness:
    """`SurfaceHarness` for `RecordingSurface` (also a model for other surfaces)."""

    surface: RecordingSurface = field(default_factory=RecordingSurface)
    user_id: str = "alice"
    notify_channel: str = "team"
    _task: asyncio.Task[None] | None = None

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface in the background."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel the background run."""
        await cancel_and_wait(self._task)

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Press a button."""
        await self.surface.click(ref, scope, user_id)

    async def rendered(self, ref: CardRef) -> Rendered:
        """The recorded card."""
        return self.surface.rendered(ref)

    async def feedback(self) -> list[str]:
        """What clickers were told."""
        return list(self.surface.feedback)

    async def notifications(self, channel: str) -> list[str]:
        """Recorded notifications for a channel."""
        return [text for ch, text, _ in self.surface.notes if ch == channel]


def surface_deps(*, clock: Clock | None = None, pending: Sequence[ApprovalCard] = (),
                 state_dir: Path | None = None) -> SurfaceDeps:
    """What the daemon hands `SurfacePlugin.build`: a clock, the waiting cards, a server
    secret drawn for this call (the daemon's lives in its state dir), the daemon's default
    address as its public URL, ``state_dir`` and an in-memory store's push subscriptions."""
    async def lister() -> list[ApprovalCard]:
        return list(pending)

    return SurfaceDeps(clock=clock or FakeClock(), pending=lister,
                       secret=secrets.token_bytes(32), public_url="http://127.0.0.1:8080",
                       state_dir=state_dir, subscriptions=MemTaskStore())


def route_client(surface: Surface) -> httpx.AsyncClient:
    """An HTTP client for the surface's own `routes`, served in-process (no port)."""
    app = Starlette(routes=[StarletteRoute(r.path, r.endpoint, methods=[r.method])
                            for r in surface.routes()])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://surface")


class PluginContract:
    """What every surface plug-in must do. Subclass as ``TestXPlugin``.

    The subclass provides fixtures ``plugin`` (its `SurfacePlugin`) and ``section`` (a
    valid ``[<name>]`` section as a dict, or None when the surface has no section).
    """

    def test_is_registered_under_its_name(self, plugin: SurfacePlugin[Any]) -> None:
        """The plug-in is found through the ``signoff.surfaces`` entry points, by its name."""
        registry = surface_registry()
        why = registry.broken.get(plugin.name, "no entry point of that name is installed")
        assert registry.plugins.get(plugin.name) is plugin, why

    def test_section_loads_and_refuses_unknown_keys(
            self, plugin: SurfacePlugin[Any], section: dict[str, Any] | None) -> None:
        """The section model loads a valid section, is frozen, and refuses a misspelt key."""
        if plugin.settings is None:
            assert section is None, "a plug-in without a settings model has no section"
            return
        loaded = plugin.settings.model_validate(section)
        assert plugin.settings.model_config.get("frozen"), "sections are frozen (Section)"
        try:
            plugin.settings.model_validate({**(section or {}), "no_such_key": 1})
        except ValidationError as exc:
            assert any(e["type"] == "extra_forbidden" for e in exc.errors())
        else:
            raise AssertionError("an unknown key in the section was accepted")
        if plugin.describe is not None:
            assert plugin.describe(loaded)

    async def test_build_gives_a_surface_named_after_the_plugin(
            self, plugin: SurfacePlugin[Any], section: dict[str, Any] | None) -> None:
        """``build`` returns a `Surface` with the plug-in's name and prefix, routes under
        ``/<name>/``."""
        loaded: BaseModel | None = None
        if plugin.settings is not None:
            loaded = plugin.settings.model_validate(section)
        with tempfile.TemporaryDirectory() as state:  # for a key file of its own (VAPID)
            surface = plugin.build(loaded, surface_deps(state_dir=Path(state)))
        assert isinstance(surface, Surface)
        assert (surface.name, surface.channel_prefix) == (plugin.name, plugin.channel_prefix)
        for route in surface.routes():
            assert route.path.startswith(f"/{plugin.name}/"), route
            assert route.method in ("GET", "POST", "PUT", "DELETE"), route

    def test_examples_follow_its_syntax(self, plugin: SurfacePlugin[Any]) -> None:
        """The examples shown in config errors name this surface's prefix and user ids."""
        if plugin.channel_prefix is not None:
            assert f"'{plugin.channel_prefix}:" in plugin.channel_example
        if plugin.user_id is not None:
            assert f"'{plugin.name}:" in plugin.approver_example
