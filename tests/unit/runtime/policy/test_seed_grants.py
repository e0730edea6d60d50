"""The seed "Approvals & grants", sentence by sentence, on real nodes.

Each test is named after the sentence it checks (../shared/seeds/approvals-and-grants.txt).
Nodes are built with `build_node` (in-memory store unless a test needs SQLite), the
RecordingSurface is the approval surface, e-mail goes to a real local SMTP server and
time only moves when a FakeClock is told to.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from signoff.adapters.terminal.surface import TerminalSurface
from signoff.cli.handle import run_once
from signoff.runtime import audit
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, RiskClass, RunMode, Scope, TaskState, Verdict
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.tools.base import Param, ToolContext
from signoff.runtime.tools.builtin.messaging import SendEmailTool
from signoff.runtime.tools.registry import builtin_registry
from signoff.testing import RecordingSurface
from tests.conftest import NodeFactory, deep_merge
from tests.factories import (
    FakeJudge,
    NoopTool,
    answer,
    audit_log,
    card_ref,
    command,
    delete,
    email,
    noop,
    post,
    read,
    start,
    webhook,
    write,
)
from tests.fakes.smtp import FakeSmtpServer

PY = shlex.quote(sys.executable)
JOHN, MARY = "john@example.com", "mary@example.com"


@pytest.fixture
def smtp() -> Iterator[FakeSmtpServer]:
    """A real SMTP server on 127.0.0.1 that records what it receives."""
    with FakeSmtpServer() as server:
        yield server


@pytest.fixture
def make(node_factory: NodeFactory, smtp: FakeSmtpServer) -> NodeFactory:
    """Nodes whose e-mail goes to the fake SMTP server; in-memory store by default."""

    async def build(overrides: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        mail = {"email": {"host": smtp.host, "port": smtp.port, "from": "agent@example.com"}}
        kwargs.setdefault("store", MemTaskStore())
        return await node_factory(deep_merge(mail, overrides or {}), **kwargs)

    return build


def sent_to(smtp: FakeSmtpServer) -> list[list[str]]:
    """The envelope recipients of every delivered message, in order."""
    return [m.recipients for m in smtp.messages]


def with_send_noop(node: Any, name: str = "notify_team") -> NoopTool:
    """Register a counting SEND tool (so a test can count runs without any network)."""
    tool = NoopTool(name=name, capability="team.notify", risk=RiskClass.SEND)
    node.registry.register(tool)
    return tool


# --- ASK_USER and the prompt ----------------------------------------------------------------


async def test_a_call_beyond_the_policy_but_not_forbidden_gets_ask_user(make: NodeFactory) -> None:
    """A SEND that is neither autonomous, granted nor prohibited is ASK_USER: the task waits."""
    node = await make()
    task = await start(node, [email(JOHN)])
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.tool == "send_email"
    events = await audit_log(node)
    assert [(e.kind, e.decision) for e in events] == [("evaluation", "ASK_USER")]


async def test_the_prompt_is_the_once_session_always_deny_gate_as_buttons(make: NodeFactory) -> None:
    """A gateway platform gets a card with the four buttons Once, Session, Always, Deny."""
    node = await make()
    task = await start(node, [email(JOHN)])
    assert task.approval is not None
    rendered = node.surfaces["recording"].rendered(card_ref(node, task.approval.id))
    assert rendered.buttons == ("Once", "Session", "Always", "Deny")


async def test_the_prompt_is_the_once_session_always_deny_gate_at_the_terminal(
        make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """`signoff handle` at a terminal asks "[o]nce / [s]ession / [a]lways / [d]eny"; "s" sends."""
    terminal = TerminalSurface(stdin=io.StringIO("s\n"), stdout=io.StringIO(), user="me")
    node = await make(surfaces={"terminal": terminal})
    task = await run_once(node, "mail john", steps=[email(JOHN)], mode=RunMode.TERMINAL,
                          terminal=terminal)
    shown = terminal.stdout.getvalue()
    assert "[o]nce / [s]ession / [a]lways / [d]eny" in shown
    assert JOHN in shown
    assert task.state is TaskState.COMPLETED and sent_to(smtp) == [[JOHN]]
    [grant] = await node.store.list_grants()
    assert (grant.scope, grant.created_by) == (Scope.SESSION, "terminal:me")


async def test_the_prompt_names_the_capability_and_the_exact_target(make: NodeFactory) -> None:
    """The card says which capability is asked for and to whom: "email.send … john@example.com"."""
    node = await make()
    task = await start(node, [email(JOHN)])
    assert task.approval is not None
    ref = card_ref(node, task.approval.id)
    card = node.surfaces["recording"].card(ref)
    assert card.capability == "email.send"
    assert card.risk == "SEND"
    assert card.targets == (JOHN,)
    assert JOHN in node.surfaces["recording"].rendered(ref).text


# --- what an approval grants -----------------------------------------------------------------


async def test_approving_never_turns_email_is_now_allowed_on(make: NodeFactory,
                                                             smtp: FakeSmtpServer) -> None:
    """After "always" for one e-mail, an e-mail to someone else still asks; one grant exists."""
    node = await make()
    task = await start(node, [email(JOHN), email(MARY)])
    _, task = await answer(node, task.id, Scope.ALWAYS)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.targets == (MARY,)
    assert sent_to(smtp) == [[JOHN]]
    grants = await node.store.list_grants()
    assert len(grants) == 1 and grants[0].tool == "send_email"


async def test_approving_never_turns_the_terminal_is_now_allowed_on(make: NodeFactory) -> None:
    """After approving one command for the session, any other command still asks."""
    node = await make()
    task = await start(node, [command(f"{PY} -c pass"), command(f"{PY} -c 'print(2)'")])
    _, task = await answer(node, task.id, Scope.SESSION)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None
    assert task.pending_action.args["command"] == f"{PY} -c 'print(2)'"


async def test_an_approval_records_a_grant_for_exactly_one_action(make: NodeFactory) -> None:
    """The grant names the approved action's tool, capability, risk class and fingerprint."""
    node = await make()
    task = await start(node, [email(JOHN)])
    pending = task.pending_action
    assert pending is not None
    await answer(node, task.id, Scope.SESSION)
    [grant] = await node.store.list_grants()
    assert (grant.tool, grant.capability, grant.risk, grant.fingerprint) == (
        "send_email", "email.send", RiskClass.SEND, pending.fingerprint)
    assert grant.task_id == task.id and grant.created_by == "recording:alice"


async def test_a_grant_needs_the_same_tool(make: NodeFactory) -> None:
    """A session grant to delete a.txt does not let another tool touch a.txt."""
    node = await make({"approvals": {"autonomous_risks": []}})
    (node.work_dir / "a.txt").write_text("x")
    task = await start(node, [delete("a.txt"), read("a.txt")])
    _, task = await answer(node, task.id, Scope.SESSION)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.tool == "read_file"


async def test_a_grant_needs_the_same_risk_class(make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """The same e-mail raised to DESTRUCTIVE by a planner is a new action and asks again."""
    node = await make()
    raised = email(JOHN).model_copy(update={"risk": RiskClass.DESTRUCTIVE})
    task = await start(node, [email(JOHN), raised])
    _, task = await answer(node, task.id, Scope.SESSION)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.risk is RiskClass.DESTRUCTIVE
    assert sent_to(smtp) == [[JOHN]]


class _BulkEmailTool(SendEmailTool):
    """send_email re-registered by a plugin under another capability."""

    capability = "email.bulk"


async def test_a_grant_needs_the_same_capability(make: NodeFactory) -> None:
    """An "always" for send_email (email.send) does not cover send_email as email.bulk."""
    node = await make({"approvals": {"cron_mode": "ask"}})
    run1 = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly")
    _, run1 = await answer(node, run1.id, Scope.ALWAYS)
    assert run1.state is TaskState.COMPLETED
    node.registry.register(_BulkEmailTool(), replace=True)
    run2 = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly")
    assert run2.state is TaskState.WAITING_APPROVAL
    assert run2.pending_action is not None and run2.pending_action.capability == "email.bulk"


@pytest.mark.parametrize(("variant", "cwd", "asks"), [
    ("{py} -c pass", None, False),  # the very same command
    ("{py} -c pass", "./", False),  # the same working directory, spelled differently
    ("{py} -c pass", "sub", True),  # another working directory
    ("{py}  -c pass", None, True),  # another string, even if a shell would not care
    ("{py} -c 'pass'", None, True),
])
async def test_for_terminal_the_fingerprint_is_the_exact_command_and_working_directory(
        make: NodeFactory, variant: str, cwd: str | None, asks: bool) -> None:
    """A session grant for a command covers only that exact string in that directory."""
    node = await make()
    (node.work_dir / "sub").mkdir()
    again = command(variant.format(py=PY), cwd=cwd)
    task = await start(node, [command(f"{PY} -c pass"), again])
    _, task = await answer(node, task.id, Scope.SESSION)
    assert (task.state is TaskState.WAITING_APPROVAL) is asks
    if not asks:
        assert task.state is TaskState.COMPLETED


class _ExactTextTool:
    """A plugin whose fingerprint is one exact text argument (execute_code, browser_console)."""

    capability = "code.exec"
    description = "Runs code (test plugin)."

    def __init__(self, name: str, arg: str) -> None:
        self.name = name
        self.arg = arg
        self.params = (Param(arg, str),)
        self.ran: list[str] = []

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.DESTRUCTIVE

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {self.arg: args[self.arg]}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (args[self.arg],)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        self.ran.append(args[self.arg])
        return {}


@pytest.mark.parametrize(("tool", "arg"), [("execute_code", "code"),
                                           ("browser_console", "expression")])
async def test_for_execute_code_and_browser_console_the_fingerprint_is_the_exact_code_or_expression(
        make: NodeFactory, tool: str, arg: str) -> None:
    """A plugin fingerprinting its exact code/expression gets grants for exactly that text."""
    node = await make()
    plugin = _ExactTextTool(tool, arg)
    node.registry.register(plugin)
    same, other = "print(1)", "print(1) "
    steps = [Action(tool=tool, args={arg: same}), Action(tool=tool, args={arg: same}),
             Action(tool=tool, args={arg: other})]
    task = await start(node, steps)
    _, task = await answer(node, task.id, Scope.SESSION)
    assert plugin.ran == [same, same]
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.args == {arg: other}


def test_for_other_tools_the_fingerprint_is_every_argument_except_message_content(
        tmp_path: Path) -> None:
    """Content (subject, body, payload, text, content) never changes a fingerprint; targets do."""
    registry = builtin_registry(work_dir=tmp_path, entry_points_group=None)

    def fp(action: Action) -> str | None:
        return registry.prepare(action).fingerprint

    assert fp(email(JOHN, subject="a", body="b")) == fp(email(JOHN, subject="c", body="d"))
    assert fp(email(JOHN)) != fp(email(JOHN, cc=MARY))
    assert fp(webhook("https://h.example/x", {"a": 1})) == fp(webhook("https://h.example/x", {"b": 2}))
    assert fp(webhook("https://h.example/x")) != fp(webhook("https://h.example/y"))
    assert fp(post("slack:C1", "hi")) == fp(post("slack:C1", "bye"))
    assert fp(post("slack:C1")) != fp(post("slack:C2"))
    assert fp(write("a.txt", "one")) == fp(write("a.txt", "two"))
    assert fp(write("a.txt")) != fp(write("b.txt"))

    class Everything(NoopTool):
        def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
            return dict(args)  # a careless plugin: every argument, content included

    registry.register(Everything(name="everything", risk=RiskClass.SEND))
    same_target = [Action(tool="everything", args={"target": "t", "text": text})
                   for text in ("one", "two")]
    assert fp(same_target[0]) == fp(same_target[1])
    assert fp(Action(tool="everything", args={"target": "u"})) != fp(same_target[0])


@pytest.mark.parametrize(("scope", "max_calls"), [(Scope.ONCE, 1), (Scope.SESSION, None),
                                                  (Scope.ALWAYS, None)])
async def test_max_calls_is_one_for_once_and_repeatable_for_session_and_always(
        make: NodeFactory, scope: Scope, max_calls: int | None) -> None:
    """once → max_calls 1 (used up by the call itself); session/always → no limit."""
    node = await make()
    with_send_noop(node)
    task = await start(node, [noop("x", tool="notify_team")])
    await answer(node, task.id, scope)
    [grant] = await node.store.list_grants(include_revoked=True)
    assert grant.max_calls == max_calls
    assert grant.used == 1
    assert grant.live is (scope is not Scope.ONCE)


@pytest.mark.parametrize("scope", [Scope.ONCE, Scope.SESSION])
async def test_approving_python_safe_py_once_or_for_the_session_never_approves_rm_rf(
        make: NodeFactory, scope: Scope) -> None:
    """`python safe.py` approved once or for the session leaves `rm -rf …` waiting; then denied."""
    node = await make()
    (node.work_dir / "safe.py").write_text("pass\n")
    (node.work_dir / "important").mkdir()
    (node.work_dir / "important" / "keep.txt").write_text("keep")
    task = await start(node, [command(f"{PY} safe.py"), command("rm -rf important")])
    _, task = await answer(node, task.id, scope)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None
    assert task.pending_action.args["command"] == "rm -rf important"
    _, task = await answer(node, task.id, Scope.DENY)
    assert task.state is TaskState.FAILED
    assert (node.work_dir / "important" / "keep.txt").exists()


async def test_approving_an_email_to_john_covers_another_email_to_john_but_not_one_to_anyone_else(
        make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """Session on an e-mail to John sends a second one to John (new body) but asks for Mary."""
    node = await make()
    steps = [email(JOHN, subject="Report", body="first"),
             email("John <John@Example.com>", subject="Other subject", body="second"),
             email(MARY, body="third")]
    task = await start(node, steps)
    _, task = await answer(node, task.id, Scope.SESSION)
    assert sent_to(smtp) == [[JOHN], [JOHN]]
    assert [m.body.strip() for m in smtp.messages] == ["first", "second"]
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.targets == (MARY,)


class _PatchTool:
    """apply_patch as a plugin would write it: files when parseable, else the exact text."""

    name = "apply_patch"
    capability = "fs.patch"
    description = "Apply a unified diff (test plugin)."
    params = (Param("patch", str),)

    def __init__(self) -> None:
        self.applied: list[str] = []

    @staticmethod
    def _files(patch: str) -> list[str]:
        return sorted(line[6:] for line in patch.splitlines() if line.startswith("+++ b/"))

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.DESTRUCTIVE

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        files = self._files(args["patch"])
        return {"files": files} if files else {"patch": args["patch"]}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return tuple(self._files(args["patch"])) or ("<unparsed patch>",)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        self.applied.append(args["patch"])
        return {}


async def test_a_patch_whose_files_cant_be_parsed_is_approved_only_for_that_exact_patch_text(
        make: NodeFactory) -> None:
    """A session grant for an unparseable patch covers that exact text and no other text."""
    node = await make()
    plugin = _PatchTool()
    node.registry.register(plugin)
    garbage, other = "??? not a diff", "??? not a diff either"
    steps = [Action(tool="apply_patch", args={"patch": p}) for p in (garbage, garbage, other)]
    task = await start(node, steps)
    _, task = await answer(node, task.id, Scope.SESSION)
    assert plugin.applied == [garbage, garbage]
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.args["patch"] == other


# --- budgets ---------------------------------------------------------------------------------


async def test_while_you_decide_the_calls_budget_is_reserved(make: NodeFactory,
                                                             smtp: FakeSmtpServer) -> None:
    """With email.send = 1, a pending request holds the unit: nothing else may send meanwhile."""
    node = await make({"policy": {"budgets": {"email.send": 1}}})
    task = await start(node, [email(JOHN), email(JOHN, body="again")])
    assert task.state is TaskState.WAITING_APPROVAL
    waiting = await node.store.get_task(task.id)
    assert waiting is not None
    other = node.registry.prepare(email(MARY))
    ev = await node.engine.policy.evaluate(waiting, other, node.store, now=node.clock.now())
    assert ev.verdict is Verdict.BLOCK and "budget" in ev.reason
    # Approving spends the reserved unit; the session grant cannot slip past the cap.
    _, task = await answer(node, task.id, Scope.SESSION)
    assert sent_to(smtp) == [[JOHN]]
    assert task.state is TaskState.FAILED
    assert "budget" in task.result["reason"]


@pytest.mark.parametrize("how", ["deny", "timeout"])
async def test_denying_releases_the_budget(make: NodeFactory, how: str) -> None:
    """After a deny (or a timeout) the reserved unit is free again."""
    clock = FakeClock()
    node = await make({"policy": {"budgets": {"email.send": 1}}}, clock=clock)
    task = await start(node, [email(JOHN)])
    other = node.registry.prepare(email(MARY))
    waiting = await node.store.get_task(task.id)
    assert waiting is not None
    assert (await node.engine.policy.evaluate(waiting, other, node.store, now=node.clock.now())).verdict is Verdict.BLOCK
    if how == "deny":
        await answer(node, task.id, Scope.DENY)
    else:
        clock.advance(node.engine.config.approval_timeout)
        assert len(await node.decider.expire_due()) == 1
    after = await node.store.get_task(task.id)
    assert after is not None and after.state is TaskState.FAILED
    assert node.engine.policy.budget_left(after, other) == 1
    assert (await node.engine.policy.evaluate(after, other, node.store, now=node.clock.now())).verdict is Verdict.ASK_USER


# --- the answers -----------------------------------------------------------------------------


async def test_once_runs_this_call_and_the_grant_is_used_up(make: NodeFactory) -> None:
    """Once: the call runs; the very same call again asks again."""
    node = await make()
    tool = with_send_noop(node)
    task = await start(node, [noop("x", tool="notify_team"), noop("x", tool="notify_team")])
    _, task = await answer(node, task.id, Scope.ONCE)
    assert tool.runs == 1
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.step_index == 1


@pytest.mark.parametrize("scope", [Scope.SESSION, Scope.ALWAYS])
async def test_session_or_always_allows_this_exact_action_for_the_rest_of_the_task(
        make: NodeFactory, scope: Scope) -> None:
    """Session/always: the same tool and target run for the rest of the task; a new target asks."""
    node = await make()
    tool = with_send_noop(node)
    steps = [noop("x", tool="notify_team", text=str(i)) for i in range(3)]
    task = await start(node, [*steps, noop("y", tool="notify_team")])
    platform = node.surfaces["recording"]
    _, task = await answer(node, task.id, scope)
    assert tool.runs == 3
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.targets == ("y",)
    assert len(platform.messages) == 2  # one card for x, one for y


@pytest.mark.parametrize(("how", "reason", "outcome"), [
    ("deny", "user denied", "denied"),
    ("deny:not now", "user denied: not now", "denied"),
    ("timeout", "approval timed out", "timed_out"),
])
async def test_deny_or_timeout_blocks_and_the_model_is_told_you_did_not_consent(
        make: NodeFactory, how: str, reason: str, outcome: str) -> None:
    """Deny or timeout: the action never runs, the task fails and its result says why."""
    clock = FakeClock()
    node = await make(clock=clock)
    tool = with_send_noop(node)
    task = await start(node, [noop("x", tool="notify_team")])
    if how == "timeout":
        clock.advance(node.engine.config.approval_timeout)
        await node.decider.expire_due()
        await node.flow.dispatcher.run_once()
        after = await node.store.get_task(task.id)
    else:
        _, after = await answer(node, task.id, Scope.DENY, reason=how.partition(":")[2] or None)
    assert after is not None
    assert tool.runs == 0
    assert after.state is TaskState.FAILED
    assert after.result == {"reason": reason, "step": 0}
    assert after.actions[-1].outcome == outcome
    assert await node.store.list_grants(include_revoked=True) == []
    assert task.approval is not None
    card = node.surfaces["recording"].card(card_ref(node, task.approval.id))
    assert not card.open


# --- scoping "always" ------------------------------------------------------------------------


def _expected_key(policy_id: str, action: Action) -> str:
    body = {"tool": action.tool, "capability": action.capability,
            "rule": f"ask:{action.risk.value if action.risk else ''}",
            "fingerprint": action.fingerprint}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"signoff:{policy_id}:{hashlib.sha256(text.encode()).hexdigest()}"


@pytest.mark.parametrize("schedule", [None, "nightly"])
async def test_the_grant_key_is_signoff_policy_id_hash(make: NodeFactory,
                                                       schedule: str | None) -> None:
    """An always grant is stored under signoff:<policy_id>:<sha256(tool, capability, rule, fp)>."""
    node = await make({"approvals": {"cron_mode": "ask"}})
    mode = RunMode.SCHEDULED if schedule else RunMode.INTERACTIVE
    task = await start(node, [email(JOHN)], mode=mode, schedule=schedule)
    pending = task.pending_action
    assert pending is not None
    await answer(node, task.id, Scope.ALWAYS)
    [grant] = await node.store.list_grants()
    policy_id = schedule or task.id
    assert re.fullmatch(rf"signoff:{re.escape(policy_id)}:[0-9a-f]{{64}}", grant.key)
    assert grant.key == _expected_key(policy_id, pending)
    assert grant.policy_id == policy_id


async def test_always_can_only_reapprove_the_same_action_in_the_same_policy(
        make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """Always for John's e-mail: John again runs in this task; Mary, and a future task, ask."""
    node = await make()
    task = await start(node, [email(JOHN), email(JOHN, body="again"), email(MARY)])
    _, task = await answer(node, task.id, Scope.ALWAYS)
    assert sent_to(smtp) == [[JOHN], [JOHN]]
    assert task.pending_action is not None and task.pending_action.targets == (MARY,)
    future = await start(node, [email(JOHN)])
    assert future.state is TaskState.WAITING_APPROVAL


@pytest.mark.parametrize("other", ["command", "recipient", "tool", "future task"])
async def test_always_cannot_carry_over_to_other_commands_recipients_tools_or_future_tasks(
        make: NodeFactory, other: str) -> None:
    """Always on one action never lets another command, recipient, tool or task through."""
    # A Slack surface too: post_message to a surface that is not there is refused at once.
    node = await make(surfaces={"recording": RecordingSurface(),
                                 "slack": RecordingSurface(name="slack")})
    first = {"command": command(f"{PY} -c pass"), "recipient": email(JOHN),
             "tool": email(JOHN), "future task": email(JOHN)}[other]
    second = {"command": command(f"{PY} -c 'pass;'"), "recipient": email(MARY),
              "tool": post("slack:C1"), "future task": email(JOHN)}[other]
    if other == "future task":
        task = await start(node, [first])
        await answer(node, task.id, Scope.ALWAYS)
        task = await start(node, [second])
    else:
        task = await start(node, [first, second])
        _, task = await answer(node, task.id, Scope.ALWAYS)
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.tool == second.tool


async def test_always_carries_to_later_runs_of_the_same_schedule_and_nowhere_else(
        make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """For scheduled goals policy_id is the schedule: later runs of it reuse "always", others ask."""
    node = await make({"approvals": {"cron_mode": "ask"}})
    run1 = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly")
    await answer(node, run1.id, Scope.ALWAYS)
    run2 = await start(node, [email(JOHN, body="tonight")], mode=RunMode.SCHEDULED,
                       schedule="nightly")
    assert run2.state is TaskState.COMPLETED
    assert sent_to(smtp) == [[JOHN], [JOHN]]
    weekly = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="weekly")
    interactive = await start(node, [email(JOHN)])
    assert weekly.state is TaskState.WAITING_APPROVAL
    assert interactive.state is TaskState.WAITING_APPROVAL


# --- prohibitions ----------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "entry"), [
    ("task", "SEND"), ("task", "send"), ("task", "send_email"), ("task", "email.send"),
    ("policy", "SEND"), ("policy", "email.send"),
])
async def test_prohibitions_beat_approvals(make: NodeFactory, smtp: FakeSmtpServer,
                                           where: str, entry: str) -> None:
    """"Don't send anything": sends are BLOCK, not ASK_USER, even with an "always" on file."""
    overrides: dict[str, Any] = {"approvals": {"cron_mode": "ask"}}
    if where == "policy":
        overrides["policy"] = {"prohibit": [entry]}
    node = await make(overrides)
    prohibit = [entry] if where == "task" else []
    if where == "task":  # an "always" from an earlier run that would otherwise allow it
        run1 = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly")
        await answer(node, run1.id, Scope.ALWAYS)
        assert await node.store.list_grants()
    before = len(smtp.messages)
    task = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly",
                       prohibit=prohibit)
    assert task.state is TaskState.FAILED
    assert task.result is not None and task.result["reason"].startswith("blocked: prohibited")
    assert task.approval is None and task.pending_action is None
    assert (await node.store.pending_approvals()).items == []
    assert len(smtp.messages) == before
    last = (await audit_log(node))[-1]
    assert (last.kind, last.decision) == ("evaluation", "BLOCK")


async def test_a_newer_explicit_instruction_replaces_the_older_one(
        make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """"Don't send anything", then "actually, email it to john@example.com".

    signoff has no chat thread that edits a running task's instructions: a newer
    instruction is a new task. So the older task (with the prohibition) is blocked, and
    the newer one, submitted without it, asks and sends once approved.
    """
    node = await make()
    older = await start(node, [email(JOHN)], goal="summarize the report, don't send anything",
                        prohibit=["SEND"])
    assert older.state is TaskState.FAILED
    newer = await start(node, [email(JOHN)], goal="actually, email it to john@example.com")
    assert newer.state is TaskState.WAITING_APPROVAL
    _, newer = await answer(node, newer.id, Scope.ONCE)
    assert newer.state is TaskState.COMPLETED
    assert sent_to(smtp) == [[JOHN]]


# --- when nobody can answer ------------------------------------------------------------------


async def test_non_interactive_runs_fail_closed(make: NodeFactory, smtp: FakeSmtpServer) -> None:
    """Non-interactive: ASK_USER becomes a block; no card, no mail, the task fails "blocked: …"."""
    node = await make()
    task = await start(node, [write("draft.txt", "ok"), email(JOHN)],
                       mode=RunMode.NON_INTERACTIVE)
    assert task.state is TaskState.FAILED
    assert task.result is not None and task.result["reason"].startswith("blocked:")
    assert (node.work_dir / "draft.txt").read_text() == "ok"  # autonomous work still ran
    assert smtp.messages == [] and node.surfaces["recording"].messages == {}
    last = (await audit_log(node))[-1]
    assert (last.decision, last.actor) == ("BLOCK", "auto:non_interactive")


@pytest.mark.parametrize("flags", [["--non-interactive"], []])
def test_signoff_handle_without_anyone_to_answer_fails_closed(tmp_path: Path,
                                                              flags: list[str]) -> None:
    """`signoff handle` with --non-interactive, or with no terminal on stdin, blocks and exits 3."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "victim.txt").write_text("keep me")
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"tool": "delete_file", "args": {"path": "victim.txt"}}]))
    proc = subprocess.run(
        [sys.executable, "-m", "signoff", "handle", "tidy up", "--steps", str(steps),
         "--work-dir", str(work), *flags],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "blocked" in proc.stdout
    assert (work / "victim.txt").read_text() == "keep me"


@pytest.mark.parametrize(("default", "own", "expected"), [
    (None, None, "blocked"),  # approvals.cron_mode defaults to deny
    ("deny", None, "blocked"),
    ("approve", None, "sent"),
    ("ask", None, "waiting"),
    ("deny", "approve", "sent"),  # a schedule's own cron_mode overrides the default
    ("approve", "deny", "blocked"),
    ("deny", "ask", "waiting"),
])
async def test_cron_jobs_follow_cron_mode(make: NodeFactory, smtp: FakeSmtpServer,
                                          default: str | None, own: str | None,
                                          expected: str) -> None:
    """A scheduled run's ASK_USER follows cron_mode: deny → block, approve → auto, ask → wait."""
    node = await make({"approvals": {"cron_mode": default}} if default else {})
    task = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly",
                       cron_mode=own)
    state = {"blocked": TaskState.FAILED, "sent": TaskState.COMPLETED,
             "waiting": TaskState.WAITING_APPROVAL}[expected]
    assert task.state is state
    assert len(smtp.messages) == (1 if expected == "sent" else 0)
    assert (len(node.surfaces["recording"].messages) == 1) is (expected == "waiting")


async def _remembered_always(node: Any) -> None:
    """Give schedule "nightly" an "always" for the e-mail to John (from an earlier run)."""
    run1 = await start(node, [email(JOHN)], mode=RunMode.SCHEDULED, schedule="nightly",
                       cron_mode="ask")
    await answer(node, run1.id, Scope.ALWAYS)


AUTO_MODES = {
    "yolo": ({}, {"mode": RunMode.YOLO}, "auto:yolo"),
    "mode off": ({"approvals": {"mode": "off"}}, {}, "auto:mode_off"),
    "cron approve": ({"approvals": {"cron_mode": "approve"}},
                     {"mode": RunMode.SCHEDULED, "schedule": "nightly"}, "auto:cron_mode"),
    "remembered always": ({}, {"mode": RunMode.SCHEDULED, "schedule": "nightly",
                               "cron_mode": "deny"}, "auto:grant"),
}


@pytest.mark.parametrize("case", list(AUTO_MODES))
async def test_yolo_mode_off_and_cron_approve_auto_approve_ask_user(
        make: NodeFactory, smtp: FakeSmtpServer, case: str) -> None:
    """--yolo, mode off, cron_mode approve or a remembered "always": the e-mail goes, unasked."""
    overrides, submit, actor = AUTO_MODES[case]
    node = await make(overrides)
    if case == "remembered always":
        await _remembered_always(node)
    before = len(node.surfaces["recording"].messages)
    task = await start(node, [email(JOHN, body="now")], **submit)
    assert task.state is TaskState.COMPLETED
    assert smtp.messages[-1].body.strip() == "now"
    assert len(node.surfaces["recording"].messages) == before  # nobody was asked
    assert task.actions[-1].decided_by == actor


@pytest.mark.parametrize("case", [*AUTO_MODES, "smart approve"])
async def test_block_is_never_affected(make: NodeFactory, smtp: FakeSmtpServer,
                                       case: str) -> None:
    """A prohibited action stays BLOCK under every automatic approval, smart mode included."""
    if case == "smart approve":
        async with FakeJudge("APPROVE") as judge:
            node = await make({"approvals": {"mode": "smart"},
                               "planner": {"base_url": judge.base_url, "model": "judge"}})
            task = await start(node, [email(JOHN)], prohibit=["SEND"])
            assert judge.requests == []
    else:
        overrides, submit, _ = AUTO_MODES[case]
        node = await make(overrides)
        if case == "remembered always":
            await _remembered_always(node)
        before = len(smtp.messages)
        task = await start(node, [email(JOHN)], prohibit=["email.send"], **submit)
        assert len(smtp.messages) == before
    assert task.state is TaskState.FAILED
    assert task.result is not None and task.result["reason"].startswith("blocked: prohibited")


@pytest.mark.parametrize(("overrides", "mode", "actor"), [
    ({}, RunMode.YOLO, "auto:yolo"),
    ({"approvals": {"mode": "off"}}, RunMode.INTERACTIVE, "auto:mode_off"),
])
async def test_strict_yolo_turns_ask_user_into_block(make: NodeFactory, smtp: FakeSmtpServer,
                                                     overrides: dict[str, Any], mode: RunMode,
                                                     actor: str) -> None:
    """evaluation.strict_yolo: under --yolo or mode off, ASK_USER becomes BLOCK, READ still runs."""
    node = await make(deep_merge(overrides, {"evaluation": {"strict_yolo": True}}))
    task = await start(node, [write("draft.txt", "ok"), email(JOHN)], mode=mode)
    assert task.state is TaskState.FAILED
    assert task.result is not None and "strict_yolo" in task.result["reason"]
    assert (node.work_dir / "draft.txt").exists()
    assert smtp.messages == []
    last = (await audit_log(node))[-1]
    assert (last.decision, last.actor) == ("BLOCK", actor)


# --- smart approval --------------------------------------------------------------------------


async def test_smart_approval_never_creates_a_grant(make: NodeFactory) -> None:
    """The judge's APPROVE runs one action; the same action again goes back to the judge."""
    async with FakeJudge("APPROVE") as judge:
        node = await make({"approvals": {"mode": "smart"},
                           "planner": {"base_url": judge.base_url, "model": "judge"}})
        tool = with_send_noop(node)
        task = await start(node, [noop("x", tool="notify_team"), noop("x", tool="notify_team")])
    assert task.state is TaskState.COMPLETED
    assert tool.runs == 2
    assert len(judge.requests) == 2
    assert await node.store.list_grants(include_revoked=True) == []
    actors = [e.actor for e in await audit_log(node) if e.kind == "decision"]
    assert actors == ["auto:smart", "auto:smart"]


# --- the audit log ---------------------------------------------------------------------------


AUDIT_CASES = ["once", "session", "always", "deny", "timeout", "yolo", "mode off",
               "cron approve", "smart", "remembered always", "session reuse"]


@pytest.mark.parametrize("case", AUDIT_CASES)
async def test_every_approval_including_auto_approvals_is_recorded_in_the_audit_log(
        make: NodeFactory, tmp_path: Path, case: str) -> None:
    """Human, automatic, timed-out and grant-based approvals each leave one audit event."""
    clock = FakeClock()
    async with FakeJudge("APPROVE") as judge:
        overrides: dict[str, Any] = {"planner": {"base_url": judge.base_url, "model": "j"}}
        submit: dict[str, Any] = {}
        if case in AUTO_MODES:
            extra, submit, _ = AUTO_MODES[case]
            overrides = deep_merge(overrides, extra)
        if case == "smart":
            overrides["approvals"] = {"mode": "smart"}
        node = await make(overrides, clock=clock, store=None)  # a SQLite file
        with_send_noop(node)
        if case == "remembered always":
            run1 = await start(node, [noop("x", tool="notify_team")], mode=RunMode.SCHEDULED,
                               schedule="nightly", cron_mode="ask")
            await answer(node, run1.id, Scope.ALWAYS)
        steps = [noop("x", tool="notify_team")] * (2 if case == "session reuse" else 1)
        task = await start(node, steps, **submit)
        if case in ("once", "session", "always", "deny"):
            await answer(node, task.id, Scope(case))
        elif case == "session reuse":
            await answer(node, task.id, Scope.SESSION)
        elif case == "timeout":
            clock.advance(node.engine.config.approval_timeout)
            await node.decider.expire_due()
    events = [e for e in await audit_log(node) if e.task_id == task.id]
    expected = {
        "once": ("decision", "approve", "recording:alice", "once"),
        "session": ("decision", "approve", "recording:alice", "session"),
        "always": ("decision", "approve", "recording:alice", "always"),
        "deny": ("decision", "deny", "recording:alice", "deny"),
        "timeout": ("expired", "deny", "auto:timeout", "deny"),
        "yolo": ("decision", "approve", "auto:yolo", "once"),
        "mode off": ("decision", "approve", "auto:mode_off", "once"),
        "cron approve": ("decision", "approve", "auto:cron_mode", "once"),
        "smart": ("decision", "approve", "auto:smart", "once"),
        "remembered always": ("evaluation", "ALLOW", "auto:grant", None),
        "session reuse": ("evaluation", "ALLOW", "auto:grant", None),
    }[case]
    found = [(e.kind, e.decision, e.actor, e.scope) for e in events]
    assert found.count(expected) == 1, found
    event = next(e for e in events if (e.kind, e.decision, e.actor, e.scope) == expected)
    assert event.tool == "notify_team" and event.targets == ["x"]
    assert event.risk == "SEND" and event.fingerprint
    if expected[2] == "recording:alice":
        assert event.channel == "recording" and event.latency_ms is not None
    assert (await audit.verify(node.store)).ok

