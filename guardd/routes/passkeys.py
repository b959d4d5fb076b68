"""Passkeys: an operator registers theirs and lists them, an admin revokes
one; an approver asks for the request options that make an assertion for a
held action's approval or rejection (``guardd.passkeys``)."""

from __future__ import annotations

from typing import Any

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.core.decisions import Subject
from agents_runtime.log.passkeys import APPROVE, DECISIONS
from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies
from guardd.auth import ADMIN_ROLE, APPROVER, Caller, require_role
from guardd.endpoints import OPERATOR, Query, Reply
from guardd.errors import ApiError, BadRequest
from guardd.jsonio import json_response
from guardd.passkeys import Passkeys, passkey_json, person
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("passkeys", __name__, tag="operators")

_NO_PASSKEY_OF_ADMIN = (
    " The admin token is 403: it is no person and holds no passkey (sign in, or use "
    "an operator token)."
)


def _decision(text: str | None) -> str:
    if text is None:
        return APPROVE
    if text not in DECISIONS:
        raise BadRequest("decision must be approve or reject")
    return text


DECISION = Query(
    "decision",
    _decision,
    {"type": "string", "enum": list(DECISIONS)},
    "The decision the passkey is to sign (default approve).",
)


def passkeys_of(service: Service) -> Passkeys:
    passkeys = service.guard.passkeys
    if passkeys is None:
        raise ApiError("passkeys are not set up on this guardd", "unavailable")
    return passkeys


async def proof(
    service: Service, who: Caller, ref: AgentRef, action_id: str, decision: str, assertion: Any
) -> dict[str, str]:
    """The passkey fields an approval or rejection records, once its assertion
    proves the decision; 403 naming what failed (nothing is written then)."""
    passkeys = passkeys_of(service)
    subject: Subject = await ref.ask(c.ApprovalSubject(action_id))
    return passkeys.check(require_role(who, APPROVER), subject, decision, assertion)


@blueprint.endpoint(
    "POST",
    "/v1/operators/passkeys/options",
    "Begin registering a passkey",
    caller=OPERATOR,
    reply=Reply(replies.PasskeyCreationOptions, "The creation options for the browser."),
    person=True,
    description="Any operator who is a person or holds an operator token, whatever "
    "their role. The challenge is good once, for five minutes, on this node."
    + _NO_PASSKEY_OF_ADMIN,
)
async def creation_options(service: Service, who: Caller) -> Response:
    operator = require_role(who, "")
    return json_response(passkeys_of(service).creation_options(operator))


@blueprint.endpoint(
    "POST",
    "/v1/operators/passkeys",
    "Register a passkey",
    caller=OPERATOR,
    body=bodies.PasskeyCredential,
    reply=Reply(replies.Passkey, "The passkey, registered.", 201),
    person=True,
    writes=True,
    errors=("invalid_state",),
    description="The body is the browser's answer to the creation options. guardd "
    "verifies it (challenge, origin, RP ID, user presence and verification, EdDSA or "
    "ES256) and writes `passkey_registered` to the operators log; 403 naming what "
    "failed otherwise." + _NO_PASSKEY_OF_ADMIN,
)
async def register(service: Service, who: Caller, body: bodies.PasskeyCredential) -> Response:
    credential = {"id": body.id, "rawId": body.rawId, "type": body.type, "response": body.response}
    registered = await passkeys_of(service).register(require_role(who, ""), credential)
    return json_response(passkey_json(registered), 201)


@blueprint.endpoint(
    "GET",
    "/v1/operators/passkeys",
    "List passkeys",
    caller=OPERATOR,
    reply=Reply(replies.PasskeyList, "The caller's own passkeys (an admin's: everyone's)."),
    errors=("unavailable",),
    description="An operator sees their own passkeys; one holding the admin role sees "
    "every operator's (the admin token too).",
)
async def list_passkeys(service: Service, who: Caller) -> Response:
    operator = require_role(who, "")
    every = ADMIN_ROLE in operator.roles
    listed = await passkeys_of(service).listed(operator, every=every)
    return json_response({"passkeys": [passkey_json(one) for one in listed]})


@blueprint.endpoint(
    "POST",
    "/v1/operators/passkeys/<credential_id>/revoke",
    "Revoke a passkey",
    caller=OPERATOR,
    role=ADMIN_ROLE,
    reply=Reply(replies.Passkey, "The passkey, now `revoked`."),
    writes=True,
    errors=("not_found", "invalid_state"),
    description="Writes `passkey_revoked`: from then on its assertions are refused, and "
    "`audit verify` fails an approval signed after it. 404 for an unknown passkey, 409 "
    "when revoked already.",
)
async def revoke(service: Service, who: Caller, credential_id: str) -> Response:
    revoked = await passkeys_of(service).revoke(credential_id, require_role(who, ADMIN_ROLE))
    return json_response(passkey_json(revoked))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/actions/<action_id>/approval-options",
    "Request options to sign a decision with a passkey",
    caller=OPERATOR,
    role=APPROVER,
    query=(DECISION,),
    reply=Reply(replies.ApprovalOptions, "The request options for the browser."),
    person=True,
    errors=("invalid_state",),
    description="The challenge is the binding of this decision by the caller: "
    "SHA-256 of the RFC 8785 form of `binding`. 409 unless the action is pending; 403 "
    "when the caller has no passkey." + _NO_PASSKEY_OF_ADMIN,
)
async def approval_options(
    service: Service, who: Caller, ref: AgentRef, action_id: str, decision: str
) -> Response:
    passkeys = passkeys_of(service)
    operator = person(require_role(who, APPROVER))  # the admin token: 403 before a 409
    subject: Subject = await ref.ask(c.ApprovalSubject(action_id))
    return json_response(passkeys.request_options(operator, subject, decision))
