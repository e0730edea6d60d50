"""Policy as code: a Cedar file consulted after prohibitions and budgets.

forbid → BLOCK (and beats any permit), permit → ALLOW, permit with ``@ask`` → ASK_USER,
nothing decided → the built-in rules; a permit never lifts a prohibition, a spent budget
or the private-network rule; a policy that fails to evaluate never lets anything through.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from signoff.errors import ConfigError
from signoff.runtime.models import Action, ActionRecord, RiskClass, Task, Verdict
from signoff.runtime.policy.cedar import CedarPolicy
from signoff.runtime.policy.net import NetRule
from signoff.runtime.policy.policy import CEDAR_ACTOR, Evaluation, Policy
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.tools.registry import builtin_registry
from tests.factories import delete, email, read, task

DAY = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
NIGHT = datetime(2026, 3, 14, 3, 0, tzinfo=UTC)
REGISTRY = builtin_registry(work_dir=Path("/srv/work"), read_only_commands=[],
                            entry_points_group=None)

RULES = """
@id("alice-mail")
permit(principal == Signoff::Principal::"web:alice", action == Signoff::Action::"send_email",
       resource) when { resource.name like "*@example.com" };

@id("no-prod")
forbid(principal, action, resource) when { resource.name like "*prod*" };

@id("reads-at-night")
@ask
permit(principal, action == Signoff::Action::"read_file", resource)
  when { context.hour_utc < 6 };

@id("nightly-cleanup")
permit(principal == Signoff::Principal::"schedule:nightly",
       action == Signoff::Action::"delete_file", resource)
  when { context has schedule && context.schedule == "nightly" };
"""


async def judge(action: Action, *, who: str = "web:alice", rules: str = RULES,
                t: Task | None = None, now: datetime = DAY, **policy: object) -> Evaluation:
    """The policy's evaluation of one prepared action of a task submitted by ``who``."""
    pol = Policy(cedar=CedarPolicy(rules), **policy)  # type: ignore[arg-type]
    return await pol.evaluate(t or task(submitted_by=who), REGISTRY.prepare(action),
                              MemTaskStore(), now=now)


async def test_a_permit_lets_alices_mail_to_her_domain_run_as_an_audited_auto_approval() -> None:
    """A permit makes a SEND ALLOW, approved by auto:cedar (audited, never silent)."""
    ev = await judge(email("bob@example.com"))
    assert ev.verdict is Verdict.ALLOW
    assert ev.actor == CEDAR_ACTOR
    assert ev.policies == ("alice-mail",)
    assert "alice-mail" in ev.reason


async def test_someone_else_or_another_domain_falls_back_to_asking() -> None:
    """No policy decides for bob, nor for a recipient outside the pattern: the built-in
    rules ask as before."""
    for ev in (await judge(email("bob@example.com"), who="web:bob"),
               await judge(email("bob@elsewhere.org"))):
        assert ev.verdict is Verdict.ASK_USER
        assert ev.policies == ()


async def test_every_target_must_be_permitted() -> None:
    """Two recipients, one outside the permitted pattern: not permitted, so asked."""
    ev = await judge(email(["bob@example.com", "eve@elsewhere.org"]))
    assert ev.verdict is Verdict.ASK_USER


async def test_forbid_beats_a_permit_on_any_target() -> None:
    """One forbidden recipient blocks the whole action, even where a permit matches."""
    ev = await judge(email(["bob@example.com", "ops@prod.example.com"]))
    assert ev.verdict is Verdict.BLOCK
    assert ev.policies == ("no-prod",)
    assert "no-prod" in ev.reason


async def test_forbid_blocks_even_an_autonomous_read() -> None:
    """A READ of a forbidden path never runs on its own."""
    ev = await judge(read("prod/secrets.txt"))
    assert ev.verdict is Verdict.BLOCK


async def test_ask_makes_an_autonomous_read_wait_for_a_person_at_night_only() -> None:
    """``@ask`` turns a READ into a request at 03:00 UTC; at noon it runs on its own."""
    assert (await judge(read(), now=NIGHT)).verdict is Verdict.ASK_USER
    assert (await judge(read(), now=NIGHT)).policies == ("reads-at-night",)
    day = await judge(read(), now=DAY)
    assert (day.verdict, day.actor) == (Verdict.ALLOW, None)


async def test_a_schedule_is_the_principal_of_its_runs() -> None:
    """A scheduled task's principal is schedule:<name>, with the schedule in the context."""
    ev = await judge(delete("tmp/old.log"), t=task(schedule="nightly"))
    assert (ev.verdict, ev.policies) == (Verdict.ALLOW, ("nightly-cleanup",))
    other = await judge(delete("tmp/old.log"), t=task(schedule="weekly"))
    assert other.verdict is Verdict.ASK_USER


async def test_a_permit_never_lifts_a_prohibition() -> None:
    """policy.prohibit is judged first: a permitted send to a prohibited tool is BLOCK."""
    ev = await judge(email("bob@example.com"), prohibit=("send_email",))
    assert ev.verdict is Verdict.BLOCK
    assert "prohibited" in ev.reason


async def test_a_permit_never_lifts_a_spent_budget() -> None:
    """A budget used up stays BLOCK whatever the Cedar file permits."""
    done = ActionRecord(step=0, tool="send_email", capability="email.send", outcome="ok",
                        decision="allow", at=DAY)
    t = task(submitted_by="web:alice", actions=[done])
    ev = await judge(email("bob@example.com"), t=t, budgets={"email.send": 1})
    assert ev.verdict is Verdict.BLOCK
    assert "budget" in ev.reason


async def test_a_permit_never_lifts_the_private_network_rule() -> None:
    """A network action to a private address is asked about even when a policy permits."""
    rules = 'permit(principal, action, resource);'
    action = Action(tool="http_get", args={"url": "http://10.0.0.5/status"})
    ev = await judge(action, rules=rules)
    assert ev.verdict is Verdict.ASK_USER


async def test_a_policy_that_fails_to_evaluate_never_lets_anything_through() -> None:
    """An error (a missing attribute) skips that policy in Cedar; signoff then asks a
    person instead of running an action the broken policy might have forbidden."""
    rules = ('permit(principal, action, resource);\n'
             '@id("broken") forbid(principal, action, resource) '
             'when { context.nosuch == 1 };')
    ev = await judge(read(), rules=rules)
    assert ev.verdict is Verdict.ASK_USER
    assert "broken" in ev.reason


async def test_no_policy_file_changes_nothing() -> None:
    """Without a Cedar file the built-in order is untouched (READ runs, SEND asks)."""
    pol = Policy()
    ev = await pol.evaluate(task(), REGISTRY.prepare(email()), MemTaskStore(), now=DAY)
    assert ev.verdict is Verdict.ASK_USER
    assert RiskClass.READ in pol.autonomous_risks


def test_a_broken_file_is_refused_naming_it(tmp_path: Path) -> None:
    """Invalid Cedar, a template or a missing file is a ConfigError naming the file."""
    bad = tmp_path / "p.cedar"
    bad.write_text("permit(principal, action", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"p\.cedar: not valid Cedar"):
        CedarPolicy.load(bad)
    bad.write_text("permit(principal == ?principal, action, resource);", encoding="utf-8")
    with pytest.raises(ConfigError, match="templates"):
        CedarPolicy.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        CedarPolicy.load(tmp_path / "missing.cedar")


async def test_the_threat_models_fetch_rule_makes_a_public_http_get_ask() -> None:
    """The Cedar rule docs/security.md gives against carrying data out in a URL, taken
    from the page itself: a public http_get asks instead of running on its own."""
    page = (Path(__file__).parents[4] / "docs" / "security.md").read_text(encoding="utf-8")
    rule = page.split("```cedar", 1)[1].split("```", 1)[0]
    assert "fetch-asks" in rule
    fetch = Action(tool="http_get", args={"url": "https://example.com/?d=secret"})
    ev = await judge(fetch, rules=rule)
    assert ev.verdict is Verdict.ASK_USER and "fetch-asks" in ev.reason
    assert (await judge(fetch, rules="")).verdict is Verdict.ALLOW
    assert (await judge(read("notes.txt"), rules=rule)).verdict is Verdict.ALLOW


class _Public:
    """Every name resolves to one public address (no DNS in a unit test)."""

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        return ("93.184.216.34",)


@pytest.mark.parametrize("url", ["https://api.PROD.example.com/deploy",
                                 "HTTPS://Prod.Example.com:443/x"])
async def test_a_forbid_on_a_host_holds_however_the_host_is_spelled(url: str) -> None:
    """A host name is the same host in any case, and the request goes to it in lower
    case: a URL is judged as it will be contacted, so "*prod*" forbids an http_get (READ,
    unattended otherwise) to api.PROD.example.com too."""
    ev = await judge(Action(tool="http_get", args={"url": url}),
                     net=NetRule(resolver=_Public()))
    assert ev.verdict is Verdict.BLOCK
    assert ev.policies == ("no-prod",)
