"""Passkey routes: register, list and revoke passkeys; options for a step-up decision.

    POST   /passkeys/register/options           WebAuthn creation options (base64url JSON)
    POST   /passkeys/register                   {"name", "credential"} → the new passkey
    GET    /passkeys                            the caller's passkeys (an admin's: all)
    DELETE /passkeys/{id}                       revoke one (the caller's own; admin: any)
    GET    /approvals/{id}/passkey-options?decision=once|session|always|deny
                                                request options whose challenge is bound
                                                to the request, its fingerprint and the
                                                decision (`signoff.runtime.passkeys`)

Only keys that may decide use them (a requester key gets 403). Registration works whatever
``approvals.step_up_with`` says, so people can register before passkeys are required.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request

from signoff.api.access import Role, must_decide
from signoff.api.context import ApiContext
from signoff.api.errors import ApiError, invalid, responses
from signoff.api.routes import identity_of
from signoff.api.schemas import PasskeyList, PasskeyOut, PasskeyRegisterIn
from signoff.bot.cards import steps_up
from signoff.runtime.models import ApprovalStatus, JsonDict, Scope
from signoff.runtime.passkeys import (
    REGISTER_PAGE,
    NoPasskey,
    PasskeyRefused,
    Passkeys,
    RelyingParty,
)
from signoff.runtime.store.port import PasskeyRecord

PasskeyId = Annotated[str, Path(min_length=1, max_length=40)]
ApprovalId = Annotated[str, Path(min_length=1, max_length=100)]
Decision = Literal["once", "session", "always", "deny"]


def passkey_out(record: PasskeyRecord) -> JsonDict:
    """The public shape of a passkey."""
    return {"id": record.id, "name": record.name, "owner": record.owner,
            "credential_id": record.credential_id, "created_at": record.created_at.isoformat(),
            "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None}


def passkeys_of(ctx: ApiContext) -> Passkeys:
    """The flow's passkeys under passkey step-up; else the same rules for registering."""
    return ctx.flow.passkeys or Passkeys(store=ctx.store, clock=ctx.clock,
                                         rp=RelyingParty.of(ctx.public_url),
                                         people=ctx.flow.people)


def build_router(ctx: ApiContext) -> APIRouter:
    """The passkey routes (see the module docstring)."""
    router = APIRouter()
    keys = passkeys_of(ctx)

    @router.post("/passkeys/register/options", tags=["passkeys"],
                 response_model=dict[str, Any], responses=responses(401, 403))
    async def register_options(request: Request) -> JsonDict:
        """WebAuthn creation options for a new passkey of the caller (user verification
        required); hand them to ``navigator.credentials.create``."""
        who = identity_of(request)
        must_decide(who)
        return await keys.registration_options(who.actor)

    @router.post("/passkeys/register", tags=["passkeys"], status_code=201,
                 response_model=PasskeyOut, responses=responses(401, 403, 413, 422))
    async def register(request: Request, body: PasskeyRegisterIn) -> JsonDict:
        """Register the credential made with the last options; 422 when it does not verify
        (another origin, no user verification, options expired or used)."""
        who = identity_of(request)
        must_decide(who)
        try:
            record = await keys.register(who.actor, body.name.strip() or "passkey",
                                         body.credential)
        except PasskeyRefused as exc:
            raise invalid("credential", str(exc).removeprefix("passkey: ")) from exc
        return passkey_out(record)

    @router.get("/passkeys", tags=["passkeys"], response_model=PasskeyList,
                responses=responses(401, 403))
    async def listed(request: Request) -> JsonDict:
        """The caller's passkeys (an admin key: everyone's), revoked ones too."""
        who = identity_of(request)
        must_decide(who)
        found = await ctx.store.passkeys() if who.role is Role.ADMIN else \
            await keys.owned(who.actor, live=False)
        return {"items": [passkey_out(p) for p in found]}

    @router.delete("/passkeys/{passkey_id}", tags=["passkeys"], response_model=PasskeyOut,
                   responses=responses(401, 403, 404, 422))
    async def revoke(request: Request, passkey_id: PasskeyId) -> JsonDict:
        """Revoke a passkey: it decides nothing from now on (assertions it made before
        still verify in the audit log)."""
        who = identity_of(request)
        must_decide(who)
        if not await keys.revoke(who.actor, passkey_id, anyone=who.role is Role.ADMIN):
            raise ApiError(404, f"no live passkey {passkey_id} of yours")
        done = [p for p in await ctx.store.passkeys() if p.id == passkey_id]
        return passkey_out(done[0])

    @router.get("/approvals/{approval_id}/passkey-options", tags=["decisions"],
                response_model=dict[str, Any], responses=responses(401, 403, 404, 409, 422))
    async def options(request: Request, approval_id: ApprovalId,
                      decision: Annotated[Decision, Query()] = "once") -> JsonDict:
        """WebAuthn request options for deciding one request under passkey step-up: the
        challenge is bound to the request, its action's fingerprint and ``decision``, and
        can be used once, within 5 minutes; hand them to ``navigator.credentials.get``
        and send the assertion as ``"passkey"`` to POST /approvals/{id}/approve|deny."""
        who = identity_of(request)
        must_decide(who)
        approval = await ctx.store.get_approval(approval_id)
        if approval is None:
            raise ApiError(404, f"no approval request {approval_id}")
        if ctx.flow.passkeys is None or not steps_up(approval, ctx.flow.step_up):
            raise ApiError(409, f"request {approval_id} is not under passkey step-up",
                           state=approval.status.value)
        if approval.status is not ApprovalStatus.PENDING:
            raise ApiError(409, f"request {approval.id} is already {approval.status.value}",
                           state=approval.status.value)
        try:
            return await keys.request_options(who.actor, approval, Scope(decision))
        except NoPasskey as exc:
            raise ApiError(403, str(exc), step_up="passkey", register=REGISTER_PAGE) from exc

    return router
