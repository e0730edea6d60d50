"""The gate holds whatever order things happen in: a stateful property suite.

Hypothesis drives a real node — the real engine, decider, coalescing, quorum and grants,
a real SQLite store in a temporary directory, and the real FastAPI app through httpx's
ASGI transport — with random sequences of: tasks with SEND and DESTRUCTIVE steps,
outside requests (``POST /v1/approvals``) from several callers, identical requests,
answers (once, session, always, deny, time-boxed, edited) by several people, batches,
and time passing (requests expire, time-boxed grants lapse). After every step one
invariant is checked (`gate_model.Ledger.unjustified`): every effect that ran matches an
action shown to and approved by enough authorized people other than its requester, or a
live grant minted from such an approval for its policy.

Each class below is one configuration. `TestGateHolds` is the everyday one and must pass.
The others each open one door the 0.3 contract closes (issue 21); on a build without that
fix Hypothesis finds the way through, and the class is marked as an expected failure
(strict: it fails the suite once the fix is merged, so the mark is removed then).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import RiskClass, Task
from signoff.runtime.tools.base import Param, ToolContext
from signoff.wiring import Node, api_context, build_node
from tests.invariant.gate_model import Effect, Ledger, Request, Vote, canonical

T = TypeVar("T")
BASE = "http://127.0.0.1"
ADMIN_KEY = "admin-key-0123456789abcdef"
# Every named key acts as web:<name>. Deciders answer; requesters ask (in the everyday
# configuration they never answer, so no self-approval question arises there).
DECIDERS = ("admin", "bob", "carol")
REQUESTERS = ("req1", "req2")
NAMED_KEYS = {name: f"{name}-key-0123456789abcdef" for name in (*DECIDERS[1:], *REQUESTERS)}
TARGETS = ("a", "b")
POLICIES = ("p1", "p2")
LASTS = {None: None, "10m": timedelta(minutes=10), "2h": timedelta(hours=2)}

# Two settings profiles. "gate" (the default) is modest on purpose: CI runs the suite
# twice on a 2-core machine, and every example builds a node and its app. Derandomized,
# so a run is the same on every machine and an expected failure is found every time.
# "gate-deep" (SIGNOFF_GATE_PROFILE=gate-deep) explores far more, randomly, for a
# search before a release.
_COMMON: dict[str, Any] = {"deadline": None, "database": None, "print_blob": False,
                           "suppress_health_check": [HealthCheck.too_slow,
                                                     HealthCheck.filter_too_much]}
settings.register_profile("gate", max_examples=15, stateful_step_count=12, derandomize=True,
                          **_COMMON)
settings.register_profile("gate-deep", max_examples=300, stateful_step_count=30, **_COMMON)
PROFILE_NAME = os.environ.get("SIGNOFF_GATE_PROFILE", "gate")
PROFILE = settings.get_profile(PROFILE_NAME)


@dataclass
class RecordingTool:
    """A gated tool whose only effect is an entry in ``effects`` (tool, args, when).

    Its fingerprint is ``target``; ``text`` is message content, as a webhook's payload
    or an e-mail's body is: on the card, never in a grant.
    """

    name: str
    capability: str
    risk: RiskClass
    clock: FakeClock
    effects: list[tuple[str, dict[str, Any]]]
    description: str = "Records its call instead of sending or deleting anything."
    params: tuple[Param, ...] = (Param("target", str), Param("text", str, required=False))

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """Always the configured class."""
        return self.risk

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        """The target only."""
        return {"target": args.get("target", "")}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        """The target."""
        return (str(args.get("target", "")),)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Record the call."""
        self.effects.append((self.name, dict(args)))
        return {"ok": True}


TOOLS = {"send": ("notify_team", "test.notify", RiskClass.SEND),
         "delete": ("erase_record", "test.erase", RiskClass.DESTRUCTIVE)}


@dataclass
class Daemon:
    """A node, its API app and its clock, driven step by step (no background tasks)."""

    node: Node
    app: Any
    clock: FakeClock
    effects: list[tuple[str, dict[str, Any]]]
    clients: dict[str, httpx.AsyncClient] = field(default_factory=dict)

    def client(self, name: str) -> httpx.AsyncClient:
        """An in-process client holding ``name``'s key."""
        if name not in self.clients:
            key = ADMIN_KEY if name == "admin" else NAMED_KEYS[name]
            self.clients[name] = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.app), base_url=BASE,
                headers={"Authorization": f"Bearer {key}"})
        return self.clients[name]

    async def settle(self) -> None:
        """Run every queued task as far as it goes, then deliver the cards."""
        cfg = self.node.engine.config
        while (task := await self.node.store.claim_next(
                cfg.node_id, self.clock.now() + cfg.lease)) is not None:
            await self.node.engine.advance(task)
        await self.node.flow.dispatcher.run_once()

    async def close(self) -> None:
        """Close the clients and the store."""
        for c in self.clients.values():
            await c.aclose()
        await self.node.store.close()


async def open_daemon(work: Path, data: Mapping[str, Any]) -> Daemon:
    """Build a node from ``data`` (config sections) with the two recording tools; approved
    tasks go on inside the deciding call, as the worker would take them."""
    clock = FakeClock()
    effects: list[tuple[str, dict[str, Any]]] = []
    config = Settings.model_validate({
        "daemon": {"work_dir": str(work), "host": "127.0.0.1", "node_id": "inv-node"},
        "api": {"key": ADMIN_KEY,
                "keys": [{"name": n, "key": k} for n, k in NAMED_KEYS.items()]},
        **data})
    web = WebSurface()
    node = build_node(config, work_dir=work, surfaces={"web": web}, clock=clock)
    for name, capability, risk in TOOLS.values():
        node.engine.registry.register(RecordingTool(name, capability, risk, clock, effects))
    await node.store.open()
    ctx = api_context(config, store=node.store, engine=node.engine, decider=node.decider,
                      flow=node.flow, clock=clock, wake=lambda: None, web=web)

    async def go_on(task: Task) -> None:
        await node.engine.advance(task)

    node.decider.settler.on_runnable = go_on
    return Daemon(node=node, app=create_app(ctx), clock=clock, effects=effects)


def seen(what: str) -> None:
    """Count what the examples reach (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(what)


@dataclass(frozen=True)
class Domain:
    """What one configuration's steps draw from. A configuration that looks for one door
    draws from a narrow domain, so Hypothesis finds the way in a few examples."""

    askers: tuple[str, ...] = REQUESTERS  # who submits tasks and outside requests
    answerers: tuple[str, ...] = DECIDERS  # who answers
    kinds: tuple[str, ...] = tuple(sorted(TOOLS))
    targets: tuple[str, ...] = TARGETS
    texts: tuple[str, ...] = ("",)  # "" = the one content of a target: identical requests
    scopes: tuple[str, ...] = ("once", "session", "always", "deny")
    policies: tuple[str, ...] = POLICIES
    keys: tuple[str | None, ...] = (None,)  # Idempotency-Keys outside callers (re)use
    edits: tuple[str, ...] = ("edited", "x")  # the text of an edited approval
    picks: tuple[int, ...] = tuple(range(8))  # which card of the console's list (modulo)
    first: str | None = None  # someone whose outside request is pending from the start
    lasts: tuple[str | None, ...] = tuple(LASTS)  # "for" of session/always answers
    minutes: tuple[int, ...] = (1, 9, 31, 125)  # how far time moves in one step


class GateMachine(RuleBasedStateMachine):
    """Random traffic against one node; the ledger says what may have happened. The
    rules are attached per configuration by `machine`."""

    CONFIG: Mapping[str, Any] = {"policy": {"quorum": {"DESTRUCTIVE": 2}}}

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="signoff-inv-"))
        self.daemon = self.run(open_daemon(self.dir / "work", self.CONFIG))
        quorum = dict(self.CONFIG.get("policy", {}).get("quorum", {}))
        risks = {name: risk.value for name, _, risk in TOOLS.values()}
        forbid = bool(self.CONFIG.get("approvals", {}).get("forbid_self_approval", False))
        owner = {account: person["name"] for person in self.CONFIG.get("people", [])
                 for account in person["accounts"]}
        self.ledger = Ledger(needed=lambda tool: int(quorum.get(risks[tool], 1)),
                             fingerprint=lambda tool, args: str(args.get("target", "")),
                             self_forbidden_for_tasks=forbid,
                             person=lambda actor: owner.get(actor, actor))
        self.outside_open: set[str] = set()  # outside requests whose caller still waits
        self.finished: dict[str, list[Effect]] = {}  # tasks that ended: their effects
        self.first_seen: dict[tuple[str, int], Any] = {}
        self.open_cards = 0  # pending requests at the end of the last step

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on this machine's loop."""
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.daemon.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- what the machine asks ------------------------------------------------------------
    def content(self, target: str, text: str) -> dict[str, Any]:
        """The args of one action: with ``text`` "" the content is fixed by the target, so
        two requests of one fingerprint are identical."""
        return {"target": target, "text": text or f"about {target}"}

    def submit_task(self, asker: str, kind: str, where: str, texts: list[str]) -> None:
        """A task of one or two gated steps on one target (a second step tries a grant)."""
        tool = TOOLS[kind][0]
        steps = [{"tool": tool, "args": self.content(where, t)} for t in texts]
        answer = self.run(self.daemon.client(asker).post(
            "/tasks", json={"goal": f"{kind} {where}", "steps": steps}))
        assert answer.status_code == 202, answer.text
        task_id = answer.json()["id"]
        self.ledger.requests[task_id] = Request(
            key=task_id, kind="task", requester=f"web:{asker}", policy=task_id,
            steps=dict(enumerate(steps)))

    def ask_outside(self, asker: str, kind: str, where: str, text: str, policy: str,
                    key: str | None, editable: bool = False) -> None:
        """An outside agent asks about one action (``editable``: it runs edited args it is
        sent back); approved at once (a grant) it acts."""
        tool = TOOLS[kind][0]
        args = self.content(where, text)
        headers = {"Idempotency-Key": key} if key else {}
        answer = self.run(self.daemon.client(asker).post("/v1/approvals", headers=headers, json={
            "tool": tool, "args": args, "requester": f"agent-of-{asker}", "policy_id": policy,
            "editable": editable}))
        if answer.status_code == 422 and key:  # 0.3: a key reused for another request
            assert "was used for a different request" in answer.text, answer.text
            return
        assert answer.status_code in (200, 202), answer.text
        body = answer.json()
        request = Request(key=f"{body['id']}/{len(self.ledger.requests)}", kind="outside",
                          requester=f"web:{asker}", policy=policy,
                          steps={0: {"tool": tool, "args": args}},
                          approvals={0: {body["id"]}})
        self.ledger.requests[request.key] = request
        self.outside_open.add(request.key)

    def answer(self, who: str, pick: int, scope: str, lasts: str | None) -> None:
        """Someone answers one card as the console lists it."""
        item = self.pending(pick)
        if item is None:
            return
        body: dict[str, Any] = {"scope": scope} if scope != "deny" else {}
        if lasts and scope in ("session", "always"):
            body["for"] = lasts
        route = "deny" if scope == "deny" else "approve"
        self.decide(who, item, route, body, scope,
                    LASTS[body.get("for")], item["action"]["args"])

    def answer_edited(self, who: str, pick: int, where: str, text: str) -> None:
        """Someone approves once with args they typed (the edit is what they saw)."""
        item = self.pending(pick)
        if item is None:
            return
        args = {"target": where, "text": text}
        self.decide(who, item, "approve",
                    {"scope": "once", "args": args}, "once", None, args)

    def batch(self, who: str, picks: list[int], decision: str) -> None:
        """Someone selects several cards and approves (once) or denies them together."""
        items = [i for i in (self.pending(p) for p in picks) if i is not None]
        if not items:
            return
        answer = self.run(self.daemon.client(who).post("/approvals/batch", json={
            "ids": [i["id"] for i in items], "decision": decision}))
        assert answer.status_code == 200, answer.text
        by_id = {i["id"]: i for i in items}
        for result in answer.json()["results"]:
            if result["status"] == 200:
                self.vote(who, by_id[result["id"]], decision if decision == "once" else "deny",
                          None, by_id[result["id"]]["action"]["args"])

    def time_passes(self, minutes: int) -> None:
        """The clock moves; requests past their expiry are denied by the sweep."""
        self.daemon.clock.advance(timedelta(minutes=minutes))
        self.run(self.daemon.node.decider.expire_due())

    # -- after every step: the world catches up, then the invariant -----------------------
    @invariant()
    def every_effect_was_approved(self) -> None:
        """Every effect matches an approval shown to and given by enough other people."""
        self.run(self.daemon.settle())
        self.open_cards = len(self.listing())
        self.collect_task_effects()
        self.outside_callers_act()
        bad = self.ledger.unjustified()
        assert not bad, "an effect no person approved:\n" + self.ledger.explain(bad[0])
        for effect in self.ledger.effects:  # what the examples reach, for the statistics
            request = self.ledger.requests[effect.request]
            how = "approved" if self.ledger.shown_and_approved(effect) else "granted"
            shared = "shared card" if request.leaders else "own card"
            seen(f"effect of {request.kind} {effect.tool}: {how}, {shared}")

    # -- helpers ----------------------------------------------------------------------------
    def pending(self, pick: int) -> dict[str, Any] | None:
        """One item of the console's list right now."""
        items = self.listing()
        return items[pick % len(items)] if items else None

    def listing(self) -> list[dict[str, Any]]:
        """The console's list right now, remembering what each card showed."""
        answer = self.run(self.daemon.client("admin").get("/approvals",
                                                          params={"limit": 500}))
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        for item in items:
            self.remember(item)
        return items

    def remember(self, item: dict[str, Any]) -> None:
        """Tie a listed approval to its request (and the card it shares, if any)."""
        found = self.ledger.request_of(item["id"])
        if found is None and item["task_id"] in self.ledger.requests:
            request = self.ledger.requests[item["task_id"]]
            request.approvals.setdefault(item["step"], set()).add(item["id"])
            found = (request, item["step"])
        if found is not None and item.get("coalesced_into"):
            found[0].leaders.setdefault(item["id"], set()).add(item["coalesced_into"])

    def learn_cards(self, request: Any) -> None:
        """The task's requests the console never listed: a step asked in the middle of a
        batch can join a card that the same batch then decides, between two listings. Its
        request and the card it joined are read back from the store, so an answer on that
        card is judged against what the card showed, as for a listed member."""
        store = self.daemon.node.store
        events = self.run(store.audit_events(task_id=request.key, limit=500)).items
        for approval_id in {e.approval_id for e in events if e.approval_id}:
            if self.ledger.request_of(approval_id) is not None:
                continue
            approval = self.run(store.get_approval(approval_id))
            if approval is None or approval.task_id != request.key:
                continue
            request.approvals.setdefault(approval.step, set()).add(approval.id)
            if approval.coalesced_into:
                request.leaders.setdefault(approval.id, set()).add(approval.coalesced_into)

    def decide(self, who: str, item: dict[str, Any], route: str, body: dict[str, Any],
               scope: str, lasts: timedelta | None, shown: dict[str, Any]) -> None:
        """POST one answer; record it when the API accepted it."""
        answer = self.run(self.daemon.client(who).post(f"/approvals/{item['id']}/{route}",
                                                       json=body))
        assert answer.status_code in (200, 403, 409, 422), answer.text
        seen(f"{route} {'edited ' if 'args' in body else ''}{body.get('scope', '')} "
              f"-> {answer.status_code}")
        if answer.status_code == 200:
            self.vote(who, item, scope, lasts, shown)

    def vote(self, who: str, item: dict[str, Any], scope: str, lasts: timedelta | None,
             shown: dict[str, Any]) -> None:
        tool = item["action"]["tool"]
        self.ledger.votes.append(Vote(
            card=item["id"], actor=f"web:{who}", scope=scope, tool=tool,
            args=canonical(shown), fingerprint=self.ledger.fingerprint(tool, shown),
            at=self.daemon.clock.now(), lasts=lasts))

    def collect_task_effects(self) -> None:
        """Attribute what the recording tools ran to tasks, by each task's history; the
        history and the tools must agree (nothing ran that no task shows)."""
        effects: list[Effect] = []
        for request in self.ledger.requests.values():
            if request.kind != "task":
                continue
            if request.key in self.finished:
                effects += self.finished[request.key]
                continue
            task = self.run(self.daemon.client("admin").get(f"/tasks/{request.key}")).json()
            self.learn_cards(request)
            ran = [Effect(request=request.key, step=r["step"], tool=r["tool"],
                          args=canonical(r["args"]),
                          fingerprint=self.ledger.fingerprint(r["tool"], r["args"]),
                          # The clock moves only in `time_passes` and the world catches
                          # up right after, so the first sighting is when it ran.
                          at=self.first_seen.setdefault((request.key, r["step"]),
                                                        self.daemon.clock.now()))
                   for r in task["actions"]
                   if r["outcome"] == "ok" and r["risk"] in ("SEND", "DESTRUCTIVE")]
            if task["state"] in ("completed", "failed"):
                self.finished[request.key] = ran
            effects += ran
        ran = sorted(canonical({"t": t, "a": a}) for t, a in self.daemon.effects)
        shown = sorted(canonical({"t": e.tool, "a": json.loads(e.args)})
                       for e in effects)
        assert ran == shown, f"tools ran {ran} but the tasks show {shown}"
        outside = [e for e in self.ledger.effects if self.ledger.requests[e.request].kind
                   == "outside"]
        self.ledger.effects = effects + outside

    def outside_callers_act(self) -> None:
        """Each caller still waiting reads its request; told "approved", it acts (with the
        args it asked, or the edited args it is sent back, as an honest caller does)."""
        for key in sorted(self.outside_open):
            request = self.ledger.requests[key]
            (approval_id,) = request.approvals[0]
            told = self.run(self.daemon.client(request.requester.removeprefix("web:")).get(
                f"/v1/approvals/{approval_id}")).json()
            status = told["status"]
            if status == "pending":
                continue
            self.outside_open.discard(key)
            if status == "approved":
                asked = request.steps[0]
                args = told["args"] if told["edited"] else asked["args"]
                self.ledger.effects.append(Effect(
                    request=key, step=0, tool=asked["tool"], args=canonical(args),
                    fingerprint=self.ledger.fingerprint(asked["tool"], args),
                    at=self.daemon.clock.now()))


RULES = frozenset({"submit_task", "ask_outside", "answer", "answer_edited", "batch",
                   "time_passes"})


def step(method: Callable[..., None]) -> Callable[..., None]:
    """A fresh function for ``method`` (Hypothesis takes one @rule per function, and each
    configuration decorates the same methods with its own strategies)."""
    def call(self: GateMachine, **drawn: Any) -> None:
        method(self, **drawn)
    call.__name__, call.__doc__ = method.__name__, method.__doc__
    return call


def rules_of(d: Domain, names: frozenset[str]) -> dict[str, Any]:
    """The rules of a configuration, drawing from its domain."""
    picks = st.sampled_from(d.picks)
    has_cards = precondition(lambda self: self.open_cards > 0)
    made = {
        "submit_task": rule(asker=st.sampled_from(d.askers), kind=st.sampled_from(d.kinds),
                            where=st.sampled_from(d.targets),
                            texts=st.lists(st.sampled_from(d.texts), min_size=1,
                                           max_size=2))(step(GateMachine.submit_task)),
        "ask_outside": rule(asker=st.sampled_from(d.askers), kind=st.sampled_from(d.kinds),
                            where=st.sampled_from(d.targets), text=st.sampled_from(d.texts),
                            policy=st.sampled_from(d.policies),
                            key=st.sampled_from(d.keys), editable=st.booleans())(
                                step(GateMachine.ask_outside)),
        "answer": has_cards(rule(who=st.sampled_from(d.answerers), pick=picks,
                                 scope=st.sampled_from(d.scopes),
                                 lasts=st.sampled_from(d.lasts))(
                                     step(GateMachine.answer))),
        "answer_edited": has_cards(rule(who=st.sampled_from(d.answerers), pick=picks,
                                        where=st.sampled_from(d.targets),
                                        text=st.sampled_from(d.edits))(
                                            step(GateMachine.answer_edited))),
        "batch": has_cards(rule(who=st.sampled_from(d.answerers),
                                picks=st.lists(picks, min_size=1, max_size=3),
                                decision=st.sampled_from(("once", "deny")))(step(GateMachine.batch))),
        "time_passes": rule(minutes=st.sampled_from(d.minutes))(
            step(GateMachine.time_passes)),
    }
    chosen = {name: made[name] for name in names}
    if d.first is not None:
        chosen["first_request"] = initialize(
            asker=st.just(d.first), kind=st.sampled_from(d.kinds),
            where=st.sampled_from(d.targets), text=st.sampled_from(d.texts),
            policy=st.sampled_from(d.policies), key=st.just(None))(step(GateMachine.ask_outside))
    return chosen


def machine(name: str, *, domain: Domain = Domain(), rules: frozenset[str] = RULES,
            config: Mapping[str, Any] | None = None) -> type[RuleBasedStateMachine]:
    """A configuration of the machine, as its own class: its config sections, the domain
    its steps draw from and the rules it runs."""
    body: dict[str, Any] = rules_of(domain, rules)
    if config is not None:
        body["CONFIG"] = config
    return type(name, (GateMachine,), body)


def case(machine_class: type[RuleBasedStateMachine], behaviour: str,
         **profile: Any) -> Callable[..., Any]:
    """The pytest test case of a machine, under the suite's settings profile;
    ``behaviour`` is its one-line docstring."""
    test = machine_class.TestCase
    test.settings = settings(PROFILE, **profile)
    test.__doc__ = behaviour
    return test


# The everyday configuration: people other than the askers answer; identical requests
# coalesce; DESTRUCTIVE needs two people and is answered once or deny (a quorum's grant
# is `QuorumTimeBox`'s door below, open today; widen this once it is closed).
Everyday = machine("Everyday", config={
    "policy": {"quorum": {"DESTRUCTIVE": 2}},
    "approvals": {"scopes": {"DESTRUCTIVE": ["once", "deny"]}}})
TestGateHolds = case(Everyday, "Whatever people and callers do, in any order, nothing "
                                "runs that enough other people did not see and approve.")

# The doors issue 21 closes. Hypothesis only has to find a way through here, so these
# stop at the first failure, unshrunk; the shortest way through each is written above it.
FIND: dict[str, Any] = {"phases": [Phase.explicit, Phase.generate],
                        "report_multiple_bugs": False}
if PROFILE_NAME == "gate":
    # Each is found in a few examples (deterministically: the profile is derandomized);
    # once its fix is merged, these bound what the passing test costs.
    FIND |= {"max_examples": 12, "stateful_step_count": 8}
ONE_SEND = Domain(kinds=("send",), targets=("a",), scopes=("once",))


def closed_by(machine_class: type[RuleBasedStateMachine], behaviour: str, reason: str,
              **more: Any) -> Callable[..., Any]:
    """The test case of a configuration that once opened a door (``reason`` says which and
    how it was closed): it searches the way that door was found. ``more``: settings of
    its own."""
    return case(machine_class, behaviour, **(FIND | more))


# Two requests of one fingerprint whose content differs (a webhook's payload, an
# e-mail's body) never share a card: one answer would send the one nobody saw.
# Shortest: req1 asks notify_team {a, "x"} (policy p1); req2 asks notify_team {a, "y"}
# (it joins the card); admin approves the card once -> "y" is sent too, never shown.
NearIdentical = machine("NearIdentical", domain=replace(ONE_SEND, texts=("x", "y")),
                        rules=frozenset({"submit_task", "ask_outside", "answer", "batch"}))
TestNearIdenticalRequestsNeverShareACard = closed_by(
    NearIdentical, "Two requests that differ only in content never share a card or an answer.",
    "issue 21 hole 3: requests coalesce by fingerprint only; fixed where only identical "
    "content coalesces")

# Under a quorum the requester never counts, also when its request shares the card of
# someone else's identical request and it approves that card.
# Shortest: req1 asks erase_record {a} (needs 2); req2 asks the same (joins the card);
# req2 approves the card (1 of 2), admin approves it -> req2's own request is approved
# by one person besides req2.
RequesterVotes = machine(
    "RequesterVotes", domain=Domain(first="req1", askers=("req2", "req1"),
                                    answerers=("req2", "admin"), kinds=("delete",),
                                    targets=("a",), scopes=("once",), policies=("p1",),
                                    picks=(0,)),
    rules=frozenset({"ask_outside", "answer"}),
    config={"policy": {"quorum": {"DESTRUCTIVE": 2}},
            "approvals": {"forbid_self_approval": True}})
TestARequesterNeverCountsTowardsItsQuorum = closed_by(
    RequesterVotes, "A requester's approval of a card it shares never counts towards its "
                    "own request's quorum.",
    "issue 21 hole 7: a requester's own vote counts through a shared card; fixed where "
    "quorum counts people other than each member's requester",
    # Four steps in one order: found within 36 examples on this profile (the examples
    # drawn depend on max_examples, so a change of it must be checked to still find it).
    **({"max_examples": 36} if PROFILE_NAME == "gate" else {}))

# 0.3: an outside request is never approved by the identity that asked it, whatever
# approvals.forbid_self_approval says.
# Shortest: req1 asks notify_team {a}; req1 approves it once -> approved.
SelfApproval = machine("SelfApproval",
                       domain=replace(ONE_SEND, askers=("req1", "admin"),
                                      answerers=("req1", "admin")),
                       rules=frozenset({"ask_outside", "answer"}), config={})
TestAnOutsideRequestIsNeverApprovedByItsAsker = closed_by(
    SelfApproval, "The caller that asked an outside request can never approve it.",
    "issue 21: an outside request can be approved by its asker; fixed with key roles and "
    "[[people]]")

# An Idempotency-Key reused for a different request never hands back the first one's
# approval. (Coalescing is off here so that this door is the only one open.)
# Shortest: req1 asks notify_team {a, "x"} with key k1; admin approves it; req1 asks
# notify_team {a, "y"} with key k1 -> "approved", and the caller sends "y".
Replays = machine("Replays", domain=replace(ONE_SEND, texts=("x", "y"), keys=("k1",)),
                  rules=frozenset({"ask_outside", "answer"}),
                  config={"approvals": {"coalesce": False}})
TestAnIdempotencyKeyNeverApprovesAnotherRequest = closed_by(
    Replays, 'An Idempotency-Key reused for another request is never told "approved".',
    "issue 21 hole 4: an Idempotency-Key replays another request's approval; fixed where "
    "the key is bound to the request's digest")

# Found by this suite (not in issue 21's list): under a quorum each approver's own time
# box must hold, as the narrowest scope does; the grant takes only the completing
# approver's "for". Shortest: req1 asks erase_record {a} (needs 2); bob approves
# "always" for 10m; carol approves "always"; 31 minutes pass; req1 asks the same again
# -> approved by the grant, which bob gave for 10 minutes only.
QuorumTimeBox = machine(
    "QuorumTimeBox", domain=Domain(askers=("req1",), answerers=("bob", "carol"),
                                   kinds=("delete",), targets=("a",), scopes=("always",),
                                   policies=("p1",), picks=(0,), lasts=("10m", None),
                                   minutes=(31,)),
    rules=frozenset({"ask_outside", "answer", "time_passes"}))
TestEveryApproversTimeBoxHoldsUnderAQuorum = closed_by(
    QuorumTimeBox, "A grant made by a quorum lapses when the shortest \"for\" any approver "
                   "gave is over.",
    "found with this suite: a quorum's grant keeps only the completing approver's time box; "
    "not fixed yet",
    # Five steps in one order: found at the 24th example on this profile.
    **({"max_examples": 24} if PROFILE_NAME == "gate" else {}))

# Everything at once: anyone asks and answers (the askers too), near-identical content,
# reused Idempotency-Keys, a quorum for DESTRUCTIVE. It holds only once every fix above
# is merged; remove the mark with the last of them.
Hostile = machine("Hostile", domain=Domain(askers=(*REQUESTERS, "admin"),
                                           answerers=(*REQUESTERS, *DECIDERS),
                                           texts=("", "x", "y"), keys=(None, "k1")))
TestTheGateHoldsAgainstEveryoneAtOnce = closed_by(
    Hostile, "Against askers that answer, near-identical requests and reused keys all at "
             "once, nothing unapproved runs.",
    "issue 21 holes 3, 4, 7, self-approval of outside requests, and a quorum's time box")

# 0.3 [[people]]: a quorum counts people, not accounts, and a person cannot approve with
# one account what they asked with another. Rita asks as req1 and answers as carol; Bo
# answers as bob and as admin. (Before [[people]] exists the config itself is refused.)
People = machine("People", domain=Domain(answerers=DECIDERS, texts=("",)),
                 rules=frozenset({"submit_task", "ask_outside", "answer", "batch"}),
                 config={"policy": {"quorum": {"DESTRUCTIVE": 2}},
                         "people": [{"name": "rita", "accounts": ["web:req1", "web:carol"]},
                                    {"name": "bo", "accounts": ["web:bob", "web:admin"]}]})
TestAQuorumCountsPeopleNotAccounts = closed_by(
    People, "Two accounts of one person count once, and never for that person's request.",
    "issue 21: [[people]] maps accounts to persons; fixed with key roles and [[people]]")
