"""Who may do what over the API and the console: the roles of keys, in one place.

Every caller is an `Identity` with a `Role`:

- ``admin`` (``[api] key``, a ``[[api.keys]]`` entry with ``role = "admin"``, and the
  keyless loopback caller ``web:local``): everything;
- ``approver`` (a ``[[api.keys]]`` entry without ``role``, as every named key was in
  0.2): reads everything, decides, submits; withdraws, and reports the outcome of, only
  what it asked itself;
- ``requester`` (an agent's key): submits tasks and ``/v1/approvals`` requests, reads
  and withdraws what it asked itself; never decides and never sees other callers' work.

Two rules apply them. `gate` runs before every route (an app-wide FastAPI dependency):
a requester may call only the routes in `REQUESTER_ROUTES`, so a route added later is
closed to requesters until it is listed here (403). Inside the routes, `may_read`,
`may_decide`, `may_withdraw` and `may_report` decide about one task or request; a
requester asking for someone else's gets 404, the same answer as for an id that does not
exist.

Who may decide a particular request (approvers, on-call, quorum, self-approval) is the
runtime's `Authorizer`; this module only keeps a key from reaching it when its role
forbids deciding at all.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from fastapi import Request

from signoff.api.errors import ApiError
from signoff.runtime.models import Approval, Task


class Role(StrEnum):
    """What a key may do (see the module docstring)."""

    ADMIN = "admin"
    APPROVER = "approver"
    REQUESTER = "requester"


DEFAULT_ROLE = Role.APPROVER  # a [[api.keys]] entry without role, as in 0.2

# (method, route template) a requester key may call; GET /approvals lists only its own.
REQUESTER_ROUTES = frozenset({
    ("GET", "/tasks"), ("POST", "/tasks"), ("GET", "/tasks/{task_id}"),
    ("GET", "/tasks/{task_id}/transcript"),
    ("GET", "/approvals"),
    ("POST", "/v1/approvals"), ("GET", "/v1/approvals/{approval_id}"),
    ("POST", "/v1/approvals/{approval_id}/outcome"),
    ("DELETE", "/v1/approvals/{approval_id}"),
})


class Caller(Protocol):
    """The part of an identity the rules read (`signoff.api.auth.Identity` has it)."""

    @property
    def actor(self) -> str:
        """``web:<name>``."""

    @property
    def role(self) -> Role:
        """The key's role."""


def may_call(who: Caller, method: str, route: str) -> bool:
    """True when ``who``'s role allows the route at all (``route``: its template)."""
    asked = "GET" if method == "HEAD" else method
    return who.role is not Role.REQUESTER or (asked, route) in REQUESTER_ROUTES


def may_decide(who: Caller) -> bool:
    """True when ``who`` may answer approval requests (which ones is the Authorizer's)."""
    return who.role in (Role.ADMIN, Role.APPROVER)


def must_decide(who: Caller) -> None:
    """403 unless ``who`` may decide (every decision route calls this first)."""
    if not may_decide(who):
        raise ApiError(403, f"{who.actor} holds a {who.role.value} key, which may not decide")


def may_use_console(who: Caller) -> bool:
    """The console is where people decide: requesters are not let in."""
    return may_decide(who)


def owner_of(item: Task | Approval, task: Task | None = None) -> str | None:
    """Who asked: the submitter of a task, or of a request (else of its task)."""
    if isinstance(item, Task):
        return item.submitted_by
    return item.submitted_by or (task.submitted_by if task is not None else None)


def may_read(who: Caller, owner: str | None) -> bool:
    """Admins and approvers read everything; a requester only what it asked."""
    return who.role is not Role.REQUESTER or (owner is not None and owner == who.actor)


def may_withdraw(who: Caller, owner: str | None) -> bool:
    """An admin withdraws any pending request; anyone else only one it asked itself."""
    return who.role is Role.ADMIN or (owner is not None and owner == who.actor)


def may_report(who: Caller, owner: str | None) -> bool:
    """What a caller did with a decided request is its own word: the key that asked (or
    an admin) reports it, once. An approver reads every request, but a report of its
    would take the asker's one report and put words in the audit the asker never said."""
    return may_withdraw(who, owner)


def caller_of(request: Request) -> Caller | None:
    """The authenticated caller, or None on a public route."""
    found = getattr(request.state, "identity", None)
    return found if isinstance(getattr(found, "role", None), Role) else None


async def gate(request: Request) -> None:
    """Every route: 403 when the caller's role may not call it (see the module docstring)."""
    who = caller_of(request)
    route = request.scope.get("route")
    template = getattr(route, "path", None)
    if who is None or template is None or may_call(who, request.method, template):
        return
    raise ApiError(403, f"{who.actor} holds a {who.role.value} key, which may not call "
                        f"{request.method} {template}: a requester submits and reads its "
                        "own tasks and requests")
