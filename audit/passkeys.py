"""Passkey-signed approvals, checked offline (docs/log-format.md, "Passkeys").

From an agent's log and the operators log alone, each decision record that
carries ``passkey`` (``action_allowed`` or ``action_denied`` of an approval,
``approval_recorded``, ``action_rejected``) is checked: the credential was
registered to the record's ``by_id`` before the decision and not revoked by
then; the challenge its clientDataJSON signed is the binding recomputed
from this log's own records (its ``log_id``, the action's ``action_requested``
hash, the decision and ``by_id``); it came from the origin and for the RP ID
the passkey was registered with, with user presence and verification; and
its signature verifies with the registered key. A decision without one,
where the policy in force wanted one, fails too: stripping an assertion and
re-signing the log with the audit key is caught.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from agents_runtime.core.policy import Policy, parse_policy
from agents_runtime.errors import PasskeyError, PolicyError
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.operators import OperatorKind, verify_operators
from agents_runtime.log.passkeys import (
    APPROVE,
    REJECT,
    Credential,
    binding,
    check_assertion,
    proof_of,
)
from audit.errors import AuditError

# The decision records a passkey may sign, and what each one decides.
_SIGNED = {
    Kind.ACTION_ALLOWED.value: APPROVE,
    Kind.ACTION_DENIED.value: APPROVE,  # an approval whose re-run checks then failed
    Kind.APPROVAL_RECORDED.value: APPROVE,
    Kind.ACTION_REJECTED.value: REJECT,
}
_WORD = {APPROVE: "approval", REJECT: "rejection"}
NO_PASSKEY = "the policy wants a passkey and none is there"


@attrs.frozen
class PasskeyFailure:
    seq: int
    reason: str
    decision: str = APPROVE

    def __str__(self) -> str:
        return f"{_WORD[self.decision]} at seq {self.seq}: {self.reason}"


@attrs.frozen
class PasskeyReport:
    checked: int  # decisions signed by a passkey, each checked
    failures: tuple[PasskeyFailure, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    def text(self) -> list[str]:
        if self.ok:
            return [f"passkeys:   {self.checked} signed decisions, every one verifies"]
        return [f"passkeys:   FAILED: {failure}" for failure in self.failures]


def credentials(lines: Iterable[bytes]) -> dict[str, Credential]:
    """The passkeys of an operators log (verified by the caller), by credential ID."""
    found: dict[str, Credential] = {}
    for line in lines:
        record = canonical.loads(line)
        kind = record.get("kind")
        if kind == OperatorKind.PASSKEY_REGISTERED:
            credential = Credential.from_record(record)
            found.setdefault(credential.credential_id, credential)
        elif kind == OperatorKind.PASSKEY_REVOKED:
            old = found.get(record["credential_id"])
            if old is not None and old.revoked_at is None:
                found[old.credential_id] = attrs.evolve(old, revoked_at=record["ts"])
    return found


def _at(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def check_records(
    records: Iterable[dict[str, Any]], passkeys: dict[str, Credential] | None
) -> PasskeyReport:
    """Check every passkey-signed decision of one agent's (verified) records.
    ``passkeys`` None: no operators log was found, so none can be checked."""
    log_id: str | None = None
    requests: dict[str, tuple[str, str]] = {}  # action_id -> (request hash, tool)
    held_by: dict[str, str] = {}  # action_id -> the policy rule that held it
    policy: Policy | None = None
    checked = 0
    failures: list[PasskeyFailure] = []
    for record in records:
        kind = record.get("kind")
        seq = record.get("seq", -1)
        if seq == 0:
            log_id = record.get("log_id")
        if kind == Kind.ACTION_REQUESTED:
            requests[record["action_id"]] = (record["hash"], record["tool"])
            continue
        if kind == Kind.APPROVAL_REQUIRED and isinstance(record.get("rule"), str):
            held_by[record["action_id"]] = record["rule"]
            continue
        if kind == Kind.POLICY:
            try:
                policy = parse_policy(record["policy"])
            except PolicyError:
                policy = None
            continue
        decision = _SIGNED.get(kind)  # type: ignore[arg-type]
        if decision is None or (kind == Kind.ACTION_DENIED and "by" not in record):
            continue
        if kind == Kind.ACTION_ALLOWED and "approved_by" not in record:
            continue  # allowed at request time, or on a grant: nobody approved it
        request = requests.get(record.get("action_id", ""))
        if "passkey" not in record:
            if request is not None and policy is not None:
                rule = held_by.get(record["action_id"])
                if policy.passkey_needed(request[1], decision, rule):
                    failures.append(
                        PasskeyFailure(
                            seq, "the policy wants a passkey and none is there", decision
                        )
                    )
            continue
        checked += 1
        why = _why(record, decision, log_id, request, passkeys)
        if why is not None:
            failures.append(PasskeyFailure(seq, why, decision))
    return PasskeyReport(checked, tuple(failures))


def _why(
    record: dict[str, Any],
    decision: str,
    log_id: str | None,
    request: tuple[str, str] | None,
    passkeys: dict[str, Credential] | None,
) -> str | None:
    if passkeys is None:
        return "no operators log to check its passkey against (give --operators PATH)"
    by_id = record.get("by_id")
    if not isinstance(by_id, str) or log_id is None or request is None:
        return "passkey on a record without by_id or without its request"
    try:
        proof = proof_of(record["passkey"])
    except PasskeyError as exc:
        return str(exc)
    credential = passkeys.get(proof["credential_id"])
    if credential is None:
        return "passkey credential is not registered in the operators log"
    if credential.by_id != by_id:
        return f"passkey credential is registered to {credential.by_id}, not {by_id}"
    at = _at(record["ts"])
    if _at(credential.registered_at) > at:
        return f"passkey credential was registered after the decision ({credential.registered_at})"
    if credential.revoked_at is not None and _at(credential.revoked_at) <= at:
        return f"passkey credential was revoked before the decision ({credential.revoked_at})"
    challenge = binding(log_id, record["action_id"], request[0], decision, by_id)
    try:
        check_assertion(proof, credential, challenge, origins=(credential.origin,))
    except PasskeyError as exc:
        return str(exc)
    return None


def operators_passkeys(
    lines: list[bytes], *, public_key: bytes | None, agent_key: str | None
) -> dict[str, Credential]:
    """The passkeys of an operators log once it verifies, signed by the same
    key as the agent's log (``agent_key``, its genesis key); AuditError otherwise."""
    report = verify_operators(lines, public_key=public_key)
    if not report.ok:
        failure = report.failure
        assert failure is not None
        raise AuditError(
            f"the operators log fails at line {failure.line} (seq {failure.seq}): {failure.reason}"
        )
    if lines and agent_key is not None:
        genesis = canonical.loads(lines[0])
        if genesis.get("public_key") != agent_key:
            raise AuditError("the operators log is signed by another key than the agent's log")
    return credentials(lines)


def operators_lines(path: Path) -> list[bytes]:
    """The lines of the operators log file at ``path``."""
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as exc:
        raise AuditError(f"cannot read the operators log {path}: {exc}") from None


def check_source(
    items: list[bytes | None], lines: list[bytes] | None, *, public_key: bytes | None
) -> PasskeyReport | None:
    """The passkey check of a verified log's items, with the operators log's
    ``lines`` (None: there is none); None when no record has a passkey and
    no policy of the log wants one."""
    records = [canonical.loads(item) for item in items if item is not None]
    if not any("passkey" in r or _wants_passkeys(r) for r in records):
        return None
    passkeys = None
    if lines is not None:
        agent_key = records[0].get("public_key") if records and records[0]["seq"] == 0 else None
        passkeys = operators_passkeys(lines, public_key=public_key, agent_key=agent_key)
    return check_records(records, passkeys)


def _wants_passkeys(record: dict[str, Any]) -> bool:
    if record.get("kind") != Kind.POLICY:
        return False
    policy = record.get("policy")
    if not isinstance(policy, dict):
        return False
    rules = [*(policy.get("tools") or {}).values(), policy.get("default") or {}]
    rules = [r for r in rules if isinstance(r, dict)]
    inner = [x for r in rules if isinstance(r.get("rules"), list) for x in r["rules"]]
    return any(isinstance(r, dict) and r.get("approval_passkey") for r in [*rules, *inner])
