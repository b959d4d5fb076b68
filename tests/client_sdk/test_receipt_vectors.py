"""The shared receipt vectors (tests/data/receipts/): the Python client gives
every answer they hold, and their generator reproduces them byte for byte.
The TypeScript client checks the same file (sdk-ts/test/receipt.test.ts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client_sdk import ReceiptError, verify_receipt

DATA = Path(__file__).resolve().parents[1] / "data" / "receipts"
VECTORS: list[dict[str, Any]] = json.loads((DATA / "vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("vector", [pytest.param(v, id=v["name"]) for v in VECTORS])
def test_verify_receipt_gives_the_vectors_answer(vector: dict[str, Any]) -> None:
    def check() -> str:
        return verify_receipt(
            vector["receipt"],
            vector["public_key"],
            agent_id=vector["agent_id"],
            tool=vector["tool"],
            input=vector["input"],
            max_age_secs=vector["max_age_secs"],
            now=vector["now"],
        )

    if "action_id" in vector:
        assert check() == vector["action_id"]
    else:
        with pytest.raises(ReceiptError) as caught:
            check()
        assert caught.value.reason == vector["reason"]


def test_the_vectors_accept_and_refuse_and_name_each_case_once() -> None:
    names = [v["name"] for v in VECTORS]
    assert len(names) == len(set(names))
    assert all(("action_id" in v) != ("reason" in v) for v in VECTORS)
    assert sum("action_id" in v for v in VECTORS) >= 5
    assert sum("reason" in v for v in VECTORS) >= 40


def test_generator_reproduces_the_committed_vectors(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "generate.py"), str(tmp_path)], check=True, timeout=60
    )
    assert (tmp_path / "vectors.json").read_bytes() == (DATA / "vectors.json").read_bytes(), (
        "vectors.json is not what generate.py makes: run python tests/data/receipts/generate.py"
    )
