"""agents_runtime.log.files.datadir: layout, modes, and keys made only for a new directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agents_runtime.errors import KeyFileError
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.ids import valid_agent_id


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_prepare_creates_directories_0700_and_key_files_0600(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "guard-data")
    ring = data_dir.prepare()
    for directory in (data_dir.root, data_dir.agents_dir, data_dir.keys_dir):
        assert mode(directory) == 0o700, directory
    for name in ("audit.key", "audit.pub", "token.key", "admin.token"):
        assert mode(data_dir.keys_dir / name) == 0o600, name
    assert not ring.read_only


def test_prepare_again_keeps_the_same_keys(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    first = data_dir.prepare()
    second = data_dir.prepare()
    assert (second.public_key, second.token_key, second.admin_token) == (
        first.public_key,
        first.token_key,
        first.admin_token,
    )


def test_keys_are_not_created_while_agents_holds_a_log(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    data_dir.agents_dir.mkdir(parents=True)
    data_dir.log_path("agent-1").write_bytes(b"{}\n")
    with pytest.raises(KeyFileError, match=r"are both missing"):
        data_dir.prepare()
    assert not (data_dir.keys_dir / "audit.key").exists()
    assert not (data_dir.keys_dir / "token.key").exists()


def test_logs_without_audit_key_load_read_only_from_audit_pub(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    public = data_dir.prepare().public_key
    data_dir.log_path("agent-1").write_bytes(b"{}\n")
    (data_dir.keys_dir / "audit.key").unlink()
    ring = data_dir.prepare()
    assert ring.read_only
    assert ring.public_key == public
    assert not (data_dir.keys_dir / "audit.key").exists()


def test_without_any_log_a_lost_audit_key_is_created_anew(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    old = data_dir.prepare().public_key
    (data_dir.keys_dir / "audit.key").unlink()
    ring = data_dir.prepare()
    assert not ring.read_only
    assert ring.public_key != old
    assert (data_dir.keys_dir / "audit.pub").read_text().strip() == ring.public_key_hex


def test_agent_ids_lists_valid_logs_sorted(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    data_dir.agents_dir.mkdir()
    for name in [
        "b.jsonl",
        "a-1.jsonl",
        "A_2.jsonl",
        "c.jsonl.tmp",
        "d.jsonl.torn",
        "bad name.jsonl",
        "e.json",
        ".jsonl",
        "x" * 65 + ".jsonl",
    ]:
        (data_dir.agents_dir / name).write_bytes(b"")
    assert data_dir.agent_ids() == ["A_2", "a-1", "b"]


def test_agent_ids_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert DataDir(tmp_path / "nothing").agent_ids() == []


def test_remove_unfinished_deletes_only_half_created_logs(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path)
    data_dir.agents_dir.mkdir()
    keep = data_dir.log_path("a")
    keep.write_bytes(b"x\n")
    torn = data_dir.agents_dir / "a.jsonl.torn"
    torn.write_bytes(b"x")
    unfinished = data_dir.agents_dir / "b.jsonl.tmp"
    unfinished.write_bytes(b"x")
    assert data_dir.remove_unfinished() == [unfinished]
    assert keep.exists()
    assert torn.exists()
    assert not unfinished.exists()


def test_log_path_is_agents_slash_id_jsonl(tmp_path: Path) -> None:
    assert DataDir(tmp_path).log_path("agent-1") == tmp_path / "agents" / "agent-1.jsonl"


@pytest.mark.parametrize(
    ("agent_id", "valid"),
    [
        pytest.param("a", True, id="one-char"),
        pytest.param("A-z_0-9", True, id="all-classes"),
        pytest.param("x" * 64, True, id="64-chars"),
        pytest.param("", False, id="empty"),
        pytest.param("x" * 65, False, id="65-chars"),
        pytest.param("a.b", False, id="dot"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("é", False, id="non-ascii"),
        pytest.param("a\n", False, id="newline"),
    ],
)
def test_valid_agent_id(agent_id: str, valid: bool) -> None:
    assert valid_agent_id(agent_id) is valid


def test_scan_reports_each_odd_entry_with_one_line_and_skips_it(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "data")
    agents = data_dir.agents_dir
    agents.mkdir(parents=True)
    (agents / "good.jsonl").write_bytes(b"")
    (agents / "good.jsonl.torn").write_bytes(b"")
    (agents / "d.jsonl").mkdir()
    (agents / "t.jsonl.tmp").mkdir()
    (tmp_path / "elsewhere.jsonl").write_bytes(b"")
    os.symlink(tmp_path / "elsewhere.jsonl", agents / "link.jsonl")
    os.symlink(tmp_path / "missing", agents / "dangling.jsonl")
    (agents / "bad id.jsonl").write_bytes(b"")
    (agents / "README").write_bytes(b"")
    os.mkfifo(agents / "pipe.jsonl")
    scan = data_dir.scan()
    assert scan.agent_ids == ["good"]
    link = "a symbolic link (guardd does not follow links in agents/)"
    assert scan.odd == [
        "skipped agents/README: not an agent log (<agent_id>.jsonl)",
        "skipped agents/bad id.jsonl: not a valid agent ID (1 to 64 of A-Z a-z 0-9 _ -)",
        "skipped agents/d.jsonl: a directory, not a log file",
        f"skipped agents/dangling.jsonl: {link}",
        f"skipped agents/link.jsonl: {link}",
        "skipped agents/pipe.jsonl: not a regular file",
        "skipped agents/t.jsonl.tmp: named as an unfinished log but not a regular file",
    ]
    assert data_dir.remove_unfinished() == []
    assert (agents / "t.jsonl.tmp").is_dir()
