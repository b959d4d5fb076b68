"""Named policies' versions: sealed like records, and every part checked
when read back (hash, signature, chain, name)."""

from __future__ import annotations

import pytest

from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.policies import (
    PolicyStoreError,
    Version,
    seal_version,
    valid_name,
    verify_versions,
)
from tests.agents_runtime.support import TEST_PUBLIC_KEY, TEST_SIGNER

TS = "2026-01-01T00:00:00.000000Z"
POLICY = {"budget": 10, "scar_limit": 5, "tools": {}}


def two_versions(signer: Signer = TEST_SIGNER) -> list[Version]:
    first = seal_version("fleet", POLICY, after=None, ts=TS, signer=signer)
    second = seal_version("fleet", {**POLICY, "budget": 20}, after=first, ts=TS, signer=signer)
    return [first, second]


def test_versions_chain_from_one_and_verify() -> None:
    versions = two_versions()
    assert [v.version for v in versions] == [1, 2]
    read = verify_versions("fleet", [v.line for v in versions], TEST_PUBLIC_KEY)
    assert read == versions
    assert read[1].policy["budget"] == 20
    assert canonical.loads(versions[1].line)["prev"] == canonical.loads(versions[0].line)["hash"]


def test_an_edited_policy_fails_its_hash() -> None:
    lines = [v.line for v in two_versions()]
    lines[1] = lines[1].replace(b'"budget":20', b'"budget":99')
    with pytest.raises(PolicyStoreError, match=r"^named policy fleet, version 2: hash does not"):
        verify_versions("fleet", lines, TEST_PUBLIC_KEY)


def test_a_version_signed_by_another_key_fails_its_signature() -> None:
    lines = [v.line for v in two_versions(Signer(bytes(32)))]
    with pytest.raises(PolicyStoreError, match=r"^named policy fleet, version 1: signature"):
        verify_versions("fleet", lines, TEST_PUBLIC_KEY)


def test_a_missing_first_version_breaks_the_chain() -> None:
    lines = [v.line for v in two_versions()][1:]
    with pytest.raises(PolicyStoreError, match=r"^named policy fleet, version 1: names another"):
        verify_versions("fleet", lines, TEST_PUBLIC_KEY)


def test_a_version_under_another_name_is_refused() -> None:
    lines = [v.line for v in two_versions()]
    with pytest.raises(PolicyStoreError, match=r"names another policy or version"):
        verify_versions("other", lines, TEST_PUBLIC_KEY)


@pytest.mark.parametrize(
    ("name", "valid"),
    [("fleet", True), ("a" * 64, True), ("a" * 65, False), ("", False), ("a/b", False)],
)
def test_names_are_as_agent_ids(name: str, valid: bool) -> None:
    assert valid_name(name) is valid
