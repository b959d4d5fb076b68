"""Named (fleet) policies as the store keeps them: one signed line per version.

A named policy is a chain of versions, each sealed exactly like a log
record (``record.seal``: canonical JSON, SHA-256, Ed25519 under the audit
key, ``prev`` the hash of the version before) with ``kind`` ``named_policy``,
its ``name``, its ``version`` (1, 2, ...; its ``seq`` is ``version - 1``)
and the ``policy`` as the agents' ``policy`` records hold it. Whoever reads
a version back checks all of it (``verify_versions``), so a policy edited in
the store is refused rather than handed to a fleet.

``PolicyStore`` is the seam: the file store keeps a name's versions as one
file under the data dir (``files/policies.py``), the PostgreSQL store as
rows (``postgres/policies.py``). A store writes a version durably before
``put`` returns; nothing else is kept there (which agents follow a policy
is read from their logs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol

import attrs
import nacl.exceptions
import nacl.signing

from agents_runtime.errors import GuardError
from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head, content_hash, seal, signing_message

KIND = "named_policy"
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as an agent ID: it names a file too


def valid_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


class PolicyStoreError(GuardError):
    """A named policy that cannot be read, fails verification, or cannot be written."""


@attrs.frozen
class Version:
    """One version of a named policy, as verified."""

    name: str
    version: int
    policy: dict[str, Any]  # as written: the parsed form of the policy's JSON
    ts: str
    line: bytes  # canonical JSON, without newline

    @property
    def head(self) -> Head:
        return Head(self.version - 1, canonical.loads(self.line)["hash"])


def seal_version(
    name: str, policy: dict[str, Any], *, after: Version | None, ts: str, signer: Signer
) -> Version:
    """The version after ``after`` (None: version 1), sealed."""
    prev = after.head if after is not None else Head.empty()
    version = prev.seq + 2
    fields = {"kind": KIND, "name": name, "version": version, "policy": policy}
    sealed = seal(fields, prev=prev, ts=ts, signer=signer)
    line = sealed.line[:-1]
    return Version(name, version, canonical.loads(line)["policy"], ts, line)


def verify_versions(name: str, lines: Iterable[bytes], public_key: bytes) -> list[Version]:
    """Every version of ``name`` from its lines, oldest first, each checked:
    its hash, its signature under ``public_key``, its place in the chain,
    its name. PolicyStoreError naming the first that fails."""
    key = nacl.signing.VerifyKey(public_key)
    out: list[Version] = []
    prev = Head.empty()
    for line in lines:
        where = f"named policy {name}, version {prev.seq + 2}"
        try:
            record = canonical.loads(line)
        except GuardError as exc:
            raise PolicyStoreError(f"{where}: not canonical JSON: {exc}") from None
        if not isinstance(record, dict) or record.get("kind") != KIND:
            raise PolicyStoreError(f"{where}: not a named policy")
        if record.get("name") != name or record.get("version") != prev.seq + 2:
            raise PolicyStoreError(f"{where}: names another policy or version")
        if record.get("seq") != prev.seq + 1 or record.get("prev") != prev.hash:
            raise PolicyStoreError(f"{where}: does not follow the version before")
        digest = record.get("hash")
        if digest != content_hash(record):
            raise PolicyStoreError(f"{where}: hash does not match content")
        try:
            key.verify(signing_message(digest), bytes.fromhex(record.get("sig", "")))
        except (nacl.exceptions.BadSignatureError, ValueError):
            raise PolicyStoreError(f"{where}: signature does not verify") from None
        out.append(Version(name, record["version"], record["policy"], record["ts"], line))
        prev = Head(record["seq"], digest)
    return out


class PolicyStore(Protocol):
    """Where a store keeps the named policies."""

    def load(self) -> dict[str, list[bytes]]:
        """Every named policy's version lines, oldest first (blocking)."""
        ...

    async def put(self, version: Version) -> None:
        """Add ``version`` durably after the versions of its name (version 1
        starts the name). PolicyStoreError when it cannot be written, or when
        that version exists already (another node wrote it first)."""
        ...

    async def delete(self, name: str) -> None:
        """Remove every version of ``name`` durably."""
        ...
