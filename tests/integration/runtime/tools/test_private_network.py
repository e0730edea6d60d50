"""Network tools and private networks: the policy asks, the run checks every hop again.

Real HTTP servers on 127.0.0.1 (itself a private address), a node built by the wiring,
and a resolver injected through the wiring's resolver port so a public-looking name can
resolve to 127.0.0.1 offline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from signoff.config.settings import Settings
from signoff.embed import Agent
from signoff.errors import ConfigError
from signoff.runtime.models import Action, ApprovalStatus, RiskClass, Verdict
from signoff.runtime.outside import OutsideRequests, RequestSpec
from signoff.runtime.policy.net import NetAllow, NetRule
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.tools.base import ToolContext
from signoff.runtime.tools.registry import builtin_registry
from signoff.wiring import Node, build_node
from tests.fakes.http_echo import HttpEcho


class NamedResolver:
    """Resolves the names it was given, and nothing else (as a DNS server would)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        self.asked.append(host)
        return (self.names[host],) if host in self.names else ()


class Planned:
    """A planner that plans the given actions."""

    def __init__(self, *actions: Action) -> None:
        self.actions = list(actions)

    def plan(self, goal: str, **kwargs: Any) -> list[Action]:
        return list(self.actions)


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    async with HttpEcho() as server:
        yield server


def node(tmp_path: Path, *actions: Action, policy: dict[str, Any] | None = None,
         port: int = 8080, resolver: NamedResolver | None = None, **daemon: Any) -> Node:
    settings = Settings.model_validate({
        "daemon": {"work_dir": str(tmp_path / "work"), "port": port, **daemon},
        "policy": policy or {}})
    return build_node(settings, store=MemTaskStore(), planner=Planned(*actions),
                      resolver=resolver)


def fetch(url: str) -> Action:
    return Action(tool="http_get", args={"url": url})


async def test_a_read_on_a_private_address_asks_and_its_card_says_private_network(
        tmp_path: Path, echo: HttpEcho) -> None:
    """http_get (READ) to 127.0.0.1 waits for a person, as a SEND, "private network" on it."""
    agent = Agent(node(tmp_path, fetch(echo.url("/text"))))
    report = await agent.handle("look")
    assert report.state == "waiting_approval"
    pending = report.task["pending_action"]
    assert pending["risk"] == "SEND"
    assert echo.requests == []
    approval = (await agent.node.store.get_task(report.task["id"])).approval
    assert "private network" in (approval.action.summary or "")
    done = await agent.resume(report.task["id"], approved=True)
    assert done.state == "completed" and echo.requests[-1].path == "/text"


async def test_a_private_address_in_net_allow_runs_alone(tmp_path: Path,
                                                         echo: HttpEcho) -> None:
    """With policy.net_allow = ["127.0.0.1"] the same READ runs without asking."""
    agent = Agent(node(tmp_path, fetch(echo.url("/text")), policy={"net_allow": ["127.0.0.1"]}))
    report = await agent.handle("look")
    assert report.state == "completed"
    assert report.task["actions"][0]["output"]["text"] == "hello from echo"


async def test_the_daemons_own_address_is_blocked_even_when_allowed(tmp_path: Path,
                                                                    echo: HttpEcho) -> None:
    """A network tool to the daemon's listening port is BLOCKed, net_allow or not."""
    for url in (echo.url("/text"), f"http://localhost:{echo.port}/text"):
        agent = Agent(node(tmp_path, fetch(url), port=echo.port,
                           policy={"net_allow": ["127.0.0.0/8", "localhost"]},
                           resolver=NamedResolver({"localhost": "127.0.0.1"})))
        report = await agent.handle("look")
        assert report.state == "failed", url
        assert "daemon's own address" in report.task["result"]["reason"]
    assert echo.requests == []


async def test_the_daemons_public_url_is_blocked_too(tmp_path: Path) -> None:
    """daemon.public_url's host and port (behind a proxy, on a public address) is refused."""
    resolver = NamedResolver({"approvals.example.com": "93.184.215.14"})
    agent = Agent(node(tmp_path, fetch("https://approvals.example.com/approvals?status=pending"),
                       resolver=resolver, public_url="https://approvals.example.com"))
    report = await agent.handle("look")
    assert report.state == "failed"
    assert "daemon's own address" in report.task["result"]["reason"]


async def test_a_public_looking_name_that_resolves_to_loopback_is_private(
        tmp_path: Path, echo: HttpEcho) -> None:
    """api.example.com resolving to 127.0.0.1 asks like any private address."""
    resolver = NamedResolver({"api.example.com": "127.0.0.1"})
    url = f"http://api.example.com:{echo.port}/text"
    agent = Agent(node(tmp_path, fetch(url), resolver=resolver))
    report = await agent.handle("look")
    assert report.state == "waiting_approval"
    approval = (await agent.node.store.get_task(report.task["id"])).approval
    assert "private network: api.example.com (127.0.0.1)" in (approval.action.summary or "")
    done = await agent.resume(report.task["id"], approved=True)
    # The connection went to the checked address, with the name in the Host header.
    assert done.state == "completed"
    assert echo.requests[-1].headers["Host"] == f"api.example.com:{echo.port}"


async def test_a_redirect_to_a_private_address_that_would_ask_is_not_followed(
        tmp_path: Path, echo: HttpEcho) -> None:
    """From an allowed server, a redirect to a non-allowed private address fails the tool."""
    target = f"http://10.1.2.3:{echo.port}/text"
    agent = Agent(node(tmp_path, fetch(echo.url(f"/redirect?to={target}")),
                       policy={"net_allow": ["127.0.0.1"]}))
    report = await agent.handle("look")
    assert report.state == "failed"
    reason = report.task["result"]["reason"]
    assert "redirect not followed" in reason and "private network" in reason
    assert "10.1.2.3" in reason


async def test_a_name_that_turns_private_after_the_check_is_not_connected_to(
        tmp_path: Path, echo: HttpEcho) -> None:
    """DNS rebinding: the run checks again; a call not approved as private never connects."""
    registry = builtin_registry(work_dir=tmp_path, entry_points_group=None)
    action = registry.prepare(fetch(f"http://rebind.example:{echo.port}/text"))
    rule = NetRule(resolver=NamedResolver({"rebind.example": "127.0.0.1"}))
    with pytest.raises(Exception, match="not approved as a private-network request"):
        await registry.execute(action, ToolContext(work_dir=tmp_path, net=rule))
    assert echo.requests == []


async def test_send_webhook_to_the_daemon_is_refused_at_run_time(tmp_path: Path,
                                                                 echo: HttpEcho) -> None:
    """Even a stored, approved webhook to the daemon's own port never connects."""
    registry = builtin_registry(work_dir=tmp_path, entry_points_group=None)
    action = registry.prepare(Action(tool="send_webhook",
                                     args={"url": echo.url("/hook"), "payload": {}}))
    rule = NetRule(allow=NetAllow.parse(["127.0.0.1"]), own_ports=frozenset({echo.port}))
    approved = action.model_copy(update={"private_network": True})
    with pytest.raises(Exception, match="daemon's own address"):
        await registry.execute(approved, ToolContext(work_dir=tmp_path, net=rule))
    assert echo.requests == []


def test_a_bad_net_allow_entry_is_a_config_error_naming_it(tmp_path: Path) -> None:
    """policy.net_allow = ["http://x/"] is refused with the entry named."""
    with pytest.raises((ConfigError, ValueError), match="http://x/"):
        Settings.model_validate({"daemon": {"work_dir": str(tmp_path)},
                                 "policy": {"net_allow": ["http://x/"]}})


async def test_public_destinations_are_judged_as_before(tmp_path: Path) -> None:
    """A READ to a public address stays autonomous; its card has no network note."""
    resolver = NamedResolver({"docs.example.org": "93.184.215.14"})
    built = node(tmp_path, resolver=resolver)
    action = built.engine.registry.prepare(fetch("http://docs.example.org/"))
    ev = await built.engine.policy.evaluate_request(action, built.store, policy_id="p",
                                                    now=built.clock.now())
    assert (ev.verdict, ev.action) == (Verdict.ALLOW, None)
    assert resolver.asked == ["docs.example.org"]


async def test_an_outside_agents_fetch_of_a_private_address_says_private_network(
        tmp_path: Path) -> None:
    """A Claude Code WebFetch (outside request) to 10.0.0.5 is pending with the words on
    its card; one to the daemon's own port is denied at once."""
    built = node(tmp_path, port=8080)
    await built.store.open()
    try:
        outside = OutsideRequests(engine=built.engine)
        spec = RequestSpec(tool="claude.WebFetch", args={"url": "http://10.0.0.5/admin"},
                           policy_id="s1", requester="claude-code@test", risk=RiskClass.READ,
                           capability="net.fetch", targets=("http://10.0.0.5/admin",))
        pending, _ = await outside.submit(spec)
        assert pending.status is ApprovalStatus.PENDING
        assert "private network: 10.0.0.5" in (pending.action.summary or "")
        assert pending.action.risk is RiskClass.SEND
        own = replace(spec, args={"url": "http://127.0.0.1:8080/approvals"},
                      targets=("http://127.0.0.1:8080/approvals",))
        refused, _ = await outside.submit(own)
        assert refused.status is ApprovalStatus.DENIED
        assert "daemon's own address" in (refused.reason or "")
    finally:
        await built.store.close()


class TurnsPrivate:
    """hook.example is 127.0.0.1 (allowed by net_allow) until a request has landed on the
    echo server, then 127.0.0.2 (private, not allowed): a name whose DNS changed."""

    def __init__(self, echo: HttpEcho) -> None:
        self.echo = echo

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        return ("127.0.0.2",) if self.echo.requests else ("127.0.0.1",)


async def test_an_always_grant_from_a_public_card_does_not_cover_a_private_network(
        tmp_path: Path, echo: HttpEcho) -> None:
    """A person answers Always to a webhook whose host was not private; when the name
    resolves to a private address, the same webhook asks again, its card saying so, and
    the grant is not used (it would have POSTed inside the network nobody approved)."""
    hook = Action(tool="send_webhook", args={"url": f"http://hook.example:{echo.port}/hook",
                                             "payload": {"n": 1}})
    agent = Agent(node(tmp_path, hook, hook, policy={"net_allow": ["127.0.0.1"]},
                       resolver=TurnsPrivate(echo)))
    first = await agent.handle("notify twice")
    assert first.state == "waiting_approval"
    assert "private network" not in await card_summary(agent, first.task["id"])
    second = await agent.resume(first.task["id"], approved=True, scope="always")
    assert len(echo.requests) == 1
    assert second.state == "waiting_approval", second.task["actions"]
    assert ("private network: hook.example (127.0.0.2)"
            in await card_summary(agent, first.task["id"]))


async def card_summary(agent: Agent, task_id: str) -> str:
    """The summary on the card of the request ``task_id`` waits on."""
    task = await agent.node.store.get_task(task_id)
    assert task is not None and task.approval is not None
    return task.approval.action.summary or ""


class Switch:
    """hook.example is 127.0.0.1 (allowed) until ``private`` is set, then 127.0.0.2."""

    def __init__(self) -> None:
        self.private = False

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        return ("127.0.0.2",) if self.private else ("127.0.0.1",)


async def test_a_private_request_never_joins_a_card_that_does_not_say_so(
        tmp_path: Path, echo: HttpEcho) -> None:
    """Identical webhooks share one card (coalescing), but not when one of them now
    reaches a private network: a Once on the first card leaves the second waiting."""
    hook = Action(tool="send_webhook", args={"url": f"http://hook.example:{echo.port}/hook",
                                             "payload": {"n": 1}})
    names = Switch()
    agent = Agent(node(tmp_path, hook, policy={"net_allow": ["127.0.0.1"]}, resolver=names))
    public = await agent.handle("notify")
    names.private = True
    private = await agent.handle("notify")
    assert public.state == private.state == "waiting_approval"
    assert "private network" in await card_summary(agent, private.task["id"])
    names.private = False  # and back: the first card's webhook may run as it was shown
    done = await agent.resume(public.task["id"], approved=True)
    assert done.state == "completed" and len(echo.requests) == 1
    still = await agent.node.store.get_task(private.task["id"])
    assert still is not None and still.state.value == "waiting_approval"
