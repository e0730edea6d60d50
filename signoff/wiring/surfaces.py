"""The chat surfaces: built from the installed plug-ins, and the ports they are given.

`build_surfaces` makes every surface the config enables; `PendingCards` is what they
read the pending requests and push subscriptions through; `SurfacePoster` is the
`post_message` tool's way out through them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from signoff.bot.plugins import SurfaceRegistry, surface_registry
from signoff.bot.ports import ApprovalCard, CardRef, PostedCard, Surface, SurfaceDeps
from signoff.config.settings import Settings
from signoff.errors import ConfigError, PlatformUnavailable
from signoff.runtime.store.port import PushSubscription, TaskStore
from signoff.runtime.tools.base import ChannelForm
from signoff.runtime.tools.builtin.messaging import parse_channel

if TYPE_CHECKING:
    from signoff.wiring.node import Node


class SurfacePoster:
    """`post_message`'s port: ``slack:C1`` / ``telegram:-100`` go to that surface's notify.

    A channel's prefix names its surface through the plug-ins (`surface_name`). It reads
    the node's live surface table, so a surface the daemon disabled at start-up is
    reported unreachable instead of failing after somebody approved the post.
    """

    def __init__(self, surfaces: Mapping[str, Surface],
                 channels: tuple[ChannelForm, ...]) -> None:
        self.surfaces = surfaces
        self.channels = channels

    def unreachable(self, channel: str) -> str | None:
        """Why ``channel``'s surface cannot be used in this process, or None."""
        surface = surface_name(parse_channel(channel, self.channels)[0])
        if surface in self.surfaces:
            return None
        return (f"no {surface} surface is running in this process (it needs [{surface}] in "
                "the config; `signoff handle` has only the terminal)")

    async def post(self, channel: str, text: str) -> None:
        """Post through the surface's own notify (its escaping, limits and errors)."""
        prefix, target = parse_channel(channel, self.channels)
        await self.surfaces[surface_name(prefix)].notify(target, text)


def channel_forms(registry: SurfaceRegistry | None = None) -> tuple[ChannelForm, ...]:
    """How each installed surface writes its channels, for `post_message`."""
    return tuple(ChannelForm(prefix=p.channel_prefix, pattern=p.channel_id,
                             expected=p.channel_example or f"'{p.channel_prefix}:<id>'",
                             kind=p.channel_kind or f"a channel id for {p.channel_prefix}")
                 for p in (registry or surface_registry()).plugins.values()
                 if p.channel_prefix is not None)


class PendingCards:
    """The surfaces' `/pending` lister, card lookup and push subscriptions: the node's.

    The daemon builds it after the node (`signoff.wiring.daemon.assemble`); one without a
    node (surfaces built before theirs) lists nothing and has no store yet.
    """

    def __init__(self, node: Node | None = None) -> None:
        self.node = node

    async def __call__(self) -> list[ApprovalCard]:
        from signoff.bot.cards import build_card

        if self.node is None:
            return []
        page = await self.node.store.pending_requests(limit=20)
        url = self.node.settings.daemon.public_url
        flow = self.node.flow
        return [build_card(r.task, r.approval, console_url=url,
                           preview=await flow.preview(r.approval), step_up=flow.step_up,
                           people=flow.names)
                for r in page.items]

    async def lookup(self, approval_id: str) -> PostedCard | None:
        """One request's current card and where it was posted (`SurfaceDeps.lookup`)."""
        if self.node is None:
            return None
        store = self.node.store
        approval = await store.get_approval(approval_id)
        if approval is None:
            return None
        task = await store.get_task(approval.task_id) if approval.task_id else None
        if approval.task_id is not None and task is None:
            return None  # the request is gone (reset)
        refs = tuple(CardRef(r.surface, r.channel, r.message_id)
                     for r in await store.cards(approval_id))
        # As the flow posts it (identical requests, who is asked): a Teams click is
        # answered with this card, and links are judged on it.
        card = await self.node.flow.card(task, approval)
        return PostedCard(card=card, refs=refs)

    # -- `SurfaceDeps.subscriptions`: the store's push subscriptions, once there is one ----
    def _store(self) -> TaskStore:
        if self.node is None:
            raise PlatformUnavailable("the daemon is starting: no store yet")
        return self.node.store

    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep one (`TaskStore.add_push_subscription`)."""
        return await self._store().add_push_subscription(sub)

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """``holder``'s or everyone's (`TaskStore.push_subscriptions`)."""
        return await self._store().push_subscriptions(holder)

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one (`TaskStore.remove_push_subscription`)."""
        return await self._store().remove_push_subscription(sub_id, holder=holder)


def surface_name(prefix: str) -> str:
    """The surface whose channels are written ``<prefix>:<id>`` (the prefix if none is)."""
    plugin = surface_registry().by_prefix(prefix)
    return plugin.name if plugin is not None else prefix


def build_surfaces(settings: Settings, *, deps: SurfaceDeps,
                   registry: SurfaceRegistry | None = None) -> dict[str, Surface]:
    """Every surface the daemon runs: those with a config section, and the `always` ones.

    One loop over the registered plug-ins (`signoff.bot.plugins`); each imports its SDK
    only in its ``build``.
    """
    out: dict[str, Surface] = {}
    for plugin in (registry or surface_registry()).plugins.values():
        section = settings.surface(plugin.name)
        if section is None and not plugin.always:
            continue
        if section is not None and plugin.enabled is not None and not plugin.enabled(section):
            continue
        surface = plugin.build(section, deps)
        if surface.name != plugin.name or surface.channel_prefix != plugin.channel_prefix:
            raise ConfigError(
                f"surface plug-in {plugin.name!r} built a surface named {surface.name!r} with "
                f"channel prefix {surface.channel_prefix!r} (expected {plugin.name!r} and "
                f"{plugin.channel_prefix!r})")
        out[plugin.name] = surface
    return out
