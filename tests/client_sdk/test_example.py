"""examples/guarded_agent.py runs against a real guardd and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guarded_agent.py"


@pytest.mark.parametrize("token_from", ["GUARD_DATA_DIR", "GUARD_ADMIN_TOKEN"])
def test_example_agent_runs_against_a_real_server(guard_server, tmp_path, token_from):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
    env["GUARD_URL"] = guard_server.url
    if token_from == "GUARD_DATA_DIR":
        env["GUARD_DATA_DIR"] = str(guard_server.data_dir)
    else:
        env["GUARD_ADMIN_TOKEN"] = guard_server.admin_token
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "3 results for 'guard rails'",
        "sent to ops@example.com",
        "action act-3 denied: tool_not_allowed (tool='delete_database')",
        "spent 3 of 10",
    ]
    assert result.stderr == ""
