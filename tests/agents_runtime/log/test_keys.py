"""agents_runtime.log.keys: Ed25519 known answers, key files, agent tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import stat
from pathlib import Path

import pytest

from agents_runtime.errors import KeyFileError
from agents_runtime.log import keys
from agents_runtime.log.keys import Signer

DATA = Path(__file__).parents[2] / "data"
VECTORS = json.loads((DATA / "ed25519-rfc8032.json").read_text(encoding="utf-8"))["vectors"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- Ed25519 known answers ------------------------------------------------------


@pytest.mark.parametrize("vector", [pytest.param(v, id=v["name"]) for v in VECTORS])
def test_signer_matches_rfc8032_vectors(vector: dict[str, str]) -> None:
    signer = Signer(bytes.fromhex(vector["secret_key"]))
    message = bytes.fromhex(vector["message"])
    assert signer.public_key_hex == vector["public_key"]
    assert signer.sign(message).hex() == vector["signature"]


def test_signer_repr_shows_the_public_key_only() -> None:
    seed = bytes(range(32))
    text = repr(Signer(seed))
    assert text == f"Signer(public_key={Signer(seed).public_key_hex})"
    assert seed.hex() not in text


# --- agent tokens -----------------------------------------------------------------


def independent_token(token_key: bytes, agent_id: str) -> str:
    mac = hmac.new(token_key, b"agent-token/v1:" + agent_id.encode(), hashlib.sha256).digest()
    return "agt_" + agent_id + "." + base64.urlsafe_b64encode(mac).decode().rstrip("=")


@pytest.mark.parametrize("agent_id", ["a", "agent-1", "A_b-9" * 12, "x" * 64])
def test_agent_token_is_the_documented_hmac(agent_id: str) -> None:
    token_key = bytes(range(100, 132))
    token = keys.agent_token(token_key, agent_id)
    assert token == independent_token(token_key, agent_id)
    assert re.fullmatch(r"agt_[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{43}", token)
    assert keys.token_agent_id(token) == agent_id
    assert keys.agent_token_valid(token_key, token)


def test_agent_token_from_another_token_key_is_invalid() -> None:
    token = keys.agent_token(bytes(32), "agent-1")
    assert not keys.agent_token_valid(bytes(range(32)), token)


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("", id="empty"),
        pytest.param("agt_agent-1", id="no-mac"),
        pytest.param("agt_.abc", id="no-agent-id"),
        pytest.param("Bearer agt_agent-1.x", id="wrong-prefix"),
        pytest.param("agt_agent-2." + "A" * 43, id="wrong-mac"),
        pytest.param("agt_agent-1.\udcff", id="surrogate"),
    ],
)
def test_malformed_or_forged_tokens_are_invalid(token: str) -> None:
    assert not keys.agent_token_valid(bytes(32), token)


def test_token_for_one_agent_does_not_open_another() -> None:
    token_key = bytes(32)
    token = keys.agent_token(token_key, "agent-1")
    moved = token.replace("agt_agent-1.", "agt_agent-2.")
    assert not keys.agent_token_valid(token_key, moved)


# --- key files ----------------------------------------------------------------------


def test_create_keys_makes_every_file_0600_in_a_0700_directory(tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    keys.create_keys(keys_dir)
    assert mode(keys_dir) == 0o700
    names = sorted(p.name for p in keys_dir.iterdir())
    assert names == ["admin.token", "audit.key", "audit.pub", "token.key"]
    for path in keys_dir.iterdir():
        assert mode(path) == 0o600, path.name


def test_created_keys_have_the_documented_shapes(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    seed = bytes.fromhex((tmp_path / "audit.key").read_text().strip())
    public = bytes.fromhex((tmp_path / "audit.pub").read_text().strip())
    assert len(seed) == 32
    assert Signer(seed).public_key == public
    assert len((tmp_path / "token.key").read_bytes()) == 32
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}\n", (tmp_path / "admin.token").read_text())


def test_create_keys_keeps_existing_keys(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    keys.create_keys(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_load_keys_reads_what_create_keys_wrote(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    ring = keys.load_keys(tmp_path)
    assert not ring.read_only
    assert ring.signer is not None
    assert ring.public_key_hex == (tmp_path / "audit.pub").read_text().strip()
    assert ring.token_key == (tmp_path / "token.key").read_bytes()
    assert ring.admin_token == (tmp_path / "admin.token").read_text().strip()
    assert "signer" not in repr(ring)


@pytest.mark.parametrize("name", ["audit.key", "token.key", "admin.token"])
@pytest.mark.parametrize("bad_mode", [0o644, 0o640, 0o604, 0o610])
def test_a_key_file_open_to_others_is_refused_with_the_fix(
    tmp_path: Path, name: str, bad_mode: int
) -> None:
    keys.create_keys(tmp_path)
    path = tmp_path / name
    os.chmod(path, bad_mode)
    expected = (
        rf"^{re.escape(str(path))} is readable by group or others \(mode {bad_mode:04o}\); "
        rf"fix it with: chmod 600 {re.escape(str(path))}$"
    )
    with pytest.raises(KeyFileError, match=expected):
        keys.load_keys(tmp_path)


def test_missing_audit_key_gives_a_read_only_ring_from_audit_pub(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    public = (tmp_path / "audit.pub").read_text().strip()
    (tmp_path / "audit.key").unlink()
    ring = keys.load_keys(tmp_path)
    assert ring.read_only
    assert ring.signer is None
    assert ring.public_key_hex == public


def test_missing_audit_key_and_audit_pub_is_refused(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    (tmp_path / "audit.key").unlink()
    (tmp_path / "audit.pub").unlink()
    with pytest.raises(KeyFileError, match=r"are both missing: logs cannot be verified; restore"):
        keys.load_keys(tmp_path)


def test_audit_pub_that_does_not_match_audit_key_is_refused(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    pub = tmp_path / "audit.pub"
    pub.write_text(Signer(bytes(32)).public_key_hex + "\n")
    with pytest.raises(KeyFileError, match=r"audit\.pub does not match .*audit\.key$"):
        keys.load_keys(tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param(
            "audit.key", b"zz\n", r"audit\.key does not hold 64 hex characters$", id="key"
        ),
        pytest.param("audit.key", b"ab" * 31, r"audit\.key does not hold 64 hex", id="short"),
        pytest.param("token.key", b"x" * 31, r"token\.key must hold exactly 32 bytes$", id="token"),
    ],
)
def test_malformed_key_files_are_refused(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    keys.create_keys(tmp_path)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(KeyFileError, match=message):
        keys.load_keys(tmp_path)


def test_missing_token_key_is_refused(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    (tmp_path / "token.key").unlink()
    with pytest.raises(KeyFileError, match=r"token\.key is missing$"):
        keys.load_keys(tmp_path)


def test_missing_admin_token_file_leaves_admin_token_unset(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    (tmp_path / "admin.token").unlink()
    assert keys.load_keys(tmp_path).admin_token is None


def test_audit_pub_lost_to_a_crash_at_first_start_is_written_at_the_next(
    tmp_path: Path,
) -> None:
    keys.create_keys(tmp_path)
    public = (tmp_path / "audit.pub").read_bytes()
    (tmp_path / "audit.pub").unlink()
    keys.create_keys(tmp_path)
    assert (tmp_path / "audit.pub").read_bytes() == public
    assert stat.S_IMODE((tmp_path / "audit.pub").stat().st_mode) == 0o600


def test_key_files_appear_whole_and_leave_no_temporary_file(tmp_path: Path) -> None:
    keys.create_keys(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["admin.token", "audit.key", "audit.pub", "token.key"]
    assert len((tmp_path / "token.key").read_bytes()) == 32
