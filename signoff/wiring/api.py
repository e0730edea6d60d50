"""The HTTP API's parts from the config: keys and roles, its context, and the
providers and services (schedules, on-call, escalation, reminders, notifications)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from signoff.config.settings import Settings
from signoff.runtime.store.port import TaskStore
from signoff.wiring.cluster import build_reminder
from signoff.wiring.node import Node

if TYPE_CHECKING:
    from signoff.api.context import ApiContext

log = logging.getLogger(__name__)


def api_keys(settings: Settings) -> dict[str, str]:
    """API key → actor name: ``admin`` for ``api.key``, each ``[[api.keys]]`` by its name."""
    from signoff.api.context import ADMIN

    keys: dict[str, str] = {}
    if settings.api.key:
        keys[settings.api.key] = ADMIN
    for entry in settings.api.keys:
        keys.setdefault(entry.key, entry.name)
    return keys


def api_roles(settings: Settings) -> dict[str, str]:
    """Actor name → role (`signoff.api.access`): ``admin`` for ``api.key``, each
    ``[[api.keys]]`` entry its own ``role``."""
    roles: dict[str, str] = {entry.name: entry.role for entry in settings.api.keys}
    if settings.api.key:
        roles["admin"] = "admin"
    return roles


async def forget_stale_subscriptions(store: TaskStore, settings: Settings, *,
                                     local: bool) -> int:
    """Forget the push subscriptions of people who no longer hold a key that may decide
    (a key removed from the config, or made a requester): their notifications' tokens
    would otherwise still decide as them. Run at start-up; returns how many went."""
    keys, roles = api_keys(settings), api_roles(settings)
    deciders = {f"web:{name}" for name in keys.values() if roles.get(name) != "requester"}
    if local and not keys:
        deciders.add("web:local")  # the keyless loopback console
    gone = 0
    for sub in await store.push_subscriptions():
        if sub.holder not in deciders and await store.remove_push_subscription(sub.id):
            gone += 1
    if gone:
        log.info("push_subscriptions_forgotten", extra={"count": gone})
    return gone


def api_context(settings: Settings, **parts: Any) -> ApiContext:
    """The API's context from the config file: ``keys``, ``local_no_key`` (no key on a
    loopback host) and ``public_url`` filled in unless given; the rest from ``parts``."""
    from signoff.api.context import ApiContext
    from signoff.net import is_loopback

    keys = api_keys(settings)
    parts.setdefault("keys", keys)
    parts.setdefault("roles", api_roles(settings))
    parts.setdefault("session_ttl", settings.api.session_ttl)
    parts.setdefault("sign_in_attempts", settings.api.sign_in_attempts)
    parts.setdefault("local_no_key", not keys and is_loopback(settings.daemon.host))
    parts.setdefault("local_any_user", settings.api.keyless_any_local_user)
    parts.setdefault("public_url", settings.daemon.public_url)
    return ApiContext(**parts)



def api_providers(node: Node) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """(schedules provider, on-call provider, extra services) for the daemon."""
    from signoff.bot.routing.escalation import Escalator

    assert node.scheduler is not None and node.oncall is not None
    scheduler, router = node.scheduler, node.oncall
    escalator = Escalator(decider=node.decider, clock=node.clock, rotations=router.rotations,
                          overrides=router.overrides, wake=node.flow.dispatcher.wake)

    async def schedules() -> list[dict[str, Any]]:
        return await scheduler.status()

    async def oncall(at: datetime | None) -> dict[str, Any]:
        return router.describe(at)

    services: list[tuple[str, Any]] = [("scheduler", scheduler.run),
                                       ("escalation", escalator.run)]
    reminder = build_reminder(node)
    if reminder is not None:
        services.append(("reminders", reminder.run))
    if node.flow.notifier is not None:
        services.append(("notify", node.flow.notifier.run))
        if any("audit_head" in r.events for r in node.flow.notifier.rules):
            services.append(("audit-head", node.flow.notifier.run_audit_head))
    return schedules, oncall, services
