"""Policy evaluation order, prohibitions, budgets, grant keys and unattended resolution.

Issue 3: prohibitions → BLOCK; a spent budget → BLOCK; autonomous risk classes → ALLOW;
a live grant for this exact fingerprint → ALLOW; else ASK_USER. Then the run context
decides what ASK_USER becomes; BLOCK is never overridden.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from signoff.runtime.models import (
    Action,
    ActionRecord,
    RiskClass,
    RunMode,
    Scope,
    Task,
    Verdict,
)
from signoff.runtime.policy.grants import grant_key, make_grant, rule_for
from signoff.runtime.policy.policy import Policy
from signoff.runtime.policy.unattended import Unattended, resolve_unattended
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change
from signoff.runtime.tools.registry import builtin_registry
from tests.factories import command, delete, email, read, task, webhook, write

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REGISTRY = builtin_registry(work_dir=Path("/srv/work"), read_only_commands=["ls"],
                            entry_points_group=None)


def prepared(action: Action) -> Action:
    """The action as the registry labels it."""
    return REGISTRY.prepare(action)


async def evaluate(policy: Policy, action: Action, t: Task | None = None,
                   store: MemTaskStore | None = None) -> tuple[Verdict, str]:
    """(verdict, reason) of one prepared action."""
    ev = await policy.evaluate(t or task(), prepared(action), store or MemTaskStore(), now=NOW)
    return ev.verdict, ev.reason


async def granted_store(t: Task, action: Action, scope: Scope = Scope.SESSION) -> MemTaskStore:
    """A store holding the grant a decision on ``action`` would create."""
    store = MemTaskStore()
    grant = make_grant(t, prepared(action), scope, actor="web:admin", now=NOW)
    assert await store.commit(Change(at=NOW, grants=[grant]))
    return store


# --- the order ---------------------------------------------------------------------------------


async def test_a_task_prohibition_is_named_before_the_policy_one() -> None:
    """When both forbid an action, the task's own prohibition is the reason given."""
    policy = Policy(prohibit=("send_email",))
    verdict, reason = await evaluate(policy, email(), task(prohibit=["SEND"]))
    assert verdict is Verdict.BLOCK and reason == "prohibited by the task (SEND)"


async def test_a_policy_prohibition_blocks_every_task() -> None:
    """policy.prohibit applies to tasks that prohibit nothing themselves."""
    verdict, reason = await evaluate(Policy(prohibit=("exec.shell",)), command("ls -la"))
    assert verdict is Verdict.BLOCK and reason == "prohibited by policy (exec.shell)"


async def test_a_prohibition_blocks_even_autonomous_risk_classes() -> None:
    """Prohibiting READ blocks a read that would otherwise run unattended."""
    verdict, _ = await evaluate(Policy(), read("a.txt"), task(prohibit=["read"]))
    assert verdict is Verdict.BLOCK


@pytest.mark.parametrize("entry", ["SEND", "send", " Send ", "send_webhook", "net.post"])
async def test_a_prohibition_names_a_risk_class_a_tool_or_a_capability(entry: str) -> None:
    """Risk classes in any case, exact tool names and exact capabilities all prohibit."""
    verdict, _ = await evaluate(Policy(), webhook(), task(prohibit=[entry]))
    assert verdict is Verdict.BLOCK


@pytest.mark.parametrize("entry", ["", "  ", "DESTRUCTIVE", "send_email", "net", "net.*",
                                   "Send_Webhook"])
async def test_other_entries_do_not_prohibit(entry: str) -> None:
    """Blank entries, other classes, other tools and partial names prohibit nothing."""
    verdict, _ = await evaluate(Policy(), webhook(), task(prohibit=[entry]))
    assert verdict is Verdict.ASK_USER


async def test_a_spent_budget_blocks_before_autonomy_and_grants() -> None:
    """With fs.write = 1 used up, a DRAFT write (normally autonomous) is blocked."""
    done = ActionRecord(step=0, tool="write_file", capability="fs.write", decision="allow",
                        outcome="ok")
    verdict, reason = await evaluate(Policy(budgets={"fs.write": 1}), write("b.txt"),
                                     task(actions=[done]))
    assert verdict is Verdict.BLOCK and reason == "budget for fs.write used up (1 per task)"


async def test_a_budget_blocks_even_a_granted_action() -> None:
    """A session grant does not lift the budget: once spent, the exact action is blocked."""
    t = task(actions=[ActionRecord(step=0, tool="send_email", capability="email.send",
                                   decision="approved:session", outcome="ok")])
    store = await granted_store(t, email())
    verdict, _ = await evaluate(Policy(budgets={"email.send": 1}), email(), t, store)
    assert verdict is Verdict.BLOCK


def test_every_call_that_ran_uses_the_budget_failed_ones_too() -> None:
    """A call whose tool ran counts, whether it succeeded or failed (a failed call may
    have had its effect); denied, blocked and timed-out calls, a call its check refused
    before it ran, and other capabilities leave the budget alone."""
    records = [ActionRecord(step=i, tool="send_email", capability="email.send",
                            decision=decision, outcome=outcome)
               for i, (decision, outcome) in enumerate([
                   ("allow", "ok"), ("approved:once", "error"), ("denied", "denied"),
                   ("block", "blocked"), ("timed_out", "timed_out"), ("block", "error")])]
    records.append(ActionRecord(step=9, tool="post_message", capability="chat.post",
                                decision="x", outcome="ok"))
    policy = Policy(budgets={"email.send": 3})
    assert policy.budget_left(task(actions=records), prepared(email())) == 1


def test_a_pending_request_reserves_one_unit_of_its_own_capability_only() -> None:
    """The pending action holds a unit of its capability, not of others."""
    policy = Policy(budgets={"email.send": 2, "chat.post": 2})
    waiting = task(pending_action=prepared(email()))
    assert policy.budget_left(waiting, prepared(email("mary@example.com"))) == 1
    post = prepared(Action(tool="post_message", args={"channel": "slack:C1", "text": "x"}))
    assert policy.budget_left(waiting, post) == 2
    assert policy.budget_left(waiting, prepared(webhook())) is None  # no budget: no limit


@pytest.mark.parametrize(("action", "verdict"), [
    (read("a.txt"), Verdict.ALLOW), (write("a.txt"), Verdict.ALLOW),
    (command("ls"), Verdict.ALLOW),  # listed in read_only_commands: READ
    (command("ls -l"), Verdict.ASK_USER), (email(), Verdict.ASK_USER),
    (delete("a.txt"), Verdict.ASK_USER),
])
async def test_autonomous_risk_classes_are_allowed_the_rest_asks(action: Action,
                                                                 verdict: Verdict) -> None:
    """READ and DRAFT run unattended by default; SEND and DESTRUCTIVE ask."""
    assert (await evaluate(Policy(), action))[0] is verdict


async def test_autonomy_is_configurable() -> None:
    """With autonomous_risks = {SEND} an e-mail is allowed and a write asks."""
    policy = Policy(autonomous_risks=frozenset({RiskClass.SEND}))
    assert (await evaluate(policy, email()))[0] is Verdict.ALLOW
    assert (await evaluate(policy, write("a.txt")))[0] is Verdict.ASK_USER


async def test_a_live_grant_allows_and_says_so() -> None:
    """A matching grant gives ALLOW with actor auto:grant and the grant itself."""
    t = task()
    store = await granted_store(t, email())
    ev = await Policy().evaluate(t, prepared(email(body="other")), store, now=NOW)
    assert ev.verdict is Verdict.ALLOW and ev.actor == "auto:grant"
    assert ev.grant is not None and ev.grant.scope is Scope.SESSION


async def test_ask_user_names_the_capability_and_risk() -> None:
    """ASK_USER's reason says which capability at which risk needs approval."""
    assert await evaluate(Policy(), email()) == (Verdict.ASK_USER,
                                                 "email.send (SEND) needs approval")


# --- grant keys ---------------------------------------------------------------------------------


def test_the_rule_binds_the_risk_class() -> None:
    """rule_for gives ask:<RISK>, so a risk change changes the key."""
    assert rule_for(prepared(email())) == "ask:SEND"
    assert rule_for(prepared(delete("a"))) == "ask:DESTRUCTIVE"


def test_the_grant_key_changes_with_each_of_its_parts() -> None:
    """Tool, capability, rule (risk), fingerprint and policy_id each change the key."""
    base = prepared(email())
    key = grant_key("t-1", base)
    assert key.startswith("signoff:t-1:")
    variants = [base.model_copy(update={"tool": "other"}),
                base.model_copy(update={"capability": "email.bulk"}),
                base.model_copy(update={"risk": RiskClass.DESTRUCTIVE}),
                base.model_copy(update={"fingerprint": "0" * 64})]
    keys = {grant_key("t-1", v) for v in variants} | {grant_key("t-2", base), key}
    assert len(keys) == 6
    # Content and targets as shown are not part of the key; the fingerprint is.
    assert grant_key("t-1", base.model_copy(update={"args": {}, "targets": ()})) == key


def test_only_prepared_actions_can_be_granted() -> None:
    """make_grant refuses an action the registry has not labelled."""
    with pytest.raises(ValueError, match="prepared"):
        make_grant(task(), email(), Scope.ONCE, actor="web:admin", now=NOW)


# --- what ASK_USER becomes ---------------------------------------------------------------------

CASES = [
    # (run mode, approvals.mode, default cron_mode, task cron_mode, strict) → (outcome, actor)
    (RunMode.INTERACTIVE, "manual", "deny", None, False, "ask", None),
    (RunMode.TERMINAL, "manual", "deny", None, False, "ask", None),
    (RunMode.NON_INTERACTIVE, "manual", "approve", None, False, "block", "auto:non_interactive"),
    (RunMode.SCHEDULED, "manual", "deny", None, False, "block", "auto:cron_mode"),
    (RunMode.SCHEDULED, "manual", "approve", None, False, "allow", "auto:cron_mode"),
    (RunMode.SCHEDULED, "manual", "ask", None, False, "ask", None),
    (RunMode.SCHEDULED, "manual", "deny", "approve", False, "allow", "auto:cron_mode"),
    (RunMode.SCHEDULED, "manual", "approve", "deny", False, "block", "auto:cron_mode"),
    (RunMode.YOLO, "manual", "deny", None, False, "allow", "auto:yolo"),
    (RunMode.YOLO, "manual", "deny", None, True, "block", "auto:yolo"),
    (RunMode.INTERACTIVE, "off", "deny", None, False, "allow", "auto:mode_off"),
    (RunMode.INTERACTIVE, "off", "deny", None, True, "block", "auto:mode_off"),
    (RunMode.INTERACTIVE, "smart", "deny", None, False, "judge", "auto:smart"),
    (RunMode.NON_INTERACTIVE, "smart", "deny", None, False, "block", "auto:non_interactive"),
    (RunMode.SCHEDULED, "smart", "deny", None, False, "block", "auto:cron_mode"),
]


@pytest.mark.parametrize(("run_mode", "mode", "default", "own", "strict", "outcome", "actor"),
                         CASES)
def test_what_ask_user_becomes_depends_on_who_can_answer(
        run_mode: RunMode, mode: str, default: str, own: str | None, strict: bool,
        outcome: str, actor: str | None) -> None:
    """interactive → ask; non-interactive → block; cron_mode; yolo/off → allow (strict: block)."""
    t = task(mode=run_mode, schedule="nightly" if run_mode is RunMode.SCHEDULED else None,
             cron_mode=own)
    res = resolve_unattended(t, Unattended(mode=mode, cron_mode=default, strict_yolo=strict))
    assert (res.outcome, res.actor) == (outcome, actor)

