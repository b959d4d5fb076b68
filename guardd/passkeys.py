"""Passkeys: operators register them, and sign approvals with them.

An operator who is a person (signed in with OpenID Connect) or a program
with an operator token registers a passkey with the WebAuthn ceremony
(``POST /v1/operators/passkeys/options``, then ``POST /v1/operators/passkeys``
with the browser's credential). guardd verifies the attestation with the
``webauthn`` library against its relying party (``--webauthn-rp-id``,
``--webauthn-origin``) and writes ``passkey_registered`` into the operators
log: the passkey is the operator's (``by_id``) from then on, until an admin
writes ``passkey_revoked``. The admin token is no person: it registers none.

A tool rule with ``approval_passkey`` then wants each approval (and with
``"both"`` each rejection) signed: the challenge is the binding of
``agents_runtime.log.passkeys`` (the agent's log, the action, its request's
hash, the decision and the approver's ``by_id``), so the signature is proof,
to anyone holding the logs, that this passkey approved this very call.

Registration challenges live in memory for ``CHALLENGE_SECS``, used once: a
ceremony is finished on the node that began it. The sign counters live in
memory too, from each passkey's registration on: after a restart a counter
starts again from the registered value (the binding already makes an
assertion good for one decision only).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import attrs
from webauthn import generate_registration_options, options_to_json, verify_registration_response
from webauthn.helpers import decode_credential_public_key
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.exceptions import InvalidRegistrationResponse, WebAuthnException
from webauthn.helpers.structs import (
    AttestationConveyancePreference,
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from agents_runtime.core.decisions import Subject
from agents_runtime.errors import PasskeyError
from agents_runtime.log.operators import OperatorKind
from agents_runtime.log.passkeys import (
    APPROVE,
    Credential,
    b64url,
    binding,
    binding_fields,
    check_assertion,
    proof_of,
    unb64url,
)
from guardd.auth import VIA_ADMIN_TOKEN, Operator
from guardd.errors import ApiError, ApiForbidden, BadRequest
from guardd.revocation import revocation

CHALLENGE_SECS = 300  # a registration ceremony must finish within five minutes
MAX_CHALLENGES = 10_000  # registrations begun and not finished, at most
TIMEOUT_MS = CHALLENGE_SECS * 1000
ALGORITHMS = [COSEAlgorithmIdentifier.EDDSA, COSEAlgorithmIdentifier.ECDSA_SHA_256]
RP_NAME = "Agent Action Guard"
ACTIVE, REVOKED = "active", "revoked"

NO_PERSON = (
    "the admin token is no person and holds no passkey: sign in, or use an operator "
    "token, to register or use one"
)


@attrs.frozen
class RelyingParty:
    """Whom passkeys are made for: the RP ID (a host name) and the origin
    the console is reached at."""

    rp_id: str
    origin: str


def relying_party(
    rp_id: str | None, origin: str | None, public_url: str | None, port: int, tls: bool
) -> RelyingParty:
    """``--webauthn-rp-id`` and ``--webauthn-origin``, each defaulting from
    ``--public-url`` when given, else from the listen port on localhost (a
    browser takes no IP address as an RP ID)."""
    if public_url is not None:
        parts = urlsplit(public_url)
        default_id = parts.hostname or "localhost"
        default_origin = f"{parts.scheme}://{parts.netloc}"
    else:
        default_id = "localhost"
        default_origin = f"{'https' if tls else 'http'}://localhost:{port}"
    return RelyingParty(rp_id or default_id, (origin or default_origin).rstrip("/"))


class PasskeyTable:
    """The passkeys of the operators log, folded from its records."""

    def __init__(self) -> None:
        self.credentials: dict[str, Credential] = {}  # by credential_id, in order
        self.sign_counts: dict[str, int] = {}

    def fold(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind == OperatorKind.PASSKEY_REGISTERED:
            credential = Credential.from_record(record)
            self.credentials[credential.credential_id] = credential
            self.sign_counts[credential.credential_id] = record["sign_count"]
        elif kind == OperatorKind.PASSKEY_REVOKED:
            found = self.credentials.get(record["credential_id"])
            if found is not None and found.revoked_at is None:
                self.credentials[found.credential_id] = attrs.evolve(found, revoked_at=record["ts"])

    def of(self, by_id: str) -> list[Credential]:
        return [c for c in self.credentials.values() if c.by_id == by_id]


class OperatorsWriter(Protocol):
    """What of ``guardd.operators.Operators`` this module uses."""

    passkeys: PasskeyTable

    async def write(self, fields: dict[str, Any], check: Callable[[], None] | None = None) -> None:
        """Append ``fields`` to the operators log once ``check`` passes."""

    async def refresh(self) -> None:
        """Read what other nodes wrote first."""


def person(operator: Operator | None) -> Operator:
    """The operator, who must be someone a passkey can belong to."""
    if operator is None or operator.via == VIA_ADMIN_TOKEN:
        raise ApiForbidden(NO_PERSON)
    return operator


def passkey_json(credential: Credential) -> dict[str, Any]:
    return {
        "credential_id": credential.credential_id,
        "by_id": credential.by_id,
        "alg": credential.alg,
        "rp_id": credential.rp_id,
        "origin": credential.origin,
        "registered_at": credential.registered_at,
        "status": ACTIVE if credential.revoked_at is None else REVOKED,
        "revoked_at": credential.revoked_at,
    }


class Passkeys:
    """Registration, listing, revocation, and the check of an approval's assertion."""

    def __init__(
        self,
        operators: OperatorsWriter,
        party: RelyingParty,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._operators = operators
        self.party = party
        self._clock = clock
        self._challenges: dict[str, tuple[str, float]] = {}  # b64url challenge -> by_id, expiry

    @property
    def table(self) -> PasskeyTable:
        return self._operators.passkeys

    # -- registration ----------------------------------------------------------------

    def creation_options(self, operator: Operator) -> dict[str, Any]:
        who = person(operator)
        now = self._clock()
        self._challenges = {k: v for k, v in self._challenges.items() if v[1] > now}
        if len(self._challenges) >= MAX_CHALLENGES:
            raise ApiError("too many passkey registrations under way: try again", "unavailable")
        challenge = secrets.token_bytes(32)
        options = generate_registration_options(
            rp_id=self.party.rp_id,
            rp_name=RP_NAME,
            user_name=who.name,
            # A stable handle that tells the authenticator nothing of the person.
            user_id=hashlib.sha256(who.by_id.encode()).digest(),
            user_display_name=who.name,
            challenge=challenge,
            timeout=TIMEOUT_MS,
            attestation=AttestationConveyancePreference.NONE,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
            exclude_credentials=[
                PublicKeyCredentialDescriptor(id=unb64url(c.credential_id, "credential ID"))
                for c in self.table.of(who.by_id)
                if c.revoked_at is None
            ],
            supported_pub_key_algs=ALGORITHMS,
        )
        self._challenges[b64url(challenge)] = (who.by_id, now + CHALLENGE_SECS)
        out: dict[str, Any] = json.loads(options_to_json(options))
        return out

    async def register(self, operator: Operator, credential: dict[str, Any]) -> Credential:
        who = person(operator)
        challenge = self._take_challenge(who, credential)
        try:
            verified = verify_registration_response(
                credential=credential,
                expected_challenge=challenge,
                expected_rp_id=self.party.rp_id,
                expected_origin=self.party.origin,
                require_user_verification=True,
                supported_pub_key_algs=ALGORITHMS,
            )
        except InvalidRegistrationResponse as exc:
            why = str(exc).replace(" See __cause__ for more info", "")  # the library's hint
            raise ApiForbidden(f"passkey registration does not verify: {why}") from None
        except (WebAuthnException, ValueError, KeyError, TypeError, IndexError):
            # An attestation the library cannot even read (CBOR, key, JSON).
            raise BadRequest("the body is no WebAuthn registration credential") from None
        credential_id = b64url(verified.credential_id)
        alg = int(decode_credential_public_key(verified.credential_public_key).alg)

        def check() -> None:
            if credential_id in self.table.credentials:
                raise ApiError(f"passkey {credential_id} is registered already", "invalid_state")

        fields = {
            "kind": OperatorKind.PASSKEY_REGISTERED,
            "credential_id": credential_id,
            "public_key": b64url(verified.credential_public_key),
            "alg": alg,
            "rp_id": self.party.rp_id,
            "origin": self.party.origin,
            "sign_count": verified.sign_count,
            "by": who.name,
            "by_id": who.by_id,
        }
        await self._operators.write(fields, check)
        return self.table.credentials[credential_id]

    def _take_challenge(self, who: Operator, credential: dict[str, Any]) -> bytes:
        """The registration challenge the credential answers, used up now."""
        try:
            client_data = json.loads(
                unb64url(credential["response"]["clientDataJSON"], "clientDataJSON")
            )
            text = client_data["challenge"]
            if not isinstance(text, str):
                raise TypeError(text)
        except (KeyError, TypeError, ValueError):
            raise BadRequest("the body is no WebAuthn registration credential") from None
        found = self._challenges.pop(text.rstrip("="), None)
        if found is None or found[1] <= self._clock():
            raise ApiForbidden(
                "passkey registration challenge is unknown, used or expired: ask for new options"
            )
        if found[0] != who.by_id:
            raise ApiForbidden("passkey registration challenge was given to another operator")
        return unb64url(text, "challenge")

    # -- listing and revocation ------------------------------------------------------

    async def listed(self, operator: Operator, *, every: bool) -> list[Credential]:
        await self._operators.refresh()
        if every:
            return list(self.table.credentials.values())
        return self.table.of(person(operator).by_id)

    async def revoke(self, credential_id: str, by: Operator) -> Credential:
        fields, check = revocation(
            OperatorKind.PASSKEY_REVOKED,
            "credential_id",
            credential_id,
            by,
            self.table.credentials.get,
            "passkey",
        )
        await self._operators.write(fields, check)
        return self.table.credentials[credential_id]

    # -- approvals -------------------------------------------------------------------

    def request_options(
        self, operator: Operator, subject: Subject, decision: str
    ) -> dict[str, Any]:
        """The WebAuthn request options whose challenge is this decision's binding."""
        who = person(operator)
        mine = [c for c in self.table.of(who.by_id) if c.revoked_at is None]
        if not mine:
            raise ApiForbidden(f"{who.name} has no passkey: register one first")
        fields = binding_fields(
            subject.log_id, subject.action_id, subject.request_hash, decision, who.by_id
        )
        challenge = binding(**fields)
        return {
            "challenge": b64url(challenge),
            "rpId": self.party.rp_id,
            "allowCredentials": [{"type": "public-key", "id": c.credential_id} for c in mine],
            "userVerification": "required",
            "timeout": TIMEOUT_MS,
            "binding": fields,
            "passkey_required": subject.passkey_approve
            if decision == APPROVE
            else subject.passkey_reject,
        }

    def check(
        self, operator: Operator, subject: Subject, decision: str, assertion: Any
    ) -> dict[str, str]:
        """The assertion's fields as the record carries them, once it proves
        ``operator``'s ``decision`` on the subject; ApiForbidden naming what failed."""
        who = person(operator)
        proof = assertion_fields(assertion)
        credential = self.table.credentials.get(proof["credential_id"])
        if credential is None:
            raise ApiForbidden("passkey credential is not registered")
        if credential.by_id != who.by_id:
            raise ApiForbidden(f"passkey credential is not registered to {who.name}")
        if credential.revoked_at is not None:
            raise ApiForbidden(f"passkey credential was revoked at {credential.revoked_at}")
        if credential.rp_id != self.party.rp_id:
            raise ApiForbidden(f"passkey credential was registered for rp ID {credential.rp_id}")
        challenge = binding(
            subject.log_id, subject.action_id, subject.request_hash, decision, who.by_id
        )
        count = self.table.sign_counts.get(credential.credential_id, 0)
        try:
            count = check_assertion(
                proof, credential, challenge, origins=(self.party.origin,), sign_count=count
            )
        except PasskeyError as exc:
            raise ApiForbidden(str(exc)) from None
        if count > self.table.sign_counts.get(credential.credential_id, 0):
            self.table.sign_counts[credential.credential_id] = count
        return proof


def assertion_fields(assertion: Any) -> dict[str, str]:
    """The four fields a record keeps of an assertion (``PublicKeyCredential``
    JSON, as ``credential.toJSON()`` gives it). BadRequest when it is none."""
    try:
        response = assertion["response"]
        if assertion.get("type", "public-key") != "public-key":
            raise ValueError("type")
        if assertion.get("rawId", assertion["id"]) != assertion["id"]:
            raise ValueError("rawId")
        proof = {
            "credential_id": assertion["id"],
            "authenticator_data": response["authenticatorData"],
            "client_data_json": response["clientDataJSON"],
            "signature": response["signature"],
        }
        return proof_of({k: v.rstrip("=") if isinstance(v, str) else v for k, v in proof.items()})
    except PasskeyError as exc:
        raise BadRequest(str(exc)) from None
    except (KeyError, TypeError, AttributeError, ValueError):
        raise BadRequest(
            "passkey is no WebAuthn assertion: send the PublicKeyCredential JSON"
        ) from None
