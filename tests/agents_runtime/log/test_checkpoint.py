"""Checkpoint files: written atomically, kept up to date by the registry off
the decision path, never ahead of what is on disk, and held against each log
at startup."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import stat
from pathlib import Path

import nacl.signing
import pytest

from agents_runtime.core import commands as c
from agents_runtime.errors import AgentUnavailable
from agents_runtime.log import canonical
from agents_runtime.log.checkpoint import (
    CheckpointDir,
    CheckpointFileError,
    key_id,
    parse_checkpoint,
    read_checkpoint_file,
    sign_note,
    signed_checkpoint,
)
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.faults import EIO_FSYNC, Fault, io_for_faults
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head, seal, signing_message
from agents_runtime.log.verify import Checkpoint, Failure
from agents_runtime.runtime.registry import CHECKPOINT_EVERY, Registry, quarantine_message
from tests.agents_runtime.support import (
    AGENT,
    TEST_PUBLIC_KEY,
    TEST_SIGNER,
    FakeClock,
    policy,
    running_agent,
    running_registry,
    write_test_keys,
)

HASH = "ab" * 32
B64 = base64.b64encode(bytes.fromhex(HASH)).decode()
SIG = "\u2014 guardd AAAAAAAAAAA=".encode()


def loaded(root: Path, **kwargs: object) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock(), **kwargs)  # type: ignore[arg-type]
    registry.load()
    return registry


def close(registry: Registry) -> None:
    for actor in registry.actors.values():
        actor.log.close()
    registry.store.close()


async def make_agent(root: Path, requests: int = 3) -> Path:
    async with running_agent(root) as agent:
        for _ in range(requests):
            await agent.ask(c.RequestAction("read"))
        return agent.path


def head_at(path: Path, index: int) -> Head:
    record = canonical.loads(path.read_bytes().splitlines()[index])
    return Head(record["seq"], record["hash"])


def head_line(path: Path, index: int) -> str:
    return head_at(path, index).checkpoint()


def head_note(path: Path, index: int, agent_id: str = AGENT) -> bytes:
    """The signed checkpoint guardd writes for the record at ``index``."""
    return signed_checkpoint(agent_id, head_at(path, index), TEST_SIGNER)


# -- the file ----------------------------------------------------------------------


def test_a_checkpoint_is_a_signed_note_written_0600_in_a_0700_directory(tmp_path: Path) -> None:
    checkpoints = CheckpointDir(tmp_path / "deep" / "checkpoints")
    checkpoints.prepare()
    checkpoints.write({"a-1": Head(7, HASH)}, TEST_SIGNER)
    path = checkpoints.path("a-1")
    body = f"guardd/a-1\n8\n{base64.b64encode(bytes.fromhex(HASH)).decode()}\n".encode()
    data = path.read_bytes()
    assert data.startswith(body + "\n\u2014 guardd ".encode())
    blob = base64.b64decode(data.decode().splitlines()[-1].split(" ")[2])
    assert blob[:4] == hashlib.sha256(b"guardd\n\x01" + TEST_PUBLIC_KEY).digest()[:4]
    nacl.signing.VerifyKey(TEST_PUBLIC_KEY).verify(body, blob[4:])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(checkpoints.root.stat().st_mode) == 0o700
    assert [p.name for p in checkpoints.root.iterdir()] == ["a-1.checkpoint"]
    stored = checkpoints.read("a-1")
    assert stored is not None
    assert stored.checkpoint == Checkpoint(7, HASH)
    assert stored.trusted(TEST_PUBLIC_KEY, "a-1") == Checkpoint(7, HASH, signed=True)
    checkpoints.write({"a-1": Head(8, "cd" * 32)}, TEST_SIGNER)
    stored = checkpoints.read("a-1")
    assert stored is not None
    assert stored.checkpoint == Checkpoint(8, "cd" * 32)


def test_a_missing_checkpoint_reads_as_none(tmp_path: Path) -> None:
    assert CheckpointDir(tmp_path).read("a-1") is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(f"7:{HASH}".encode(), id="no-newline"),
        pytest.param(f"7:{HASH}\n7:{HASH}\n".encode(), id="two-lines"),
        pytest.param(b"seven:" + HASH.encode() + b"\n", id="bad-seq"),
        pytest.param(b"7:" + b"AB" * 32 + b"\n", id="upper-hex"),
        pytest.param(b"\xff\n", id="not-ascii"),
        pytest.param(b"guardd/a-1\n8\n" + B64.encode() + b"\n", id="note-unsigned"),
        pytest.param(b"guardd/a-1\n8\n" + B64.encode() + b"\n\n" + SIG, id="note-no-newline"),
        pytest.param(b"guardd/a-1\n8\n\n" + SIG + b"\n", id="note-two-lines"),
        pytest.param(b"guardd/a-1\n08\n" + B64.encode() + b"\n\n" + SIG + b"\n", id="size-0"),
        pytest.param(b"guardd/a-1\n0\n" + B64.encode() + b"\n\n" + SIG + b"\n", id="size-zero"),
        pytest.param(b"guardd/a 1\n8\n" + B64.encode() + b"\n\n" + SIG + b"\n", id="origin"),
        pytest.param(b"guardd/a-1\n8\n" + HASH.encode() + b"\n\n" + SIG + b"\n", id="hex-root"),
        pytest.param(
            b"guardd/a-1\n8\n" + B64.encode() + b"\n\n- guardd AAAAAAA=\n", id="no-em-dash"
        ),
        pytest.param(b"x" * 2000 + b"\n", id="too-long"),
        pytest.param(
            b"guardd/a-1\n8\n"
            + B64.encode()
            + b"\n\n"
            + SIG.replace(b"guardd", b"gu\tardd")
            + b"\n",
            id="control-character",
        ),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_an_error(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "a-1.checkpoint").write_bytes(data)
    with pytest.raises(CheckpointFileError, match=r"a-1\.checkpoint: "):
        CheckpointDir(tmp_path).read("a-1")
    with pytest.raises(CheckpointFileError):
        read_checkpoint_file(tmp_path / "a-1.checkpoint")


# -- written while serving ------------------------------------------------------------


async def test_a_created_agent_gets_its_checkpoint_within_a_second(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        await registry.create(AGENT, policy())
        await registry.ref(AGENT).ask(c.RequestAction("read"))
        path = registry.checkpoints.path(AGENT)
        head = registry.actors[AGENT].committed_head
        note = signed_checkpoint(AGENT, head, TEST_SIGNER)
        for _ in range(int(3 * CHECKPOINT_EVERY / 0.05)):
            if path.exists() and path.read_bytes() == note:
                break
            await asyncio.sleep(0.05)
        assert path.read_bytes() == note


async def test_a_graceful_stop_writes_every_head(tmp_path: Path) -> None:
    path = await make_agent(tmp_path, requests=4)
    checkpoint = (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").read_bytes()
    assert checkpoint == head_note(path, -1)


async def test_the_checkpoint_dir_can_be_elsewhere(tmp_path: Path) -> None:
    elsewhere = tmp_path / "worm" / "heads"
    data_dir = DataDir(tmp_path / "data")
    write_test_keys(data_dir.root)
    registry = Registry(
        FileStore(data_dir), data_dir.prepare(), clock=FakeClock(), checkpoint_dir=elsewhere
    )
    registry.load()
    await registry.start()
    await registry.create(AGENT, policy())
    await registry.stop()
    assert (elsewhere / f"{AGENT}.checkpoint").read_bytes() == (
        head_note(data_dir.log_path(AGENT), -1)
    )
    assert not (data_dir.root / "checkpoints" / f"{AGENT}.checkpoint").exists()


async def test_a_checkpoint_never_names_records_that_failed_to_reach_the_disk(
    tmp_path: Path,
) -> None:
    # Creation is append 1, the first request append 2; the third append's fsync fails.
    data_dir = DataDir(tmp_path)
    write_test_keys(tmp_path)
    io_for = io_for_faults([Fault(AGENT, EIO_FSYNC, after=2)])
    registry = Registry(FileStore(data_dir, io_for=io_for), data_dir.prepare(), clock=FakeClock())
    registry.load()
    await registry.start()
    try:
        await registry.create(AGENT, policy())
        await registry.ref(AGENT).ask(c.RequestAction("read"))
        durable = registry.actors[AGENT].state.head
        with pytest.raises(AgentUnavailable):
            await registry.ref(AGENT).ask(c.RequestAction("read"))
    finally:
        await registry.stop()
    stored = registry.checkpoints.read(AGENT)
    assert stored is not None
    assert stored.trusted(TEST_PUBLIC_KEY, AGENT) == Checkpoint(durable.seq, durable.hash, True)


# -- held against the log at startup ---------------------------------------------------


async def test_a_log_cut_at_a_record_boundary_below_its_checkpoint_is_quarantined(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]))
    registry = loaded(tmp_path)
    try:
        failure = Failure(len(lines) - 1, len(lines) - 1, "truncated before checkpoint")
        assert registry.quarantined == {AGENT: failure}
    finally:
        close(registry)


async def test_a_checkpoint_whose_record_differs_quarantines_the_agent(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    seq = len(path.read_bytes().splitlines()) - 1
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_text(f"{seq}:{HASH}\n")
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(seq + 1, seq, "checkpoint hash mismatch")}
    finally:
        close(registry)


async def test_a_checkpoint_behind_the_log_loads_and_is_brought_up_to_date(
    tmp_path: Path,
) -> None:
    # A crash (kill -9) after a commit, before the next checkpoint round.
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.write_bytes(head_note(path, 2))
    async with running_registry(tmp_path) as registry:
        assert AGENT in registry.actors
        assert registry.quarantined == {}
    assert checkpoint.read_bytes() == head_note(path, -1)


async def test_a_missing_checkpoint_is_created_from_the_verified_log_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.unlink()
    with caplog.at_level(logging.WARNING, logger="agents_runtime.runtime.registry"):
        async with running_registry(tmp_path) as registry:
            assert AGENT in registry.actors
    head = head_line(path, -1)
    assert f"agent {AGENT}: no checkpoint; one is written from its verified log ({head})" in (
        caplog.messages
    )
    assert checkpoint.read_bytes() == head_note(path, -1)


async def test_an_unreadable_checkpoint_quarantines_its_agent(tmp_path: Path) -> None:
    await make_agent(tmp_path)
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_text("garbage\n")
    registry = loaded(tmp_path)
    try:
        failure = registry.quarantined[AGENT]
        assert failure == Failure(0, None, "checkpoint file is unreadable")
        assert quarantine_message(failure) == "checkpoint file is unreadable"
    finally:
        close(registry)


async def test_a_checkpoint_whose_log_is_gone_quarantines_its_agent_id(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    seq = len(path.read_bytes().splitlines()) - 1
    path.unlink()
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(1, seq, "truncated before checkpoint")}
        assert registry.exists(AGENT)
    finally:
        close(registry)


async def test_a_log_holding_only_its_genesis_is_quarantined(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").unlink()
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(2, 1, "log has no policy record")}
    finally:
        close(registry)


# -- signed checkpoints: the signed-note encoding and what a start trusts -------------

ATTACKER = Signer(b"\x07" * 32)  # not the data dir's key


def test_the_signed_note_matches_the_reference_implementations_known_answer() -> None:
    # The example key and note of the Go signed-note implementation's tests:
    # the key ID and the whole signature line must come out byte for byte.
    seed = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
    signer = Signer(seed)
    assert key_id(signer.public_key, "PeterNeumann").hex() == "c74f20a3"
    text = (
        b"If you think cryptography is the answer to your problem,\n"
        b"then you don't know what your problem is.\n"
    )
    assert (
        sign_note(text, signer, "PeterNeumann")
        == text
        + (
            "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
            "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        ).encode()
    )


def test_a_signed_checkpoint_is_trusted_only_for_its_own_log_and_key() -> None:
    note = parse_checkpoint(signed_checkpoint(AGENT, Head(4, HASH), TEST_SIGNER))
    assert note.trusted(TEST_PUBLIC_KEY, AGENT) == Checkpoint(4, HASH, signed=True)
    assert note.trusted(TEST_PUBLIC_KEY, "other") is None
    assert note.trusted(ATTACKER.public_key, AGENT) is None
    forged = parse_checkpoint(signed_checkpoint(AGENT, Head(4, HASH), ATTACKER))
    assert forged.problem(TEST_PUBLIC_KEY, AGENT) == (
        f"it has no signature by the key guardd {TEST_PUBLIC_KEY.hex()}"
    )
    # The right key ID in front of another key's signature.
    data = signed_checkpoint(AGENT, Head(4, HASH), TEST_SIGNER)
    body, _, line = data.decode().rpartition("\u2014 guardd ")
    blob = base64.b64decode(line)
    other = base64.b64decode(signed_checkpoint(AGENT, Head(4, HASH), ATTACKER).split(b" ")[-1])
    spliced = body + "\u2014 guardd " + base64.b64encode(blob[:4] + other[4:]).decode() + "\n"
    assert parse_checkpoint(spliced.encode()).problem(TEST_PUBLIC_KEY, AGENT) == (
        "its signature does not verify"
    )
    old = parse_checkpoint(f"4:{HASH}\n".encode())
    assert old.checkpoint == Checkpoint(4, HASH)
    assert old.trusted(TEST_PUBLIC_KEY, AGENT) is None


def resealed(lines: list[bytes], start: int, signer: Signer, change: bool) -> list[bytes]:
    """``lines`` with the records from ``start`` on sealed again by ``signer``
    (their ``ts`` changed when ``change``), chained on what precedes them."""
    out = lines[:start]
    prev = Head(canonical.loads(out[-1])["seq"], canonical.loads(out[-1])["hash"])
    for line in lines[start:]:
        fields = canonical.loads(line)
        ts = "2000-01-01T00:00:00.000000Z" if change else fields["ts"]
        for name in ("seq", "ts", "prev", "hash", "sig"):
            del fields[name]
        sealed = seal(fields, prev=prev, ts=ts, signer=signer)
        out.append(sealed.line[:-1])
        prev = sealed.head
    return out


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


async def test_a_record_changed_before_a_signed_checkpoint_is_caught_by_the_chain(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path, requests=4)
    lines = path.read_bytes().splitlines()
    head = len(lines) - 1
    # Re-signed from seq 2 on by another key: every link holds, the
    # signatures below the checkpoint are not checked, and the head's hash
    # is not the one the checkpoint signed.
    write_lines(path, resealed(lines, 2, ATTACKER, change=True))
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(head + 1, head, "checkpoint hash mismatch")}
    finally:
        close(registry)
    # One record edited in place: its hash no longer matches its content.
    changed = lines[2].replace(b'"ts":"', b'"ts":"1', 1)
    write_lines(path, [*lines[:2], changed, *lines[3:]])
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(3, 2, "hash does not match content")}
    finally:
        close(registry)


async def test_a_record_changed_after_a_signed_checkpoint_is_caught_by_its_signature(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path, requests=4)
    lines = path.read_bytes().splitlines()
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_bytes(head_note(path, 3))
    write_lines(path, resealed(lines, 4, ATTACKER, change=False))
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(5, 4, "bad signature")}
    finally:
        close(registry)


async def test_signatures_below_a_signed_checkpoint_are_not_checked_at_start(
    tmp_path: Path,
) -> None:
    # Another valid-looking signature on seq 2 changes no hash: only a
    # signature check sees it, and a signed checkpoint above it spares that.
    path = await make_agent(tmp_path, requests=4)
    lines = path.read_bytes().splitlines()
    record = canonical.loads(lines[2])
    other = ATTACKER.sign(signing_message(record["hash"])).hex()
    write_lines(
        path, [*lines[:2], lines[2].replace(record["sig"].encode(), other.encode()), *lines[3:]]
    )
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {}
    finally:
        close(registry)
    # The same log under an unsigned checkpoint is verified whole.
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_text(head_line(path, -1) + "\n")
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(3, 2, "bad signature")}
    finally:
        close(registry)


async def test_a_checkpoint_forged_without_the_key_is_ignored_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.write_bytes(signed_checkpoint(AGENT, head_at(path, -1), ATTACKER))
    with caplog.at_level(logging.WARNING, logger="agents_runtime.runtime.registry"):
        async with running_registry(tmp_path) as registry:
            assert AGENT in registry.actors
            assert registry.quarantined == {}
    assert any(
        f"agent {AGENT}: ignoring its checkpoint" in m and "no signature by the key" in m
        for m in caplog.messages
    )
    assert checkpoint.read_bytes() == head_note(path, -1)


async def test_a_forged_checkpoint_vouches_for_nothing(tmp_path: Path) -> None:
    # A log re-signed by another key, and a checkpoint by that key naming
    # its head: the checkpoint is ignored, every signature checked.
    path = await make_agent(tmp_path, requests=4)
    lines = resealed(path.read_bytes().splitlines(), 2, ATTACKER, change=True)
    write_lines(path, lines)
    forged = signed_checkpoint(AGENT, head_at(path, -1), ATTACKER)
    (tmp_path / "checkpoints" / f"{AGENT}.checkpoint").write_bytes(forged)
    registry = loaded(tmp_path)
    try:
        assert registry.quarantined == {AGENT: Failure(3, 2, "bad signature")}
    finally:
        close(registry)


async def test_a_checkpoint_copied_from_another_agent_is_ignored(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    head = head_at(path, -1)
    # Signed by the right key but for another log, and further than this
    # one reaches: trusted, it would quarantine a sound log.
    copied = signed_checkpoint("other", Head(head.seq + 5, HASH), TEST_SIGNER)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.write_bytes(copied)
    async with running_registry(tmp_path) as registry:
        assert AGENT in registry.actors
        assert registry.quarantined == {}
    assert checkpoint.read_bytes() == head_note(path, -1)


async def test_an_unsigned_checkpoint_of_an_older_version_is_read_then_rewritten_signed(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path)
    checkpoint = tmp_path / "checkpoints" / f"{AGENT}.checkpoint"
    checkpoint.write_text(head_line(path, -1) + "\n")
    async with running_registry(tmp_path) as registry:
        assert AGENT in registry.actors
    assert checkpoint.read_bytes() == head_note(path, -1)
    # And it is still held against the log: one cut behind it is quarantined.
    checkpoint.write_text(head_line(path, -1) + "\n")
    lines = path.read_bytes().splitlines()
    write_lines(path, lines[:-1])
    registry = loaded(tmp_path)
    try:
        seq = len(lines) - 1
        assert registry.quarantined == {AGENT: Failure(seq + 1, seq, "truncated before checkpoint")}
    finally:
        close(registry)


def test_the_documented_worked_example_is_what_the_code_writes() -> None:
    data = Path(__file__).parents[2] / "data"
    signer = Signer(bytes.fromhex((data / "worked-example.key").read_text().strip()))
    last = canonical.loads((data / "worked-example.jsonl").read_bytes().splitlines()[-1])
    written = signed_checkpoint("worked-example", Head(last["seq"], last["hash"]), signer)
    assert (data / "worked-example.checkpoint").read_bytes() == written
    doc = (Path(__file__).parents[3] / "docs" / "log-format.md").read_text()
    assert f"```text\n{written.decode()}```" in doc
    assert f"The key ID is `{key_id(signer.public_key).hex()}`" in doc
    stored = parse_checkpoint(written)
    assert stored.trusted(signer.public_key, "worked-example") == Checkpoint(
        last["seq"], last["hash"], signed=True
    )
