"""Policy as code: an optional Cedar policy file, consulted after the built-in hard rules.

`[policy] cedar = "policy.cedar"` adds rules that risk classes, prohibitions and budgets
cannot say ("alice may send to *@example.com without asking", "nothing touches prod at
night"). The file is read with `cedarpy` (the Cedar engine's Python binding); we write only
the mapping of an action onto Cedar's request and of Cedar's answer onto a verdict:

- principal ``Signoff::Principal::"<requester>"`` (``web:alice``, ``schedule:<name>``,
  ``slack:U1``, an outside request's ``requester``), action ``Signoff::Action::"<tool>"``,
  resource ``Signoff::Target::"<target>"``; context ``{tool, risk, capability, targets,
  target, policy_id, schedule?, hour_utc}`` (``target``: the one being asked about).
  Principal and target entities have a ``name`` attribute holding their id, for
  patterns: ``resource.name like "*@example.com"``.
- An action with several targets is asked once per target and is permitted only when
  every target is; one without targets is asked for ``Signoff::Target::""``.
- A forbid that matches any target → BLOCK. A permit carrying ``@ask`` that matches any
  target → ASK_USER (a person answers, whatever the risk class). Every target permitted
  by plain permits → ALLOW. Nothing decided → no answer: the built-in rules go on.
- A policy that fails while it is evaluated (a missing context attribute, a type error)
  is skipped by Cedar; because a skipped forbid must not let anything through, any such
  error turns a would-be ALLOW or no-answer into ASK_USER, naming the error (fail closed).

Where this sits in the order (prohibit → budget → Cedar → the rest) is
`signoff.runtime.policy.policy`; a Cedar permit can never lift a prohibition or a spent
budget, since those are judged first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from signoff.errors import ConfigError
from signoff.runtime.models import Action, Verdict

# The entity types policies name. One namespace so a policy file reads as signoff's.
PRINCIPAL = "Signoff::Principal"
ACTION = "Signoff::Action"
TARGET = "Signoff::Target"
ASK = "ask"  # the annotation that turns a permit into "a person answers"
NAME = "id"  # ``@id("no-prod")`` names a policy in explanations (else policy0, policy1…)


class CedarError(ConfigError):
    """The policy file cannot be used: unreadable, or not valid Cedar (names the file)."""


@dataclass(frozen=True)
class CedarAnswer:
    """What the policy file says about one action: a verdict, or None (no policy decided,
    the built-in rules go on), the names of the policies that decided, and why."""

    verdict: Verdict | None
    policies: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class CedarRequest:
    """Who asks for what, in the terms a policy can test."""

    principal: str
    action: Action
    policy_id: str
    schedule: str | None
    now: datetime


def _engine() -> Any:
    try:
        import cedarpy  # optional: only a configured policy file needs it
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise CedarError("[policy] cedar needs the cedarpy package: "
                         "pip install 'signoff[cedar]'") from exc
    return cedarpy


class CedarPolicy:
    """A parsed Cedar policy set and the names of its policies."""

    def __init__(self, text: str, *, source: str = "policy.cedar") -> None:
        cedarpy = _engine()
        self.source = source
        try:
            self._set = cedarpy.PolicySet.from_str(text)
            shape = json.loads(cedarpy.policies_to_json_str(text))
        except ValueError as exc:
            raise CedarError(f"{source}: not valid Cedar: {exc}") from exc
        statics: dict[str, Any] = shape.get("staticPolicies") or {}
        if shape.get("templates"):
            raise CedarError(f"{source}: policy templates are not supported; write static "
                             "policies")
        self.names = {pid: str((p.get("annotations") or {}).get(NAME) or pid)
                      for pid, p in statics.items()}
        self._asks = frozenset(pid for pid, p in statics.items()
                               if ASK in (p.get("annotations") or {}))
        self._forbids = frozenset(pid for pid, p in statics.items()
                                  if p.get("effect") == "forbid")
        self._cedar = cedarpy

    @classmethod
    def load(cls, path: Path) -> CedarPolicy:
        """Read and parse ``path``; a CedarError names the file and what is wrong."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CedarError(f"[policy] cedar: cannot read {path}: "
                             f"{exc.strerror or exc}") from exc
        return cls(text, source=str(path))

    def __len__(self) -> int:
        return len(self.names)

    def judge(self, req: CedarRequest) -> CedarAnswer:
        """The file's answer for one action (see the module docstring for the rules)."""
        targets = list(req.action.targets) or [""]
        forbids: list[str] = []
        asks: list[str] = []
        permits: list[str] = []
        errors: list[str] = []
        undecided = False
        for target in targets:
            result = self._cedar.is_authorized(self._request(req, target), self._set,
                                               self._entities(req, target))
            reasons = [str(r) for r in result.diagnostics.reasons]
            errors += [str(e) for e in result.diagnostics.errors]
            if not result.allowed:
                forbids += [r for r in reasons if r in self._forbids]
                undecided = undecided or not reasons
                continue
            asks += [r for r in reasons if r in self._asks]
            permits += [r for r in reasons if r not in self._asks]
        if forbids:
            return self._answer(Verdict.BLOCK, forbids, "forbidden by policy")
        if errors:
            return CedarAnswer(Verdict.ASK_USER, (), "a Cedar policy failed to evaluate, so "
                               f"a person answers: {self._named(errors[0])}")
        if asks:
            return self._answer(Verdict.ASK_USER, asks, "asked by policy")
        if undecided or not permits:
            return CedarAnswer(None)
        return self._answer(Verdict.ALLOW, permits, "permitted by policy")

    def _answer(self, verdict: Verdict, pids: Sequence[str], words: str) -> CedarAnswer:
        names = tuple(dict.fromkeys(self.names.get(p, p) for p in pids))
        return CedarAnswer(verdict, names, f"{words} {', '.join(names)}")

    def _named(self, error: str) -> str:
        """Cedar's error text with our policy names (``@id``) for its ``policy0``."""
        for pid, name in self.names.items():
            error = error.replace(f"`{pid}`", f"`{name}`")
        return error

    @staticmethod
    def _entities(req: CedarRequest, target: str) -> list[dict[str, Any]]:
        # Entities carry their id as a string attribute, so a policy can match patterns:
        # resource.name like "*@example.com" (an entity itself only compares with ==).
        return [{"uid": {"type": PRINCIPAL, "id": req.principal},
                 "attrs": {"name": req.principal}, "parents": []},
                {"uid": {"type": TARGET, "id": target}, "attrs": {"name": target},
                 "parents": []}]

    @staticmethod
    def _request(req: CedarRequest, target: str) -> dict[str, Any]:
        action = req.action
        context: dict[str, Any] = {
            "tool": action.tool, "risk": action.risk.value if action.risk else "",
            "capability": action.capability or "", "targets": list(action.targets),
            "policy_id": req.policy_id, "hour_utc": req.now.astimezone(UTC).hour,
            "target": target,
        }
        if req.schedule:
            context["schedule"] = req.schedule
        # The structured form: ids such as "web:alice" or a URL need no escaping.
        return {"principal": {"type": PRINCIPAL, "id": req.principal},
                "action": {"type": ACTION, "id": action.tool},
                "resource": {"type": TARGET, "id": target}, "context": context}
