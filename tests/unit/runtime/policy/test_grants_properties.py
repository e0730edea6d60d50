"""Property-based tests of grants: one grant covers exactly one action, never more.

Every example goes the real way: the registry prepares both actions, the grant is made
from the first (as a decision makes it) and committed to a store holding other grants too,
and `Policy.evaluate` judges the second. Nothing is autonomous here, so an ALLOW can only
come from a grant.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from signoff.runtime.models import Action, RiskClass, RunMode, Scope, Task, TaskState, Verdict
from signoff.runtime.policy.grants import make_grant
from signoff.runtime.policy.policy import Policy
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change
from signoff.runtime.tools.builtin.messaging import SendEmailTool
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry

T = TypeVar("T")
WORK = Path("/srv/signoff-work")  # only used to spell paths; nothing is touched
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = Policy(autonomous_risks=frozenset())  # every action needs a grant
REGISTRY = builtin_registry(work_dir=WORK, entry_points_group=None)
CONTENT = {"send_email": ("subject", "body"), "send_webhook": ("payload",),
           "post_message": ("text",), "write_file": ("content",)}
PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to its end (each example gets a fresh loop)."""
    return asyncio.run(coro)


# --- strategies: small pools so that equal and different targets both come up often ----

texts = st.text(max_size=30)
people = st.sampled_from(["john@example.com", "John@Example.com", "mary@example.com",
                          "ops@example.org", "x@y.io"])
recipient_lists = st.lists(people, min_size=1, max_size=3)
urls = st.sampled_from(["https://hooks.example.com/a", "https://hooks.example.com/b",
                        "http://hooks.example.com/a", "https://other.example.com/a",
                        "https://hooks.example.com/a?x=1"])
paths = st.sampled_from(["a.txt", "./a.txt", "sub/../a.txt", "b.txt", "sub/a.txt",
                         "sub/b.txt", "A.txt"])
commands = st.sampled_from(["python3 safe.py", "python3  safe.py", "python3 'safe.py'",
                            "rm -rf important", "ls", "ls -la"])
cwds = st.sampled_from([None, ".", "sub", "./sub", "other"])
channels = st.sampled_from(["slack:C1", "slack:C2", "telegram:-100", "telegram:42"])


@st.composite
def calls(draw: st.DrawFn, tool: str | None = None) -> Action:
    """One raw call of a built-in tool with arbitrary content."""
    name = tool or draw(st.sampled_from(sorted(REGISTRY.names())))
    args: dict[str, Any]
    if name == "send_email":
        args = {"to": draw(recipient_lists), "subject": draw(texts.filter(_one_line)),
                "body": draw(texts)}
        cc = draw(st.none() | recipient_lists)
        if cc is not None:
            args["cc"] = cc
    elif name == "send_webhook":
        args = {"url": draw(urls), "payload": draw(st.dictionaries(texts, texts, max_size=2))}
    elif name == "http_get":
        args = {"url": draw(urls)}
    elif name == "post_message":
        args = {"channel": draw(channels), "text": draw(texts)}
    elif name == "write_file":
        args = {"path": draw(paths), "content": draw(texts)}
    elif name in ("read_file", "list_dir", "delete_file"):
        args = {"path": draw(paths)}
    else:
        args = {"command": draw(commands)}
        cwd = draw(cwds)
        if cwd is not None:
            args["cwd"] = cwd
    return Action(tool=name, args=args)


def _one_line(text: str) -> bool:
    return "\r" not in text and "\n" not in text


same_tool_pairs = st.sampled_from(sorted(REGISTRY.names())).flatmap(
    lambda name: st.tuples(calls(name), calls(name)))


def target_of(action: Action) -> tuple[Any, ...]:
    """What the contract says a grant covers, computed independently of the registry."""
    a = action.args
    if action.tool == "send_email":
        found = [a["to"]] if isinstance(a["to"], str) else list(a["to"])
        cc = a.get("cc") or []
        found += [cc] if isinstance(cc, str) else list(cc)
        return (action.tool, tuple(sorted({p.lower() for p in found})))
    if action.tool in ("send_webhook", "http_get"):
        return (action.tool, a["url"].strip())
    if action.tool == "post_message":
        return (action.tool, a["channel"])
    if action.tool == "run_command":
        return (action.tool, a["command"], posixpath.normpath(a.get("cwd") or "."))
    return (action.tool, posixpath.normpath(a["path"]))


# --- the real path ---------------------------------------------------------------------------


def _task(task_id: str = "t-one", *, schedule: str | None = None) -> Task:
    return Task(id=task_id, goal="g", state=TaskState.IN_PROGRESS, steps=[],
                schedule=schedule, mode=RunMode.SCHEDULED if schedule else RunMode.INTERACTIVE)


async def _store_with(grants: list[tuple[Task, Action, Scope]]) -> MemTaskStore:
    """A store holding grants made as decisions make them, plus unrelated ones around them."""
    store = MemTaskStore()
    noise = [REGISTRY.prepare(Action(tool="send_email", args={
        "to": f"noise{i}@example.net", "subject": "", "body": ""})) for i in range(5)]
    made = [make_grant(_task(f"t-noise{i}"), n, Scope.ALWAYS, actor="web:admin", now=NOW)
            for i, n in enumerate(noise)]
    made += [make_grant(task, action, scope, actor="web:admin", now=NOW)
             for task, action, scope in grants]
    assert await store.commit(Change(at=NOW, grants=made))
    return store


async def _verdict(grant_for: Action, candidate: Action, *, scope: Scope = Scope.SESSION,
                   registry: ToolRegistry = REGISTRY, granted_in: Task | None = None,
                   judged_in: Task | None = None) -> Verdict:
    granted_in = granted_in or _task()
    judged_in = judged_in or granted_in
    store = await _store_with([(granted_in, REGISTRY.prepare(grant_for), scope)])
    prepared = registry.prepare(candidate)
    return (await POLICY.evaluate(judged_in, prepared, store, now=NOW)).verdict


# --- properties ------------------------------------------------------------------------------


@PROPERTY
@given(same_tool_pairs)
def test_a_grant_allows_an_action_exactly_when_tool_and_target_are_the_same(
        pair: tuple[Action, Action]) -> None:
    """Same tool: ALLOW iff the targets (recipients, path, URL, channel, command + cwd) match."""
    granted, candidate = pair
    verdict = run(_verdict(granted, candidate))
    same = target_of(granted) == target_of(candidate)
    event("same target" if same else "different target")
    if same:
        assert verdict is Verdict.ALLOW
    else:
        assert verdict is Verdict.ASK_USER


@PROPERTY
@given(calls(), calls())
def test_a_grant_never_allows_another_tool(granted: Action, candidate: Action) -> None:
    """A grant for one tool never allows a call of another tool, whatever the arguments."""
    assume(granted.tool != candidate.tool)
    assert run(_verdict(granted, candidate)) is Verdict.ASK_USER


@PROPERTY
@given(calls(), st.data())
def test_changing_only_message_content_keeps_the_grant_valid(granted: Action,
                                                             data: st.DataObject) -> None:
    """Subject, body, payload, text and file content may change; the grant still applies."""
    args = dict(granted.args)
    for key in CONTENT.get(granted.tool, ()):
        args[key] = data.draw(st.dictionaries(texts, texts, max_size=2) if key == "payload"
                              else texts.filter(_one_line), label=key)
    candidate = granted.model_copy(update={"args": args})
    assert run(_verdict(granted, candidate)) is Verdict.ALLOW


@PROPERTY
@given(calls())
def test_a_grant_never_allows_the_same_call_at_a_higher_risk(granted: Action) -> None:
    """The same tool and arguments raised to a higher risk class are a different action."""
    base = REGISTRY.prepare(granted).risk
    assert base is not None
    higher = [r for r in RiskClass if r.rank > base.rank]
    assume(higher)
    for risk in higher:
        raised = granted.model_copy(update={"risk": risk})
        assert run(_verdict(granted, raised)) is Verdict.ASK_USER


class _OtherCapabilityEmail(SendEmailTool):
    capability = "email.bulk"


@PROPERTY
@given(calls("send_email"))
def test_a_grant_never_allows_the_same_call_under_another_capability(granted: Action) -> None:
    """A plugin that re-registers send_email with another capability does not inherit grants."""
    other = builtin_registry(work_dir=WORK, entry_points_group=None)
    other.register(_OtherCapabilityEmail(), replace=True)
    assert run(_verdict(granted, granted, registry=other)) is Verdict.ASK_USER


@PROPERTY
@given(calls(), st.sampled_from([Scope.ONCE, Scope.SESSION]), st.sampled_from([None, "nightly"]))
def test_a_once_or_session_grant_never_reaches_another_task(granted: Action, scope: Scope,
                                                            schedule: str | None) -> None:
    """Session (and once) grants belong to their task, even in another run of its schedule."""
    verdict = run(_verdict(granted, granted, scope=scope,
                           granted_in=_task("t-one", schedule=schedule),
                           judged_in=_task("t-two", schedule=schedule)))
    assert verdict is Verdict.ASK_USER


@PROPERTY
@given(calls(), st.sampled_from(["nightly", None]))
def test_an_always_grant_reaches_only_its_own_policy_id(granted: Action,
                                                        schedule: str | None) -> None:
    """Always: later runs of the same schedule yes; other schedules and other tasks never."""
    home = _task("t-one", schedule=schedule)
    same_policy = _task("t-later", schedule=schedule)
    other_policy = _task("t-other", schedule="weekly")
    allowed = run(_verdict(granted, granted, scope=Scope.ALWAYS, granted_in=home,
                           judged_in=same_policy))
    assert allowed is (Verdict.ALLOW if schedule else Verdict.ASK_USER)
    assert run(_verdict(granted, granted, scope=Scope.ALWAYS, granted_in=home,
                        judged_in=other_policy)) is Verdict.ASK_USER


@PROPERTY
@given(calls(), st.integers(min_value=1, max_value=5))
def test_once_never_allows_twice(granted: Action, tries: int) -> None:
    """A once grant is used up by the approved call: every later identical call asks."""

    async def scenario() -> list[Verdict]:
        task = _task()
        store = await _store_with([(task, REGISTRY.prepare(granted), Scope.ONCE)])
        prepared = REGISTRY.prepare(granted)
        return [(await POLICY.evaluate(task, prepared, store, now=NOW)).verdict for _ in range(tries)]

    assert run(scenario()) == [Verdict.ASK_USER] * tries


@PROPERTY
@given(calls())
def test_a_prohibition_beats_any_grant(granted: Action) -> None:
    """With the tool prohibited in the task, even an exact always grant gives BLOCK."""

    async def scenario() -> Verdict:
        task = _task().model_copy(update={"prohibit": [granted.tool]})
        store = await _store_with([(task, REGISTRY.prepare(granted), Scope.ALWAYS)])
        return (await POLICY.evaluate(task, REGISTRY.prepare(granted), store, now=NOW)).verdict

    assert run(scenario()) is Verdict.BLOCK
