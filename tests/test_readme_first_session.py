"""The README's first session runs as written against a real guardd: the agent
token is captured from the create answer and the action is allowed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import GuardServer

ROOT = Path(__file__).resolve().parents[1]


def _first_session() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## A first session", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "no sh block under 'A first session'"
    return match.group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the session is written with curl")
def test_the_first_session_sets_the_agent_token_and_gets_an_allowed_action(
    tmp_path: Path,
) -> None:
    script = _first_session()
    assert script.startswith("make run &")
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        # guardd is already running on its own port: drop `make run &`, aim at that port
        body = script.split("\n", 1)[1].replace("localhost:9200", f"127.0.0.1:{server.port}")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(sys.executable)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body],
            cwd=tmp_path,  # guard-data/keys/admin.token is where the README reads it
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.kill()
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert [type(line) for line in answer.pop("receipt")] == [str, str]
    assert answer == {
        "decision": "allowed",
        "action_id": "act-1",
        "cost": 0.5,
        "remaining": 9.5,
    }
