"""Grants: the key an approval is remembered under, and which stored grant still covers
an action — the one place that rule is written (stores only return candidates by key).

A grant may lapse (``expires_at``: an answer's ``"for": "30m"``, or
``approvals.grant_ttl`` for an always grant): from then on it covers nothing, on every
store, because `covers` is given the Clock's time and the stores never filter by it.

A schedule's Always grants live under its name (its runs' policy_id) and belong to its
definition (`Schedule.definition`: name, goal, steps): they cover later runs only while
the schedule is defined the same, so a schedule given another goal — or a new schedule
under a removed one's name — asks again, while a restart or a new cron line does not.
The listing says so (`status`: ``superseded``), so nobody reads such a grant as live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from json.encoder import encode_basestring as _text  # json.dumps' own, for ensure_ascii=False

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.ids import grant_id
from signoff.runtime.models import Action, Approval, Grant, Scope, Task, TaskState


def rule_for(action: Action) -> str:
    """The rule an approval answers; binds the risk class into the grant key, and whether
    the action reaches a private network: a card that said so is a different consent
    from one that did not, so a grant minted while a host was public never covers it
    once its name resolves inside (nor the other way round)."""
    rule = f"ask:{action.risk.value if action.risk else 'SEND'}"
    return f"{rule}:private" if action.private_network else rule


def grants_home(policy_id: str, *, asked_by: str | None) -> str:
    """Where an outside request's session and always grants live: its ``policy_id`` as
    named by the identity that asked (``web:<key name>``). A caller chooses its
    policy_id, so another key naming the same one (a CI job's "ci-run", a guessable
    "hermes") must not find the grants a person gave the first: each key has its own.
    A task's grants live under the task's own policy_id (see `make_grant`)."""
    return f"{asked_by} {policy_id}" if asked_by else policy_id


def policy_of(approval: Approval, task: Task | None) -> str:
    """The policy_id the grant an answer to ``approval`` makes is shown under."""
    return approval.policy_id or (task.policy_id if task else approval.id)


def home_of(approval: Approval, task: Task | None) -> str:
    """Where that grant lives (its key's first part): its task's policy_id, or for an
    outside request its `grants_home`."""
    if approval.task_id is not None:
        return policy_of(approval, task)
    return grants_home(policy_of(approval, task), asked_by=approval.submitted_by)


def grant_key(policy_id: str, action: Action) -> str:
    """``signoff:<policy_id>:<sha256(tool, capability, rule, fingerprint)>``."""
    return f"signoff:{policy_id}:{sha256_hex(_key_json(action))}"


def _key_json(action: Action) -> str:
    """``canonical_json({"tool", "capability", "rule", "fingerprint"})``, spelled directly
    when all four are strings (a prepared action): the policy computes it for every SEND
    action, and json.dumps with sorted keys costs ~5 µs where this costs ~1 µs. The keys
    are written in sorted order and each string with the encoder json.dumps itself uses
    for ``ensure_ascii=False``, so the text — and every stored grant key — is the same
    (tests/unit/runtime/policy/test_grant_key.py compares the two)."""
    tool, capability, fingerprint = action.tool, action.capability, action.fingerprint
    rule = rule_for(action)
    if capability is not None and fingerprint is not None:
        return (f'{{"capability":{_text(capability)},"fingerprint":{_text(fingerprint)},'
                f'"rule":{_text(rule)},"tool":{_text(tool)}}}')
    return canonical_json({"tool": tool, "capability": capability, "rule": rule,
                           "fingerprint": fingerprint})


def make_grant(task: Task, action: Action, scope: Scope, *, actor: str, now: datetime,
               lasts: timedelta | None = None) -> Grant:
    """The grant a person's approval of a task's action creates."""
    return grant_for(action, scope, policy_id=task.policy_id, task_id=task.id, actor=actor,
                     now=now, lasts=lasts, schedule_definition=task.schedule_definition)


def grant_for(action: Action, scope: Scope, *, policy_id: str, task_id: str | None,
              actor: str, now: datetime, lasts: timedelta | None = None,
              home: str | None = None, schedule_definition: str | None = None) -> Grant:
    """The grant an approval creates; `once` is used up by the action it approves.

    ``task_id`` None: the grant of an outside request (POST /v1/approvals), which covers
    later requests of the same ``policy_id`` only (see `covers`). ``lasts``: it lapses
    that long after ``now`` (None: it lasts as long as its scope does). ``home``: where it
    lives when that is not ``policy_id`` itself (an outside request's, `grants_home`).
    ``schedule_definition``: the definition of the scheduled run it is made in (see
    `covers`).
    """
    if action.capability is None or action.risk is None or action.fingerprint is None:
        raise ValueError("only prepared actions can be granted")
    return Grant(
        id=grant_id(), key=grant_key(home or policy_id, action), policy_id=policy_id,
        task_id=task_id, scope=scope, tool=action.tool, capability=action.capability,
        risk=action.risk, fingerprint=action.fingerprint, targets=list(action.targets),
        max_calls=1 if scope is Scope.ONCE else None, used=1, created_at=now,
        created_by=actor, expires_at=now + lasts if lasts is not None else None,
        schedule_definition=schedule_definition)


def lapsed(grant: Grant, now: datetime) -> bool:
    """True once a time-boxed grant's time is over (its ``expires_at`` is not after now)."""
    return grant.expires_at is not None and grant.expires_at <= now


def covers(grant: Grant, *, task_id: str | None, now: datetime,
           definition: str | None = None) -> bool:
    """True while ``grant`` allows its action again in task ``task_id``: not revoked, not
    used up, not lapsed at ``now`` (the Clock's time), and either made in this very task
    (``session``; a ``once`` grant is used up by its own action) or remembered
    (``always``, already scoped by its key's policy_id) for a task of the same schedule
    ``definition`` (the task's `Task.schedule_definition`; None for a task no schedule
    fired, whose policy_id is its own id anyway).

    ``task_id`` None asks for an outside request: then only grants made by outside
    requests count (``session`` and ``always`` both last for the key's policy_id). A
    task's grants and an outside request's never cover each other, even when a caller
    names a policy_id that is also a schedule's name or a task's id.
    """
    if not grant.live or lapsed(grant, now):
        return False
    if task_id is None or grant.task_id is None:
        return task_id is None and grant.task_id is None
    if grant.task_id == task_id:
        return True
    # Same name, other definition (an edited goal, a new schedule reusing a removed one's
    # name): what was approved for that goal is not approved for this one.
    return grant.scope is Scope.ALWAYS and grant.schedule_definition == definition


def made_in_a_scheduled_run(grant: Grant) -> bool:
    """True for a grant a person gave in a run a schedule fired: a task's grant lives under
    its task's policy_id (`Task.policy_id`), which is the task's own id unless a schedule
    fired it, then the schedule's name."""
    return grant.task_id is not None and grant.policy_id != grant.task_id


def superseded(grant: Grant, definitions: Mapping[str, str]) -> bool:
    """True for a scheduled run's Always grant that no longer covers that schedule's runs
    because the schedule of its name is defined otherwise now (another goal or steps), is
    gone from ``definitions`` (each configured schedule's `Schedule.definition` by name),
    or the grant predates definitions (None): `covers` needs the same definition."""
    if grant.scope is not Scope.ALWAYS or not made_in_a_scheduled_run(grant):
        return False
    current = definitions.get(grant.policy_id)
    # The scheduler gives every run its definition: None matches no run it fires.
    return current is None or current != grant.schedule_definition


def status(grant: Grant, task_state: TaskState | None, now: datetime, *,
           definitions: Mapping[str, str] | None = None) -> str:
    """For people: ``live``, ``revoked``, ``used`` (a once grant), ``lapsed`` (its time is
    over), ``ended`` — a session grant whose task finished, which `covers` only ever
    allowed inside that task — or ``superseded``: a schedule's Always grant that its
    schedule, edited or removed since, is no longer covered by (see `superseded`;
    ``definitions`` None: the schedules are not known here, so none is said to be)."""
    if grant.revoked_at is not None:
        return "revoked"
    if not grant.live:
        return "used"
    if lapsed(grant, now):
        return "lapsed"
    if definitions is not None and superseded(grant, definitions):
        return "superseded"
    ended = task_state in (TaskState.COMPLETED, TaskState.FAILED)
    return "ended" if grant.scope is Scope.SESSION and ended else "live"


def first_valid(candidates: Iterable[Grant], *, task_id: str | None, now: datetime,
                definition: str | None = None) -> Grant | None:
    """The oldest candidate (stored order) that covers the action at ``now`` in this task
    of schedule ``definition`` (or, with ``task_id`` None, in this outside request)."""
    return next((g for g in candidates
                 if covers(g, task_id=task_id, now=now, definition=definition)), None)
