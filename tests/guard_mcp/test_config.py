"""guard-mcp's command line, its one-line errors, and its texts for the model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from client_sdk import ToolRule
from guard_mcp.__main__ import main
from guard_mcp.config import Settings, _parser, parse
from guard_mcp.errors import ConfigError
from guard_mcp.guard import denial_text, rule_note
from tests.guard_mcp.conftest import GUARD_MCP

DOC = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()


def test_a_command_after_the_double_dash_is_the_stdio_upstream() -> None:
    settings = parse(["--tool-prefix", "fs.", "--cost-from", "pay=amount", "--", "npx", "-y", "x"])
    assert settings == Settings(
        command=("npx", "-y", "x"),
        upstream_url=None,
        listen=None,
        tool_prefix="fs.",
        cost_from={"pay": "amount"},
    )
    assert settings.approval_timeout == 300
    assert settings.cost_argument("fs.pay", "pay") == "amount"


LISTEN_TOKEN = "t" * 32


def test_an_http_upstream_and_an_http_listener(tmp_path: Path) -> None:
    argv = ["--upstream-url", "http://127.0.0.1:8931/mcp", "--listen", "[::1]:8940"]
    settings = parse(argv, {"GUARD_MCP_LISTEN_TOKEN": LISTEN_TOKEN}, tmp_path)
    assert (settings.command, settings.listen) == ((), ("::1", 8940))
    assert settings.listen_token == LISTEN_TOKEN
    assert settings.upstream_label == "http://127.0.0.1:8931/mcp"
    assert LISTEN_TOKEN not in repr(settings)


def test_the_listener_token_is_read_from_dotenv_when_the_environment_has_none(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text(f"GUARD_MCP_LISTEN_TOKEN={LISTEN_TOKEN}\n")
    settings = parse(["--listen", "127.0.0.1:8940", "--", "x"], {}, tmp_path)
    assert settings.listen_token == LISTEN_TOKEN
    assert parse(["--", "x"], {}, tmp_path).listen_token is None  # only with --listen


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {},
            "--listen needs a bearer token in GUARD_MCP_LISTEN_TOKEN (environment or ",
            id="none",
        ),
        pytest.param(
            {"GUARD_MCP_LISTEN_TOKEN": "  "},
            "--listen needs a bearer token in GUARD_MCP_LISTEN_TOKEN (environment or ",
            id="blank",
        ),
        pytest.param(
            {"GUARD_MCP_LISTEN_TOKEN": "secret"},
            "GUARD_MCP_LISTEN_TOKEN is 6 characters; it must be at least 32: make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'",
            id="short",
        ),
    ],
)
def test_a_listener_without_a_token_of_32_characters_is_refused(
    environ: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        parse(["--listen", "0.0.0.0:8940", "--", "x"], environ, tmp_path)


@pytest.mark.parametrize(
    ("given", "command"),
    [
        pytest.param("npx -y server /srv/data", ("npx", "-y", "server", "/srv/data"), id="plain"),
        pytest.param(
            "server --root '/srv/my data' -- x",
            ("server", "--root", "/srv/my data", "--", "x"),
            id="quoted-and-double-dash",
        ),
    ],
)
def test_the_upstream_command_may_be_one_string_split_as_a_shell_would(
    given: str, command: tuple[str, ...]
) -> None:
    settings = parse(["--tool-prefix", "fs.", "--upstream-command", given])
    assert (settings.command, settings.tool_prefix) == (command, "fs.")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            [],
            "give the upstream server either as a command (after -- or as --upstream-command) "
            "or as --upstream-url URL",
            id="none",
        ),
        pytest.param(
            ["--upstream-url", "http://h/mcp", "--", "x"],
            "give the upstream server either as a command",
            id="url-and-command",
        ),
        pytest.param(
            ["--upstream-url", "http://h/mcp", "--upstream-command", "x"],
            "give the upstream server either as a command",
            id="url-and-command-option",
        ),
        pytest.param(
            ["--upstream-command", "x y", "--", "x", "y"],
            "give the upstream command once: after -- or as --upstream-command, not both",
            id="command-twice",
        ),
        pytest.param(["--upstream-command", "  "], "--upstream-command is empty", id="empty"),
        pytest.param(
            ["--upstream-command", "server 'unclosed"],
            '--upstream-command cannot be split: No closing quotation: "server \'unclosed"',
            id="unclosed-quote",
        ),
        pytest.param(["--upstream-url", "ftp://h"], "must be an http(s) URL", id="url"),
        pytest.param(["--listen", "8940", "--", "x"], "--listen must be HOST:PORT", id="listen"),
        pytest.param(["--cost-from", "pay", "--", "x"], "must be TOOL=ARGUMENT", id="cost"),
        pytest.param(["--approval-timeout", "0", "--", "x"], "must be a positive", id="timeout"),
        pytest.param(
            ["--what", "--", "x"],
            "unknown arguments '--what'; the upstream command goes after -- or in "
            "--upstream-command",
            id="unknown",
        ),
    ],
)
def test_a_command_line_that_cannot_work_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(argv)


def test_main_prints_one_line_and_exits_2_on_a_bad_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--listen", "nowhere", "--", "x"]) == 2
    err = capsys.readouterr().err
    assert err == "guard-mcp: --listen must be HOST:PORT with a port in 1..65535, not 'nowhere'\n"


def test_main_with_listen_and_no_token_prints_one_line_and_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GUARD_MCP_LISTEN_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--listen", "127.0.0.1:8940", "--", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "guard-mcp: --listen needs a bearer token in GUARD_MCP_LISTEN_TOKEN (environment or "
        f"{tmp_path / '.env'}), which every HTTP client must send; make one with: "
        "python -c 'import secrets; print(secrets.token_urlsafe(32))'\n"
    )


def test_main_without_an_agent_token_says_where_it_looked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GUARD_AGENT_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("guard-mcp: ")
    assert "GUARD_AGENT_TOKEN" in err
    assert "Traceback" not in err


def test_every_option_is_in_docs_mcp() -> None:
    for action in _parser()._actions:
        for flag in action.option_strings:
            if flag not in ("-h", "--help"):
                assert f"`{flag}" in DOC, f"{flag} is not in docs/mcp.md"


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        pytest.param(
            {"code": "insufficient_budget", "cost": Decimal(3), "remaining": Decimal("1.5")},
            "denied by guard: insufficient_budget (needs 3, 1.5 left)",
            id="budget",
        ),
        pytest.param(
            {"code": "tool_not_allowed", "tool": "rm"},
            "denied by guard: tool_not_allowed (rm is not in the agent's policy)",
            id="not-allowed",
        ),
        pytest.param(
            {"code": "tool_call_limit", "tool": "pay", "max_calls": 2},
            "denied by guard: tool_call_limit (pay may run at most 2 times)",
            id="limit",
        ),
        pytest.param(
            {"code": "terminated", "reason": "scar_limit"},
            "denied by guard: terminated (the agent is terminated: scar_limit)",
            id="terminated",
        ),
        pytest.param(
            {"code": "policy_rule", "rule": "after-private", "message": "no outside email"},
            "denied by guard: policy_rule (policy rule after-private: no outside email)",
            id="policy-rule",
        ),
        pytest.param(
            {"code": "policy_error", "rule": "internal", "message": "no key to"},
            "denied by guard: policy_error (policy rule internal cannot judge this call: "
            "no key to)",
            id="policy-error-rule",
        ),
        pytest.param(
            {"code": "policy_error", "cost_from": "amount", "message": "input.amount is missing"},
            "denied by guard: policy_error (the call's amount cannot be read: "
            "input.amount is missing)",
            id="policy-error-cost-from",
        ),
        pytest.param(
            {"code": "rate_limited", "max_actions": 5, "window_secs": Decimal(60)},
            "denied by guard: rate_limited (max_actions=5, window_secs=60)",
            id="other",
        ),
    ],
)
def test_each_denial_reads_as_its_code_and_what_it_means(reason: dict, text: str) -> None:
    assert denial_text(reason, "act-9") == f"{text}; action act-9; the call was not run."


def test_the_description_note_says_approval_and_cost_and_nothing_when_free() -> None:
    free = ToolRule(cost=Decimal(0), requires_approval=False, max_calls=None)
    held = ToolRule(cost=Decimal("0.5"), requires_approval=True, max_calls=None)
    assert rule_note(free, None) == ""
    assert rule_note(held, None) == (
        "[guard: each call waits for a person's approval; costs 0.5 of the agent's budget]"
    )
    assert rule_note(free, "amount") == "[guard: costs the number in its 'amount' argument]"


def _rule(effect: str) -> dict[str, str]:
    return {"name": effect, "when": "true", "effect": effect}


def test_the_description_note_says_may_need_approval_when_a_policy_rule_can_hold() -> None:
    free = Decimal(0)
    held_by_rule = ToolRule(
        cost=free, requires_approval=False, max_calls=None, rules=(_rule("require_approval"),)
    )
    assert rule_note(held_by_rule, None) == "[guard: a call may need a person's approval]"
    allowed_by_rule = ToolRule(
        cost=free, requires_approval=True, max_calls=None, rules=(_rule("allow"),)
    )
    assert rule_note(allowed_by_rule, None) == "[guard: a call may need a person's approval]"
    denied_only = ToolRule(
        cost=free, requires_approval=False, max_calls=None, rules=(_rule("deny"),)
    )
    assert rule_note(denied_only, None) == ""
    charged = ToolRule(cost=free, requires_approval=False, max_calls=None, cost_from="amount")
    assert rule_note(charged, None) == "[guard: costs the number in its 'amount' argument]"


def test_an_upstream_that_cannot_start_is_one_line_and_exit_1(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
    env |= {"GUARD_AGENT_TOKEN": "agt_someone.x", "GUARD_URL": "http://127.0.0.1:1"}
    done = subprocess.run(
        [str(GUARD_MCP), "--", sys.executable, "-c", "raise SystemExit(1)"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    command = f"{sys.executable} -c raise SystemExit(1)"
    assert done.stderr.endswith(f"guard-mcp: upstream {command}: Connection closed\n")
    assert "Traceback" not in done.stderr
