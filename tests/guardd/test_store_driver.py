"""guardd and guardd migrate with a postgresql:// store but no driver: one
line naming the install command, exit status 1, nothing left behind (no data
dir, no lock). The driver is hidden from the child process only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

URL = "postgresql://guard@127.0.0.1:1/nowhere"  # never reached: the driver is missing first
NO_DRIVER = (
    "the PostgreSQL store needs its driver, asyncpg, which is not installed;"
    " install it with: .venv/bin/pip install -e '.[postgres]'"
)
WITHOUT_DRIVER = (
    "import sys; sys.modules['asyncpg'] = None; from guardd.__main__ import main; sys.exit(main())"
)


def _guardd_without_driver(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_DRIVER, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_guardd_on_a_store_without_its_driver_says_how_to_install_it_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "guard-data"
    done = _guardd_without_driver("--store", URL, "--data-dir", str(data_dir))
    assert (done.returncode, done.stderr) == (1, f"guardd: {NO_DRIVER}\n")
    assert done.stdout == ""
    assert not data_dir.exists()


def test_guardd_migrate_without_the_driver_says_how_to_install_it_and_takes_no_lock(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "guard-data"
    (data_dir / "agents").mkdir(parents=True)
    done = _guardd_without_driver("migrate", "--data-dir", str(data_dir), "--store", URL)
    assert (done.returncode, done.stderr) == (1, f"guardd migrate: {NO_DRIVER}\n")
    assert sorted(p.name for p in data_dir.iterdir()) == ["agents"]
