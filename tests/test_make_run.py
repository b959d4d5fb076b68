"""``make run`` installs the PostgreSQL driver first when GUARD_STORE names
a postgresql:// store, and never otherwise (the file store needs none).
Read from ``make -n -B`` (print every command, run none)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL_POSTGRES = ".venv/bin/pip install -q -e '.[postgres]'"


def _run_commands(store: str | None) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Under `make test` the outer make's variables would make this one a
    # sub-make, which prints "Entering directory" lines around the commands.
    outer = {"GUARD_STORE", "MAKEFLAGS", "MAKELEVEL", "MFLAGS"}
    env = {k: v for k, v in os.environ.items() if k not in outer}
    if store is not None:
        env["GUARD_STORE"] = store
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    "store",
    ["postgresql://guard@db1/guard", "postgres://guard@db1/guard"],
    ids=["postgresql", "postgres"],
)
def test_make_run_on_a_postgresql_store_installs_the_driver_before_guardd(store: str) -> None:
    commands = _run_commands(store)
    assert INSTALL_POSTGRES in commands
    assert commands.index(INSTALL_POSTGRES) < commands.index(".venv/bin/guardd")


@pytest.mark.parametrize("store", [None, "./guard-data"], ids=["unset", "not-a-url"])
def test_make_run_without_a_postgresql_store_installs_no_driver(store: str | None) -> None:
    commands = _run_commands(store)
    assert not [c for c in commands if "postgres" in c]
    assert commands[-1] == ".venv/bin/guardd"
