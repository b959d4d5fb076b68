"""Checkpoint files: each agent's committed head kept beside its log, signed.

``<checkpoint-dir>/<agent_id>.checkpoint`` is a C2SP signed note in the
tlog-checkpoint layout (docs/log-format.md, "guardd's checkpoint files"):

    guardd/<agent_id>
    <size: the number of records, head seq + 1>
    <head hash, standard base64>

    — guardd <base64(key ID || Ed25519 signature of the three lines)>

signed by the audit key under the key name ``guardd``. The hash chain shows
any change inside a log, but not complete lines cut off its end: the
shorter file is a valid log. Startup verifies each log against its
checkpoint, so a log cut while guardd was stopped is quarantined
(``truncated before checkpoint``), and one rewritten from some record on
fails at the checkpoint's seq (``checkpoint hash mismatch``). A checkpoint
whose signature verifies commits to every record up to it through the
chain, so a start checks the Ed25519 signatures of the records after it
only; one that does not verify (forged, another agent's, another key's) is
ignored with a warning and the log verified whole. Files of older versions
hold one line ``<seq>:<hash>``: they are read and held against the log as
before, vouch for no signature, and are replaced by signed ones.

A checkpoint trails its log: the registry writes the heads that moved at
most once a second, off the decision path, and all of them at a graceful
stop. It only ever names a head whose records are fsynced, so a crash leaves
it at or behind the log, never ahead of it. Each file is replaced whole
(temporary file, fsync, rename, directory fsync), so it is never half
written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs
import nacl.bindings
import nacl.exceptions

from agents_runtime.log.fsutil import fsync_dir
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head
from agents_runtime.log.verify import Checkpoint

CHECKPOINT_SUFFIX = ".checkpoint"
TMP_SUFFIX = ".tmp"
MAX_SIZE = 1024  # a signed checkpoint is under 250 bytes; a larger file is not one of ours
KEY_NAME = "guardd"  # the signed-note key name of the audit key
ORIGIN_PREFIX = "guardd/"  # a checkpoint's origin line: ORIGIN_PREFIX + agent_id
ED25519 = b"\x01"  # the signed-note signature type of an Ed25519 key
SIGNATURE_DASH = "\u2014 "  # a signature line starts with an em dash and a space

_SIZE = re.compile(r"[1-9][0-9]{0,18}")
# A key name holds no space and no control character (the note has none).
_SIGNATURE_LINE = re.compile(r"\u2014 ([^\x00-\x20\x7f]+) ([A-Za-z0-9+/=]+)")


class CheckpointFileError(ValueError):
    """A checkpoint file that exists but cannot be read as one."""


@attrs.frozen
class CheckpointDir:
    root: Path

    def path(self, agent_id: str) -> Path:
        return self.root / f"{agent_id}{CHECKPOINT_SUFFIX}"

    def prepare(self) -> None:
        """Create the directory (0700) if it is missing."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def read(self, agent_id: str) -> CheckpointFile | None:
        """The agent's checkpoint file; None when it has none;
        CheckpointFileError when the file is there but is not a checkpoint."""
        try:
            return read_checkpoint_file(self.path(agent_id))
        except FileNotFoundError:
            return None

    def agent_ids(self) -> list[str]:
        """IDs of every checkpoint file in the directory."""
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        ids = []
        for entry in entries:
            name = entry.name
            if name.endswith(CHECKPOINT_SUFFIX):
                agent_id = name[: -len(CHECKPOINT_SUFFIX)]
                if valid_agent_id(agent_id):
                    ids.append(agent_id)
        return sorted(ids)

    def write(
        self, heads: Mapping[str, Head], signer: Signer, sync_first: Iterable[Path] = ()
    ) -> None:
        """Replace the checkpoint of each agent in ``heads`` by one signed by
        ``signer``, then fsync the directory once. ``sync_first``: logs to
        fsync before any checkpoint names their records (logs loaded at
        startup, which this process has not fsynced itself). Raises
        OSError; files already replaced stay."""
        for log_path in sync_first:
            fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for agent_id, head in heads.items():
            _replace(self.path(agent_id), signed_checkpoint(agent_id, head, signer))
        if heads:
            fsync_dir(self.root)


@attrs.frozen
class CheckpointFile:
    """A checkpoint file as read: the head it names and, when it is a signed
    note (not a one-line file of an older version), what its signature is
    checked with."""

    checkpoint: Checkpoint  # seq and hash as the file states them; never signed
    origin: str | None  # None for a one-line file
    body: bytes | None  # the signed text: the three lines
    signatures: tuple[tuple[str, bytes], ...]  # (key name, key ID || signature)

    @property
    def is_signed_note(self) -> bool:
        return self.body is not None

    def problem(self, public_key: bytes, log_id: str) -> str | None:
        """Why this signed checkpoint cannot be trusted for ``log_id``'s log
        under ``public_key`` (a short phrase), or None when it can."""
        if self.body is None:
            return "it is not signed (a checkpoint of an older version)"
        if self.origin != ORIGIN_PREFIX + log_id:
            return f"its origin is {self.origin!r}, not {ORIGIN_PREFIX + log_id!r}"
        wanted = key_id(public_key)
        for name, blob in self.signatures:
            if name == KEY_NAME and blob[:4] == wanted:
                if len(blob) != 68:
                    return "its signature is malformed"
                try:
                    nacl.bindings.crypto_sign_open(blob[4:] + self.body, public_key)
                except (nacl.exceptions.BadSignatureError, ValueError):
                    return "its signature does not verify"
                return None
        return f"it has no signature by the key {KEY_NAME} {public_key.hex()}"

    def trusted(self, public_key: bytes, log_id: str) -> Checkpoint | None:
        """The checkpoint, marked signed, when ``problem`` finds none."""
        if self.problem(public_key, log_id) is not None:
            return None
        return attrs.evolve(self.checkpoint, signed=True)


def key_id(public_key: bytes, name: str = KEY_NAME) -> bytes:
    """The signed-note key ID of an Ed25519 key: the first 4 bytes of
    SHA-256(name, a line feed, the signature type 0x01, the 32-byte key)."""
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public_key).digest()[:4]


def checkpoint_body(agent_id: str, head: Head) -> bytes:
    """The note text of ``head``'s checkpoint: origin, size, root hash."""
    root = base64.b64encode(bytes.fromhex(head.hash)).decode("ascii")
    return f"{ORIGIN_PREFIX}{agent_id}\n{head.seq + 1}\n{root}\n".encode("ascii")


def sign_note(body: bytes, signer: Signer, name: str = KEY_NAME) -> bytes:
    """``body`` (text ending in a line feed) as a signed note with one
    Ed25519 signature by ``signer`` under the key name ``name``."""
    blob = key_id(signer.public_key, name) + signer.sign(body)
    line = f"{SIGNATURE_DASH}{name} {base64.b64encode(blob).decode('ascii')}\n"
    return body + b"\n" + line.encode("utf-8")


def signed_checkpoint(agent_id: str, head: Head, signer: Signer) -> bytes:
    """The bytes of the checkpoint file of ``agent_id`` at ``head``."""
    return sign_note(checkpoint_body(agent_id, head), signer)


def parse_checkpoint(data: bytes) -> CheckpointFile:
    """A checkpoint file's bytes: a signed note, or one line ``<seq>:<hash>``
    of an older version. ValueError when it is neither. Nothing is verified
    here: ``CheckpointFile.problem`` checks the signature."""
    if len(data) > MAX_SIZE:
        raise ValueError(f"longer than {MAX_SIZE} bytes: not a checkpoint")
    if not data.endswith(b"\n"):
        raise ValueError("no final line feed: not a checkpoint")
    if data.count(b"\n") == 1:
        return CheckpointFile(Checkpoint.parse(data[:-1].decode("ascii")), None, None, ())
    text = data.decode("utf-8")
    body, sep, signature_text = text.partition("\n\n")
    lines = body.split("\n")
    if not sep or len(lines) != 3 or not signature_text:
        raise ValueError("not a signed note of three lines, a blank line and signatures")
    origin, size, root = lines
    if not origin.startswith(ORIGIN_PREFIX) or not valid_agent_id(origin[len(ORIGIN_PREFIX) :]):
        raise ValueError(f"origin must be {ORIGIN_PREFIX}<agent id>, not {origin!r}")
    if not _SIZE.fullmatch(size):
        raise ValueError(f"size must be a decimal number of records, not {size!r}")
    try:
        digest = base64.b64decode(root, validate=True)
    except binascii.Error:
        digest = b""
    if len(digest) != 32 or base64.b64encode(digest).decode("ascii") != root:
        raise ValueError(f"root hash must be 32 bytes in standard base64, not {root!r}")
    signatures = []
    for line in signature_text[:-1].split("\n"):
        match = _SIGNATURE_LINE.fullmatch(line)
        blob = _b64(match.group(2)) if match is not None else None
        if match is None or blob is None or len(blob) < 5:
            raise ValueError(f"not a signature line: {line!r}")
        signatures.append((match.group(1), blob))
    checkpoint = Checkpoint(int(size) - 1, digest.hex())
    return CheckpointFile(checkpoint, origin, (body + "\n").encode(), tuple(signatures))


def _b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        return None


def read_checkpoint_file(path: Path) -> CheckpointFile:
    """The checkpoint in ``path``. Raises FileNotFoundError when there is no
    such file, CheckpointFileError when it cannot be read or is not a
    checkpoint."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SIZE + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CheckpointFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        return parse_checkpoint(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointFileError(f"{path}: {exc}") from None


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


__all__ = [
    "CHECKPOINT_SUFFIX",
    "KEY_NAME",
    "CheckpointDir",
    "CheckpointFile",
    "CheckpointFileError",
    "checkpoint_body",
    "key_id",
    "parse_checkpoint",
    "read_checkpoint_file",
    "sign_note",
    "signed_checkpoint",
]
