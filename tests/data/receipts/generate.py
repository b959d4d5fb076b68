"""Make ``vectors.json``, the receipt vectors both clients check. Run from the
repository root:

    python tests/data/receipts/generate.py

Each vector is a receipt and what it is checked against (public key, agent,
tool, input, maximum age, and the clock ``now`` in seconds since the epoch),
with what a checker must answer: the action ID (``action_id``), or the
refusal's exact ``reason`` (docs/receipts.md). The receipts are taken from
the logs already in tests/data (the worked example of docs/receipts.md, and
the tamper vectors of tampered/), changed by hand, and where a case needs a
line whose hash and signature are good, re-sealed with the worked example's
fixed TEST key (seed 00 01 ... 1f; never use it for anything else). The
expected answers are written down here by construction, not taken from a
checker; generation checks that the Python client's ``verify_receipt``
agrees, tests/client_sdk/test_receipt_vectors.py that this script reproduces
the committed file byte for byte, and sdk-ts/test/receipt.test.ts that the
TypeScript client gives every same answer.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import nacl.signing
import rfc8785

from client_sdk import ReceiptError, verify_receipt

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
SEED = bytes.fromhex((DATA / "worked-example.key").read_text().strip())
KEY = nacl.signing.SigningKey(SEED)
PUBLIC_KEY = bytes(KEY.verify_key).hex()
# Another guard's key: a receipt it signed is no proof for this guard.
FOREIGN = nacl.signing.SigningKey(
    hashlib.sha256(b"agent-action-guard receipt vectors: foreign").digest()
)
SIGNING_PREFIX = b"guard-log/1 record\n"

EXAMPLE = (DATA / "receipt-example.jsonl").read_text().splitlines()
REQUESTED, ALLOWED = EXAMPLE[2], EXAMPLE[3]  # act-1 of billing-bot, docs/receipts.md
AGENT, TOOL, INPUT = "billing-bot", "send_invoice", {"amount": 12.5, "to": "ops@example.com"}
NOW = 1740830430  # 2025-03-01T12:00:30Z, 24.75 s after the allowance
ALLOWED_AT = 1740830405.25

TAMPERED = DATA / "tampered"
TAMPER_KEY = (TAMPERED / "public_key.hex").read_text().strip()
VICTIM = (TAMPERED / "original" / "agent-a.jsonl").read_text().splitlines()
OTHER = (TAMPERED / "original" / "agent-b.jsonl").read_text().splitlines()
TAMPER_NOW = 1735689660  # 2025-01-01T00:01:00Z, a minute after those logs were written


def _tampered(name: str) -> list[str]:
    return (TAMPERED / f"{name}.jsonl").read_text().splitlines()


def _fields(line: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(line)
    return record


def seal(fields: dict[str, Any], key: nacl.signing.SigningKey = KEY) -> str:
    """The record line of ``fields`` with its hash and signature made anew."""
    body = {k: v for k, v in fields.items() if k not in ("hash", "sig")}
    digest = hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    sig = key.sign(SIGNING_PREFIX + bytes.fromhex(digest)).signature.hex()
    return rfc8785.dumps(body | {"hash": digest, "sig": sig}).decode()


def changed(line: str, **fields: Any) -> str:
    """``line`` with ``fields`` set (None: removed), re-sealed with the test key."""
    record = _fields(line) | fields
    return seal({k: v for k, v in record.items() if v is not None})


def pair(requested: dict[str, Any], allowed: dict[str, Any] | None = None) -> list[str]:
    """A re-sealed request ``requested`` and its allowance, naming it by hash."""
    line1 = seal(requested)
    base = _fields(ALLOWED) | (allowed or {})
    return [line1, seal(base | {"request_hash": _fields(line1)["hash"]})]


def example(name: str, receipt: Any, **overrides: Any) -> dict[str, Any]:
    """A vector on the worked example: billing-bot's send_invoice, 60 s, at NOW."""
    vector = {
        "name": name,
        "receipt": receipt,
        "public_key": PUBLIC_KEY,
        "agent_id": AGENT,
        "tool": TOOL,
        "input": INPUT,
        "max_age_secs": 60,
        "now": NOW,
    }
    return vector | overrides


def tamper(name: str, receipt: Any, **overrides: Any) -> dict[str, Any]:
    """A vector on act-2 of tampered/'s agent-a: a search for train times."""
    vector = {
        "name": name,
        "receipt": receipt,
        "public_key": TAMPER_KEY,
        "agent_id": "agent-a",
        "tool": "search",
        "input": {"q": "train times"},
        "max_age_secs": 300,
        "now": TAMPER_NOW,
    }
    return vector | overrides


def accepted(vector: dict[str, Any], action_id: str) -> dict[str, Any]:
    return vector | {"action_id": action_id}


def refused(vector: dict[str, Any], reason: str) -> dict[str, Any]:
    return vector | {"reason": reason}


def vectors() -> list[dict[str, Any]]:
    good = [REQUESTED, ALLOWED]
    rq = _fields(REQUESTED)
    # RFC 8785, section 3.2.3: keys sorted as UTF-16 code units, not code points.
    keys = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    unusual = pair(
        rq | {"input": {"keys": keys, "text": "é😀\u2028\t/", "n": [0.1, -0, 1e21, 5e-7]}}
    )
    unusual_input = {
        "n": [0.1, 0, 1e21, 5e-7],
        "text": "é😀\u2028\t/",
        "keys": dict(reversed(keys.items())),
    }
    return [
        # -- accepted
        accepted(example("the worked example", good), "act-1"),
        accepted(
            example(
                "the same input, keys in another order",
                good,
                input={"to": "ops@example.com", "amount": 12.5},
            ),
            "act-1",
        ),
        accepted(example("at the last moment of its age", good, now=ALLOWED_AT + 60), "act-1"),
        accepted(
            example("an input of unusual keys, strings and numbers", unusual, input=unusual_input),
            "act-1",
        ),
        accepted(tamper("act-2 of the untampered log", VICTIM[4:6]), "act-2"),
        accepted(
            tamper(
                "an approval: the request and its allowance, records between them",
                [VICTIM[7], VICTIM[9]],
                tool="send_email",
                input={"to": "ops@example.com"},
            ),
            "act-3",
        ),
        # -- not a receipt
        refused(example("one line", [REQUESTED]), "a receipt is a list of two record lines"),
        refused(
            example("three lines", [*good, ALLOWED]), "a receipt is a list of two record lines"
        ),
        refused(
            example("one string", REQUESTED + ALLOWED), "a receipt is a list of two record lines"
        ),
        refused(example("line 1 is a number", [5, ALLOWED]), "line 1 is not a string"),
        # -- lines changed or re-serialized
        refused(example("line 1 cut short", [REQUESTED[:-1], ALLOWED]), "line 1 is not valid JSON"),
        refused(example("line 1 is an array", ["[1,2]", ALLOWED]), "line 1 is not a JSON object"),
        refused(
            example("line 1 with a space", [REQUESTED.replace('{"', '{ "', 1), ALLOWED]),
            "line 1 is not canonical JSON",
        ),
        refused(
            example(
                "line 1 with a key twice",
                [REQUESTED.replace('"cost":2,', '"cost":2,"cost":2,', 1), ALLOWED],
            ),
            "line 1 is not valid JSON",
        ),
        refused(
            example(
                "line 2 with a key twice, JSON an array holds",
                [REQUESTED, "[" + ALLOWED.replace('"cost":2,', '"cost":2,"cost":2,', 1) + "]"],
            ),
            "line 2 is not valid JSON",
        ),
        refused(
            example("line 1 with NaN", [REQUESTED.replace('"cost":2', '"cost":NaN', 1), ALLOWED]),
            "line 1 is not valid JSON",
        ),
        refused(
            example(
                "line 1 with a lone surrogate character",
                [REQUESTED.replace("ops@", "ops\ud800@", 1), ALLOWED],
            ),
            "line 1 is not valid JSON",
        ),
        refused(
            example(
                "line 1 with a lone surrogate escape",
                [REQUESTED.replace("ops@", "ops\\ud800@", 1), ALLOWED],
            ),
            "line 1 is not canonical JSON",
        ),
        refused(
            example(
                "line 1 with 2^53",
                [REQUESTED.replace('"cost":2', '"cost":9007199254740992', 1), ALLOWED],
            ),
            "line 1 is not canonical JSON",
        ),
        refused(
            example(
                "line 1 with 10^20 as an integer",
                [REQUESTED.replace('"cost":2', '"cost":100000000000000000000', 1), ALLOWED],
            ),
            "line 1 is not canonical JSON",
        ),
        refused(
            example(
                "line 1 with a number beyond a double",
                [REQUESTED.replace('"cost":2', '"cost":1e400', 1), ALLOWED],
            ),
            "line 1 is not canonical JSON",
        ),
        refused(
            example("line 1 with 12.50 for 12.5", [REQUESTED.replace("12.5", "12.50", 1), ALLOWED]),
            "line 1 is not canonical JSON",
        ),
        refused(
            example(
                "line 1 without kind", [seal({k: v for k, v in rq.items() if k != "kind"}), ALLOWED]
            ),
            "line 1 is malformed",
        ),
        refused(
            example(
                "line 2 with its signature in capitals",
                [
                    REQUESTED,
                    ALLOWED.replace(_fields(ALLOWED)["sig"], _fields(ALLOWED)["sig"].upper()),
                ],
            ),
            "line 2 is malformed",
        ),
        # -- content, hash or signature changed
        refused(
            example(
                "line 1's tool changed, hash kept",
                [REQUESTED.replace("send_invoice", "send_invoicf"), ALLOWED],
            ),
            "line 1: hash does not match content",
        ),
        refused(
            example(
                "line 2's remaining changed, hash kept",
                [REQUESTED, ALLOWED.replace('"remaining":98', '"remaining":99')],
            ),
            "line 2: hash does not match content",
        ),
        refused(
            example(
                "line 1's input changed and re-hashed, signature kept",
                [
                    rfc8785.dumps(
                        (
                            body := {k: v for k, v in rq.items() if k not in ("hash", "sig")}
                            | {"input": INPUT | {"to": "eve@example.com"}}
                        )
                        | {
                            "hash": hashlib.sha256(rfc8785.dumps(body)).hexdigest(),
                            "sig": rq["sig"],
                        }
                    ).decode(),
                    ALLOWED,
                ],
                input=INPUT | {"to": "eve@example.com"},
            ),
            "line 1: signature does not verify",
        ),
        refused(
            example(
                "checked with another guard's key", good, public_key=bytes(FOREIGN.verify_key).hex()
            ),
            "line 1: signature does not verify",
        ),
        refused(
            example(
                "both lines sealed by another guard",
                [seal(rq, FOREIGN), seal(_fields(ALLOWED), FOREIGN)],
            ),
            "line 1: signature does not verify",
        ),
        refused(
            tamper(
                "tampered: content byte changed", [VICTIM[4], _tampered("content_byte_changed")[5]]
            ),
            "line 2: hash does not match content",
        ),
        refused(
            tamper("tampered: hash byte changed", [VICTIM[4], _tampered("hash_byte_changed")[5]]),
            "line 2: hash does not match content",
        ),
        refused(
            tamper(
                "tampered: signature byte changed",
                [VICTIM[4], _tampered("signature_byte_changed")[5]],
            ),
            "line 2: signature does not verify",
        ),
        refused(
            tamper(
                "tampered: re-signed with a foreign key", _tampered("resigned_foreign_key")[4:6]
            ),
            "line 1: signature does not verify",
        ),
        refused(
            tamper(
                "tampered: foreign signatures, genesis kept",
                _tampered("resigned_foreign_key_genesis_kept")[4:6],
            ),
            "line 1: signature does not verify",
        ),
        # -- genuine lines that are not this allowance
        refused(
            example("the lines swapped", good[::-1]),
            "line 1 is action_allowed, not action_requested",
        ),
        refused(
            tamper("tampered: records swapped", _tampered("records_swapped")[4:6]),
            "line 2 is outcome, not action_allowed",
        ),
        refused(
            tamper("a denial", VICTIM[12:14], tool="rm_rf", input={"path": "/"}),
            "line 2 is action_denied, not action_allowed",
        ),
        refused(
            example(
                "an allowance written before receipts existed",
                [REQUESTED, changed(ALLOWED, log_id=None, request_hash=None)],
            ),
            "the allowance names no request (written before receipts existed)",
        ),
        refused(
            tamper("two genuine lines of different actions", [VICTIM[2], VICTIM[5]]),
            "the allowance is for another request",
        ),
        refused(
            tamper(
                "tampered: another agent's allowance",
                [VICTIM[4], _tampered("record_from_other_agent")[5]],
            ),
            "the allowance is for another request",
        ),
        refused(
            example(
                "an allowance naming the request, of another action",
                pair(rq, {"action_id": "act-2"}),
            ),
            "the allowance is for another request",
        ),
        refused(
            tamper("another agent's receipt", OTHER[4:6]),
            "receipt is for agent 'agent-b', not 'agent-a'",
        ),
        refused(
            example("for another agent", good, agent_id="other-bot"),
            "receipt is for agent 'billing-bot', not 'other-bot'",
        ),
        refused(
            example(
                "an agent ID with a bell and an accent",
                pair(rq, {"log_id": "bot\u0007é"}),
                agent_id="bot",
            ),
            "receipt is for agent 'bot\\x07é', not 'bot'",
        ),
        refused(
            example("for another tool", good, tool="send_email"),
            "receipt is for tool 'send_invoice', not 'send_email'",
        ),
        refused(
            example("a tool name with a quote", pair(rq | {"tool": "o'reilly"})),
            "receipt is for tool \"o'reilly\", not 'send_invoice'",
        ),
        refused(
            example("for another input", good, input={"to": "eve@example.com", "amount": 12.5}),
            "receipt is for another input",
        ),
        refused(
            example("for an input with one more key", good, input=INPUT | {"cc": None}),
            "receipt is for another input",
        ),
        refused(
            example(
                "for an input of a string for the number", good, input=INPUT | {"amount": "12.5"}
            ),
            "receipt is for another input",
        ),
        # -- too old, or no time at all
        refused(
            example("expired", good, now=NOW + 100),
            "receipt expired: allowed at 2025-03-01T12:00:05.250000Z, more than 60 seconds ago",
        ),
        refused(
            example("expired after half a second", good, max_age_secs=0.5),
            "receipt expired: allowed at 2025-03-01T12:00:05.250000Z, more than 0.5 seconds ago",
        ),
        refused(
            example(
                "expired after a million seconds", good, max_age_secs=1000000, now=NOW + 2000000
            ),
            "receipt expired: allowed at 2025-03-01T12:00:05.250000Z, more than 1e+06 seconds ago",
        ),
        refused(
            example("a time that is not one", pair(rq, {"ts": "yesterday"})),
            "line 2 is malformed",
        ),
        refused(
            example("a time without its Z", pair(rq, {"ts": "2025-03-01T12:00:05.250000"})),
            "line 2 is malformed",
        ),
    ]


def answer(vector: dict[str, Any]) -> dict[str, str]:
    """What the Python client answers for ``vector``, as the vector writes it."""
    arguments = {k: vector[k] for k in ("agent_id", "tool", "input", "max_age_secs", "now")}
    try:
        return {"action_id": verify_receipt(vector["receipt"], vector["public_key"], **arguments)}
    except ReceiptError as error:
        return {"reason": error.reason}


def check(vector: dict[str, Any]) -> None:
    """Generation stops when the Python client disagrees with a vector."""
    expected = {k: vector[k] for k in ("action_id", "reason") if k in vector}
    got = answer(vector)
    if got != expected:
        raise SystemExit(
            f"{vector['name']}: verify_receipt answers {got}, the vector says {expected}"
        )


def generate(out: Path) -> None:
    made = vectors()
    names = [vector["name"] for vector in made]
    assert len(set(names)) == len(names), "two vectors of one name"
    for vector in made:
        check(vector)
    document = {
        "about": "Receipts and what verify_receipt must answer: see generate.py",
        "vectors": made,
    }
    # ASCII only: one vector holds a lone surrogate, which UTF-8 cannot carry.
    (out / "vectors.json").write_text(json.dumps(document, indent=1, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
