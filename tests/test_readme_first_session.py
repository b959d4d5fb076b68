"""The README's first session works as written.

Pasted whole into a fresh copy of the repository, the snippet installs and
starts guardd with ``make run &``, waits for it, captures the operator's and
the agent's tokens and gets an allowed action; against a guardd that is
already running, the same lines do the same. What the README says about
termination holds for its own example policy."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import GuardServer, free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ORDINALS = ["zeroth", "first", "second", "third", "fourth", "fifth", "sixth"]
MODERATE = 3  # the scar weight of a tool_not_allowed denial
# What a copy of the repository leaves out: what a clone does not hold.
NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "guard-data",
    "__pycache__",
    "*.egg-info",
    "*_cache",
    ".hypothesis",
    "artifacts",
)


def _first_session() -> str:
    section = README.split("## A first session", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "no sh block under 'A first session'"
    return match.group(1)


def _readme_policy() -> dict[str, Any]:
    match = re.search(r"-d '(\{.*?\})' \|", _first_session(), re.DOTALL)
    assert match, "no agent creation in the first session"
    policy = json.loads(match.group(1))["policy"]
    assert isinstance(policy, dict)
    return policy


def _environment(bin_dir: Path, **extra: str) -> dict[str, str]:
    """This environment without guardd's settings or an outer make's, with
    ``python3`` the interpreter running the tests (3.11 at least)."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GUARD_") and k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env | extra


def _answer(stdout: str) -> dict[str, Any]:
    """The last curl's answer: the decision, wherever guardd's own lines fall."""
    start = stdout.rfind('{"decision"')
    assert start >= 0, stdout
    answer, _ = json.JSONDecoder().raw_decode(stdout, start)
    assert isinstance(answer, dict)
    return answer


def _assert_allowed(answer: dict[str, Any]) -> None:
    assert [type(line) for line in answer.pop("receipt")] == [str, str]
    assert answer == {"decision": "allowed", "action_id": "act-1", "cost": 0.5, "remaining": 9.5}


WAIT = re.compile(r"for \w+ in \$\(seq \d+\); do curl .*/readyz.* && break; sleep 1; done")


def test_the_snippet_waits_for_readyz_before_it_reads_the_token() -> None:
    lines = _first_session().splitlines()
    assert lines[0].startswith("make run &")
    wait = next(i for i, line in enumerate(lines) if "/readyz" in line)
    token = next(i for i, line in enumerate(lines) if "admin.token" in line)
    assert 0 < wait < token
    # bounded: a guardd that never gets ready ends the loop, not the reader's afternoon
    assert WAIT.search(lines[wait])


def test_every_readme_snippet_that_starts_guardd_in_the_background_waits_for_it() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.DOTALL)
    starting = [b for b in blocks if b.startswith("make run &")]
    assert len(starting) >= 2
    for block in starting:
        commands = [line for line in block.splitlines()[1:] if not line.startswith("#")]
        assert WAIT.search(commands[0]), block


@pytest.mark.slow
@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("curl", "make")),
    reason="the session is written with make and curl",
)
def test_the_first_session_pasted_whole_into_a_fresh_copy_gets_an_allowed_action(
    tmp_path: Path,
) -> None:
    """``make run &`` has not installed anything when the next line runs: the
    snippet's wait is what lets the token be read. Only the port differs from
    the README (9200 may be taken), set for guardd through GUARD_PORT."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, clone, ignore=NOT_COPIED, symlinks=True)
    port = free_port()
    script = _first_session().replace("localhost:9200", f"localhost:{port}")
    assert "9200" not in script
    env = _environment(tmp_path / "bin", GUARD_PORT=str(port))
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    # Files, not pipes: the guardd left running in the background keeps its
    # output open after the snippet ends. A session of its own, so that make
    # and the guardd it starts are ours to stop.
    with out.open("w") as stdout, err.open("w") as stderr:
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=clone,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            shell.wait(timeout=420)  # the snippet gives up waiting after 300 s
        finally:
            _stop_group(shell.pid)
    assert shell.returncode == 0, err.read_text()
    _assert_allowed(_answer(out.read_text()))
    assert (clone / ".venv" / "bin" / "guardd").exists()  # make run installed it


def _stop_group(pgid: int) -> None:
    """SIGTERM to the snippet's process group (make and guardd), then wait,
    bounded, for it to be gone; SIGKILL what is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the session is written with curl")
def test_the_first_session_against_a_running_guardd_gets_an_allowed_action(
    tmp_path: Path,
) -> None:
    script = _first_session()
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        # guardd is already running on its own port: drop `make run &`, aim at that port
        body = script.split("\n", 1)[1].replace("localhost:9200", f"127.0.0.1:{server.port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body],
            cwd=tmp_path,  # guard-data/keys/admin.token is where the README reads it
            env=_environment(tmp_path / "bin"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.kill()
    assert result.returncode == 0, result.stderr
    _assert_allowed(json.loads(result.stdout))


# -- termination, as the README tells it ----------------------------------------------


def test_the_readme_says_when_its_example_agent_is_terminated() -> None:
    policy = _readme_policy()
    text = " ".join(README.split())
    unknown = math.ceil(policy["scar_limit"] / MODERATE)
    searches = policy["budget"] / policy["tools"]["web_search"]["cost"]
    assert searches == int(searches)
    assert f"moderate scar, weight {MODERATE}" in text
    assert f"(`scar_limit` {policy['scar_limit']})" in text
    assert f"the {ORDINALS[unknown]} unknown tool terminates" in text
    assert "spends the budget to exactly zero terminates" in text
    assert f"the {int(searches)}th `web_search`" in text


def test_the_readme_policy_terminates_as_the_readme_says(tmp_path: Path) -> None:
    policy = _readme_policy()
    unknown = math.ceil(policy["scar_limit"] / MODERATE)
    searches = int(policy["budget"] / policy["tools"]["web_search"]["cost"])
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            admin = {"Authorization": f"Bearer {server.admin_token}"}

            def agent(agent_id: str) -> dict[str, str]:
                body = {"agent_id": agent_id, "policy": policy}
                created = http.post("/v1/agents", json=body, headers=admin)
                assert created.status_code == 201, created.text
                return {"Authorization": f"Bearer {created.json()['token']}"}

            def ask(agent_id: str, token: dict[str, str], tool: str) -> dict[str, Any]:
                answer = http.post(
                    f"/v1/agents/{agent_id}/actions", json={"tool": tool}, headers=token
                )
                assert answer.status_code == 200, answer.text
                result: dict[str, Any] = answer.json()
                return result

            def status(agent_id: str) -> dict[str, Any]:
                result: dict[str, Any] = http.get(f"/v1/agents/{agent_id}", headers=admin).json()
                return result

            token = agent("prober")
            for n in range(1, unknown + 1):
                assert status("prober")["alive"] is True
                denied = ask("prober", token, f"unknown_{n}")
                assert denied["reason"]["code"] == "tool_not_allowed"
            prober = status("prober")
            assert (prober["alive"], prober["termination_reason"]) == (False, "scar_limit")
            assert prober["scar_score"] == MODERATE * unknown
            assert ask("prober", token, "web_search")["reason"]["code"] == "terminated"

            token = agent("spender")
            for n in range(1, searches + 1):
                assert status("spender")["alive"] is True, n
                assert ask("spender", token, "web_search")["decision"] == "allowed"
            spender = status("spender")
            assert spender["remaining"] == 0
            assert (spender["alive"], spender["termination_reason"]) == (False, "budget_exhausted")
            assert ask("spender", token, "web_search")["reason"]["code"] == "terminated"
    finally:
        server.kill()
