"""Signing keys, key files and agent tokens.

Key files live in ``<data-dir>/keys``:

- ``audit.key``: the Ed25519 seed (32 bytes) as 64 hex characters.
- ``audit.pub``: the Ed25519 public key as 64 hex characters.
- ``token.key``: 32 random bytes, the secret agent tokens are derived from.
- ``admin.token``: 32 random bytes as unpadded base64url text.

Each is created whole or not at all, with mode 0600 from the start, so
there is no moment at which a secret is readable by others (``fsutil.create_new``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import stat
from pathlib import Path

import attrs
import nacl.bindings
import nacl.exceptions
import nacl.signing

from agents_runtime.errors import KeyFileError
from agents_runtime.log import _sodium_signer
from agents_runtime.log.fsutil import create_new

TOKEN_PREFIX = "agt_"  # noqa: S105 - a prefix, not a secret
TOKEN_CONTEXT = b"agent-token/v1:"


def pynacl_sign(message: bytes, secret: bytes) -> bytes:
    """The reference signing: what SigningKey.sign calls, without building a
    SignedMessage. ``_sodium_signer`` makes the same bytes keeping the GIL."""
    return nacl.bindings.crypto_sign(message, secret)[:64]


_sign = _sodium_signer.gil_holding_sign(pynacl_sign) or pynacl_sign


class Signer:
    """Holds the private key; the only object that can sign records."""

    __slots__ = ("_secret", "public_key")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != nacl.bindings.crypto_sign_SEEDBYTES:
            raise nacl.exceptions.ValueError("an Ed25519 seed is 32 bytes")
        self.public_key, self._secret = nacl.bindings.crypto_sign_seed_keypair(seed)

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``: deterministic (RFC 8032), so
        the same message always gets the very same 64 bytes."""
        return _sign(message, self._secret)

    @property
    def public_key_hex(self) -> str:
        return self.public_key.hex()

    def __repr__(self) -> str:
        return f"Signer(public_key={self.public_key_hex})"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def agent_token(token_key: bytes, agent_id: str) -> str:
    # Not hmac.digest: it lets go of the GIL, and under load the event loop
    # then waits to take it back from the commit thread
    # (docs/benchmarks.md, "Why the fast paths exist").
    mac = hmac.new(token_key, TOKEN_CONTEXT + agent_id.encode(), hashlib.sha256).digest()
    return f"{TOKEN_PREFIX}{agent_id}.{b64url(mac)}"


def token_agent_id(token: str) -> str | None:
    """The agent ID a token claims to be for, or None if it is not agent-shaped."""
    if not token.startswith(TOKEN_PREFIX) or "." not in token:
        return None
    agent_id = token[len(TOKEN_PREFIX) :].rpartition(".")[0]
    return agent_id or None


def agent_token_valid(token_key: bytes, token: str) -> bool:
    agent_id = token_agent_id(token)
    if agent_id is None:
        return False
    expected = agent_token(token_key, agent_id)
    return hmac.compare_digest(expected.encode(), token.encode("utf-8", "surrogatepass"))


@attrs.frozen
class KeyRing:
    """The keys of a data directory. ``signer`` is None in read-only mode."""

    public_key: bytes
    token_key: bytes
    admin_token: str | None  # content of keys/admin.token, if present
    signer: Signer | None = attrs.field(repr=False)

    @property
    def public_key_hex(self) -> str:
        return self.public_key.hex()

    @property
    def read_only(self) -> bool:
        return self.signer is None


def _write_new(path: Path, data: bytes) -> None:
    try:
        create_new(path, data, tmp=path.with_name(f".{path.name}.tmp"))
    except OSError as exc:
        if exc.errno is None or exc.filename is not None:
            raise
        # os.write names no file; a full disk at first start must say which.
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _read_secret(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"{path} is missing") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{path} is readable by group or others (mode {stat.S_IMODE(mode):04o}); "
            f"fix it with: chmod 600 {path}"
        )
    return path.read_bytes()


def _hex_key(path: Path, data: bytes) -> bytes:
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != 32:
        raise KeyFileError(f"{path} does not hold 64 hex characters")
    return key


def create_keys(keys_dir: Path) -> None:
    """Create every missing key file. Only called while no log exists."""
    keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    audit_key, audit_pub = keys_dir / "audit.key", keys_dir / "audit.pub"
    if not audit_key.exists():
        audit_pub.unlink(missing_ok=True)
        _write_new(audit_key, secrets.token_bytes(32).hex().encode() + b"\n")
    if not audit_pub.exists():
        # Also after a crash between the two files: audit.pub is what makes a
        # read-only start possible if audit.key is ever lost.
        seed = _hex_key(audit_key, _read_secret(audit_key))
        public = bytes(nacl.signing.SigningKey(seed).verify_key)
        _write_new(audit_pub, public.hex().encode() + b"\n")
    if not (keys_dir / "token.key").exists():
        _write_new(keys_dir / "token.key", secrets.token_bytes(32))
    if not (keys_dir / "admin.token").exists():
        _write_new(keys_dir / "admin.token", b64url(secrets.token_bytes(32)).encode() + b"\n")


def load_keys(keys_dir: Path) -> KeyRing:
    """Load the key files. Without audit.key the ring is read-only and the
    public key comes from audit.pub."""
    audit_key = keys_dir / "audit.key"
    signer: Signer | None = None
    if audit_key.exists():
        signer = Signer(_hex_key(audit_key, _read_secret(audit_key)))
        public = signer.public_key
        pub_path = keys_dir / "audit.pub"
        if pub_path.exists() and _hex_key(pub_path, pub_path.read_bytes()) != public:
            raise KeyFileError(f"{pub_path} does not match {audit_key}")
    else:
        pub_path = keys_dir / "audit.pub"
        if not pub_path.exists():
            raise KeyFileError(
                f"{audit_key} and {pub_path} are both missing: logs cannot be verified; "
                "restore the keys from a backup"
            )
        public = _hex_key(pub_path, pub_path.read_bytes())
    token_path = keys_dir / "token.key"
    token_key = _read_secret(token_path)
    if len(token_key) != 32:
        raise KeyFileError(f"{token_path} must hold exactly 32 bytes")
    admin_path = keys_dir / "admin.token"
    admin = _read_secret(admin_path).decode("ascii").strip() if admin_path.exists() else None
    return KeyRing(public_key=public, token_key=token_key, admin_token=admin, signer=signer)
