"""``guardd --help`` names every way to run guardd, the ``migrate``
subcommand included, and says where its own help is."""

from __future__ import annotations

import os
import subprocess
import sys


def _help(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")} | {"COLUMNS": "100"}
    proc = subprocess.run(
        [sys.executable, "-m", "guardd", *args, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    return proc.stdout


def test_help_names_the_migrate_subcommand_and_where_its_help_is() -> None:
    text = " ".join(_help().split())
    assert text.startswith("usage: guardd [OPTIONS] guardd migrate --data-dir DIR --store URL")
    assert "'guardd migrate --help'" in text


def test_the_migrate_help_it_points_at_exists() -> None:
    assert _help("migrate").startswith("usage: guardd migrate ")
