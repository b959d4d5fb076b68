"""docs/receipts.md: its worked example is the test log's receipt, and every
outcome the page gives for it is what ``verify_receipt`` answers."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import rfc8785

from client_sdk import ReceiptError, verify_receipt

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "receipts.md").read_text()
LOG = ROOT / "tests" / "data" / "receipt-example.jsonl"
PUBLIC_KEY = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
NOW = 1740830430  # 2025-03-01T12:00:30Z
INPUT = {"to": "ops@example.com", "amount": 12.5}


def _doc_receipt() -> list[str]:
    blocks = re.findall(r"```json\n(.*?)```", DOC, re.DOTALL)
    (block,) = [b for b in blocks if b.lstrip().startswith("[")]
    receipt = json.loads(block)
    assert isinstance(receipt, list)
    return receipt


def check(**overrides: object) -> str:
    fields: dict[str, object] = {
        "agent_id": "billing-bot",
        "tool": "send_invoice",
        "input": INPUT,
        "max_age_secs": 60,
        "now": NOW,
    }
    return verify_receipt(_doc_receipt(), PUBLIC_KEY, **(fields | overrides))  # type: ignore[arg-type]


def test_the_pages_receipt_is_lines_3_and_4_of_the_example_log() -> None:
    assert _doc_receipt() == LOG.read_bytes().decode().splitlines()[2:4]


def test_the_pages_receipt_verifies_as_the_page_says() -> None:
    assert check() == "act-1"
    assert NOW == 1740830430


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        pytest.param(
            {"input": {"to": "eve@example.com", "amount": 12.5}},
            "receipt is for another input",
            id="another-input",
        ),
        pytest.param(
            {"agent_id": "other-bot"},
            "receipt is for agent 'billing-bot', not 'other-bot'",
            id="another-agent",
        ),
        pytest.param(
            {"now": 1740830530},
            "receipt expired: allowed at 2025-03-01T12:00:05.250000Z, more than 60 seconds ago",
            id="expired",
        ),
    ],
)
def test_the_pages_refusals_are_the_reasons_given(
    overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(ReceiptError) as caught:
        check(**overrides)
    assert caught.value.reason == reason
    assert f"`{reason}`" in " ".join(DOC.split())


def test_the_hashes_on_the_page_are_the_lines_hashes() -> None:
    requested, allowed = (json.loads(line) for line in _doc_receipt())
    for record in (requested, allowed):
        body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
        assert hashlib.sha256(rfc8785.dumps(body)).hexdigest() == record["hash"]
        assert f"`{record['hash'][:8]}…{record['hash'][-5:]}`" in DOC
    assert allowed["request_hash"] == requested["hash"]
    assert rfc8785.dumps(requested["input"]).decode() in DOC
