"""Where the clients find the address and the tokens, and what they say when they cannot."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from client_sdk import AdminClient, AsyncGuardClient, GuardClient, GuardSetupError, Unauthorized

AGENT_TOKEN = "agt_mail-bot.c2VjcmV0LW1hYw"


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and no GUARD_* variable in the environment."""
    for name in list(os.environ):
        if name.startswith("GUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_token_file(data_dir: Path, token: str) -> Path:
    (data_dir / "keys").mkdir(parents=True)
    path = data_dir / "keys" / "admin.token"
    path.write_text(token + "\n")
    return path


def admin(**kwargs) -> AdminClient:
    client = AdminClient(**kwargs)
    client.close()
    return client


# ---- admin token ------------------------------------------------------------------


def test_admin_token_from_the_environment_wins_over_dotenv_and_the_token_file(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_ADMIN_TOKEN", "from-env")
    (cwd / ".env").write_text("GUARD_ADMIN_TOKEN=from-dotenv\n")
    write_token_file(cwd / "guard-data", "from-file")
    client = admin()
    assert (client._token, client.token_source) == (
        "from-env",
        "environment variable GUARD_ADMIN_TOKEN",
    )


def test_admin_token_from_dotenv_wins_over_the_token_file(cwd):
    (cwd / ".env").write_text("# operator settings\nGUARD_ADMIN_TOKEN='from-dotenv'\n")
    write_token_file(cwd / "guard-data", "from-file")
    client = admin()
    assert (client._token, client.token_source) == (
        "from-dotenv",
        f"GUARD_ADMIN_TOKEN in {cwd / '.env'}",
    )


def test_dotenv_is_read_without_touching_os_environ(cwd):
    (cwd / ".env").write_text("GUARD_ADMIN_TOKEN=from-dotenv\nGUARD_URL=http://127.0.0.1:9300\n")
    admin()
    assert "GUARD_ADMIN_TOKEN" not in os.environ
    assert "GUARD_URL" not in os.environ


def test_admin_token_file_in_the_default_data_dir(cwd):
    write_token_file(cwd / "guard-data", "from-file")
    client = admin()
    assert (client._token, client.token_source) == (
        "from-file",
        str(cwd / "guard-data" / "keys" / "admin.token"),
    )


def test_admin_token_file_in_guard_data_dir_from_the_environment(cwd, monkeypatch):
    write_token_file(cwd / "elsewhere", "from-file")
    write_token_file(cwd / "guard-data", "not-this-one")
    monkeypatch.setenv("GUARD_DATA_DIR", "elsewhere")
    assert admin()._token == "from-file"


def test_admin_token_file_in_guard_data_dir_from_dotenv(cwd, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    write_token_file(data_dir, "from-file")
    (cwd / ".env").write_text(f"GUARD_DATA_DIR={data_dir}\n")
    assert admin()._token == "from-file"


def test_admin_token_argument_wins_over_everything(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_ADMIN_TOKEN", "from-env")
    (cwd / ".env").write_text("GUARD_ADMIN_TOKEN=from-dotenv\n")
    client = admin(token="from-argument")
    assert (client._token, client.token_source) == ("from-argument", "the token argument")


def test_empty_values_count_as_unset(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_ADMIN_TOKEN", "")
    (cwd / ".env").write_text("GUARD_ADMIN_TOKEN=\n")
    write_token_file(cwd / "guard-data", "from-file")
    assert admin()._token == "from-file"


def test_missing_admin_token_lists_every_place_looked_at(cwd):
    with pytest.raises(GuardSetupError) as info:
        AdminClient()
    expected = (
        "no admin token found. Looked at:\n"
        "  - the token argument: not given\n"
        "  - environment variable GUARD_ADMIN_TOKEN: not set\n"
        f"  - {cwd / '.env'}: no such file\n"
        f"  - {cwd / 'guard-data' / 'keys' / 'admin.token'} (data directory from the default "
        "./guard-data): no such file\n"
        "Set GUARD_ADMIN_TOKEN, put it in .env, or set GUARD_DATA_DIR to the service's "
        "data directory."
    )
    assert info.value.message == expected
    assert str(info.value) == expected
    assert info.value.code == "setup"
    assert len(info.value.looked_at) == 4


def test_missing_admin_token_says_what_each_source_held(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_ADMIN_TOKEN", "  ")
    (cwd / ".env").write_text("GUARD_DATA_DIR=custom\n")
    (cwd / "custom" / "keys").mkdir(parents=True)
    (cwd / "custom" / "keys" / "admin.token").write_text("\n")
    with pytest.raises(GuardSetupError) as info:
        AdminClient()
    assert info.value.looked_at == [
        "the token argument: not given",
        "environment variable GUARD_ADMIN_TOKEN: empty",
        f"{cwd / '.env'}: no GUARD_ADMIN_TOKEN",
        f"{cwd / 'custom' / 'keys' / 'admin.token'} (data directory from GUARD_DATA_DIR in "
        f"{cwd / '.env'}): empty",
    ]


# ---- address ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "dotenv", "argument", "expected"),
    [
        pytest.param(None, None, None, "http://127.0.0.1:9200", id="default"),
        pytest.param(None, "http://10.0.0.2:9300/", None, "http://10.0.0.2:9300", id="dotenv"),
        pytest.param("http://env:1", "http://dotenv:2", None, "http://env:1", id="env-over-dotenv"),
        pytest.param(
            "http://env:1", "http://dotenv:2", "https://arg:3/", "https://arg:3", id="argument"
        ),
    ],
)
def test_address_comes_from_argument_then_env_then_dotenv_then_default(
    cwd, monkeypatch, env, dotenv, argument, expected
):
    if env:
        monkeypatch.setenv("GUARD_URL", env)
    if dotenv:
        (cwd / ".env").write_text(f"GUARD_URL={dotenv}\n")
    assert admin(token="t", base_url=argument).base_url == expected


def test_address_that_is_not_http_is_a_setup_error(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_URL", "127.0.0.1:9200")
    with pytest.raises(
        GuardSetupError,
        match=re.escape(
            "the service address from environment variable GUARD_URL is not an http:// or "
            "https:// URL: '127.0.0.1:9200'"
        ),
    ):
        AdminClient(token="t")


# ---- agent token ------------------------------------------------------------------


def test_agent_token_from_env_wins_over_dotenv_and_gives_the_agent_id(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_AGENT_TOKEN", AGENT_TOKEN)
    (cwd / ".env").write_text("GUARD_AGENT_TOKEN=agt_other.bWFj\n")
    client = GuardClient()
    client.close()
    assert (client.agent_id, client.token_source) == (
        "mail-bot",
        "environment variable GUARD_AGENT_TOKEN",
    )


async def test_agent_token_from_dotenv(cwd):
    (cwd / ".env").write_text(f"GUARD_AGENT_TOKEN={AGENT_TOKEN}\n")
    async with AsyncGuardClient() as client:
        assert (client.agent_id, client._token) == ("mail-bot", AGENT_TOKEN)


def test_agent_token_and_agent_id_arguments_win(cwd, monkeypatch):
    monkeypatch.setenv("GUARD_AGENT_TOKEN", "agt_other.bWFj")
    with GuardClient(AGENT_TOKEN, agent_id="explicit") as client:
        assert (client.agent_id, client._token) == ("explicit", AGENT_TOKEN)


def test_missing_agent_token_lists_every_place_looked_at(cwd):
    (cwd / ".env").write_text("GUARD_URL=http://127.0.0.1:9300\n")
    with pytest.raises(GuardSetupError) as info:
        GuardClient()
    assert info.value.message == (
        "no agent token found. Looked at:\n"
        "  - the token argument: not given\n"
        "  - environment variable GUARD_AGENT_TOKEN: not set\n"
        f"  - {cwd / '.env'}: no GUARD_AGENT_TOKEN\n"
        "Pass the token returned when the agent was created, or set GUARD_AGENT_TOKEN."
    )


def test_token_without_agent_id_needs_the_agent_id_argument(cwd):
    with pytest.raises(
        GuardSetupError,
        match=r"^no agent ID: the agent token from the token argument is not of the form "
        r"agt_<agent_id>\.<mac>, and no agent_id argument was given$",
    ):
        GuardClient("opaque-token")
    with GuardClient("opaque-token", agent_id="bot") as client:
        assert client.agent_id == "bot"


# ---- against a real server ------------------------------------------------------
# guard_server keeps its data in tmp_path / "guard-data": the default data directory
# once the test has moved into tmp_path.


def test_admin_client_with_nothing_configured_but_guard_url_finds_the_token_file(
    cwd, guard_server, monkeypatch
):
    monkeypatch.setenv("GUARD_URL", guard_server.url)
    with AdminClient() as admin:
        assert admin.list_agents() == []
        assert admin.token_source == str(guard_server.data_dir / "keys" / "admin.token")


@pytest.mark.parametrize(
    ("env_token", "dotenv_token"),
    [
        pytest.param("wrong", "right", id="environment-before-dotenv"),
        pytest.param(None, "wrong", id="dotenv-before-token-file"),
    ],
)
def test_the_token_found_first_in_the_order_is_the_one_sent(
    cwd, guard_server, monkeypatch, env_token, dotenv_token
):
    if env_token:
        monkeypatch.setenv("GUARD_ADMIN_TOKEN", env_token)
    right = guard_server.admin_token
    (cwd / ".env").write_text(
        f"GUARD_URL={guard_server.url}\n"
        f"GUARD_ADMIN_TOKEN={right if dotenv_token == 'right' else dotenv_token}\n"
    )
    with AdminClient() as admin, pytest.raises(Unauthorized):
        admin.list_agents()
    with AdminClient(token=right) as admin:
        assert admin.list_agents() == []


async def test_agent_client_from_guard_agent_token(cwd, guard_server, monkeypatch):
    with AdminClient(guard_server.admin_token, base_url=guard_server.url) as admin:
        created = admin.create_agent("env-bot", {"budget": 1, "scar_limit": 1, "tools": {}})
    monkeypatch.setenv("GUARD_URL", guard_server.url)
    monkeypatch.setenv("GUARD_AGENT_TOKEN", created.token)
    async with AsyncGuardClient() as client:
        assert (await client.status()).agent_id == "env-bot"
