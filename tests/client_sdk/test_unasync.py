"""``client_sdk/_sync.py`` is generated from ``_async.py`` by ``sdk/unasync.py``:
the file in the repository is current, and the check catches a stale one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("sdk") / "unasync.py"
SYNC = Path("client_sdk") / "_sync.py"
ASYNC = Path("client_sdk") / "_async.py"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / SCRIPT), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    """The generator, its source and the settings ruff reads, in a tree of their own."""
    for path in (SCRIPT, ASYNC, SYNC, Path("pyproject.toml")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


def test_the_sync_clients_are_what_the_async_source_makes() -> None:
    result = _run(ROOT, "--check")
    assert result.returncode == 0, result.stderr
    assert (
        (ROOT / SYNC)
        .read_text()
        .startswith("# Generated from client_sdk/_async.py by sdk/unasync.py: do not edit.\n")
    )


def test_the_check_fails_on_a_stale_file_and_regenerating_mends_it(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    source = (root / ASYNC).read_text()
    edited = source.replace(
        '        """The hex Ed25519 key that signs every log."""',
        '        """The hex Ed25519 key that signs every log (edited)."""',
    )
    assert edited != source
    (root / ASYNC).write_text(edited)

    stale = _run(root, "--check")
    assert stale.returncode == 1
    assert "run python sdk/unasync.py" in stale.stderr
    assert (root / SYNC).read_text() == (ROOT / SYNC).read_text()  # --check writes nothing

    assert _run(root).returncode == 0
    assert _run(root, "--check").returncode == 0
    assert "signs every log (edited)." in (root / SYNC).read_text()


def test_async_only_blocks_are_left_out_and_must_be_closed(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    generated = (ROOT / SYNC).read_text()
    assert "get_cancelled_exc_class" in (ROOT / ASYNC).read_text()
    assert "get_cancelled_exc_class" not in generated
    assert "Awaitable" not in generated
    assert "unasync:" not in generated

    source = (root / ASYNC).read_text()
    head, _, tail = source.rpartition("# unasync: end")
    (root / ASYNC).write_text(head + tail)
    result = _run(root, "--check")
    assert result.returncode != 0
    assert "never ends" in result.stderr
