"""``audit verify --store URL``: the logs of a PostgreSQL store verified in
place, every agent or one, text or one JSON report per agent per line; a
changed row fails its agent only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.cli import main
from tests.guardd.conftest import Agent, Api, ok
from tests.support.postgres import run_sql
from tests.support.server import GuardServer

POLICY = {"budget": 10, "scar_limit": 30, "tools": {"search": {"cost": 1}}}


@pytest.fixture
def store(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[str, Api, list[Agent]]]:
    server = GuardServer(tmp_path / "node", args=["--store", postgres_dsn]).start()
    api = Api(server)
    try:
        agents = [api.create("alpha", POLICY), api.create("beta", POLICY)]
        for agent in agents:
            ok(agent.act("search"))
        yield postgres_dsn, api, agents
    finally:
        api.close()
        server.kill()


def test_every_agent_of_a_store_verifies(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, api, _ = store
    assert main(["verify", "--store", dsn, "--public-key", api.server.public_key]) == 0
    out = capsys.readouterr().out
    assert out.count("OK: 4 records (seq 0 to 3)") == 2
    assert "agent alpha" in out
    assert "agent beta" in out
    assert out.count("(given; every signature matches it)") == 2


def test_json_gives_one_report_per_agent_per_line(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _, _ = store
    assert main(["verify", "--store", dsn, "--json"]) == 0
    captured = capsys.readouterr()
    reports = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["agent_id"], r["ok"], r["records"]) for r in reports] == [
        ("alpha", True, 4),
        ("beta", True, 4),
    ]
    # Without --public-key the store's own record of it is used, and said so once.
    assert captured.err.count("the public key is the one the store records") == 1


def test_without_public_key_the_stores_own_key_is_checked_but_not_trusted(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, api, _ = store
    key = api.server.public_key
    assert main(["verify", "--store", dsn, "--json"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["public_key"], r["key_trusted"]) for r in reports] == [(key, False)] * 2
    assert main(["verify", "--store", dsn, "--agent", "alpha"]) == 0
    out = capsys.readouterr().out
    assert "given" not in out.replace("not given", "")
    assert (
        f"public key: {key} (the key the store records, not given; every signature matches it)"
        in out.splitlines()
    )


def test_with_public_key_the_key_is_trusted(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, api, _ = store
    key = api.server.public_key
    assert main(["verify", "--store", dsn, "--public-key", key, "--json"]) == 0
    captured = capsys.readouterr()
    reports = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["public_key"], r["key_trusted"], r["warnings"]) for r in reports] == [
        (key, True, [])
    ] * 2
    assert captured.err == ""


def test_a_store_recording_another_key_than_the_logs_fails_naming_it(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, api, _ = store
    run_sql(dsn, "update guard_meta set value = repeat('ab', 32) where key = 'audit_public_key'")
    assert main(["verify", "--store", dsn, "--agent", "alpha"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        "FAILED: line 1 (seq 0): public key does not match",
        f"  the genesis record names public key {api.server.public_key}, "
        "not the key the store records",
    ]


def test_a_changed_row_fails_its_agent_only_and_exits_1(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _, _ = store
    run_sql(
        dsn,
        "update guard_logs set line = convert_to(replace(convert_from(line, 'UTF8'),"
        " '\"search\"', '\"starch\"'), 'UTF8') where agent_id = 'beta' and seq = 2",
    )
    assert main(["verify", "--store", dsn, "--json"]) == 1
    reports = {r["agent_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert reports["alpha"]["ok"] is True
    assert reports["beta"]["ok"] is False
    assert reports["beta"]["failure"]["seq"] == 2
    assert main(["verify", "--store", dsn, "--agent", "alpha"]) == 0


def test_an_agent_the_store_lacks_is_an_error(
    store: tuple[str, Api, list[Agent]], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _, _ = store
    assert main(["verify", "--store", dsn, "--agent", "gamma"]) == 2
    assert "has no agent gamma" in capsys.readouterr().err


def test_store_and_a_file_do_not_go_together(
    store: tuple[str, Api, list[Agent]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _, _ = store
    assert main(["verify", str(tmp_path / "x.jsonl"), "--store", dsn]) == 2
    assert main(["verify", "--agent", "alpha", str(tmp_path / "x.jsonl")]) == 2
    assert main(["verify", "--store", "mysql://db/x"]) == 2
    err = capsys.readouterr().err
    assert "not both" in err
    assert "--agent goes with --store" in err
    assert "postgresql://" in err


def test_an_unreachable_store_is_an_error_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["verify", "--store", "postgresql://nobody@127.0.0.1:9/none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("audit: error: cannot read the store")
    assert "Traceback" not in err


def test_what_if_replays_every_agent_of_a_store_under_a_candidate(
    store: tuple[str, Api, list[Agent]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _, _ = store
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"budget": 10, "scar_limit": 30, "tools": {}}))
    assert main(["replay", "--store", dsn, "--policy", str(candidate), "--json"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["agent_id"], r["decisions"], r["changed"]) for r in reports] == [
        ("alpha", 1, 1),
        ("beta", 1, 1),
    ]
    assert reports[0]["by_change"] == {"allowed->denied:tool_not_allowed": 1}
    assert main(["replay", "--store", dsn, "--agent", "beta", "--policy", str(candidate)]) == 0
    assert "beta" in capsys.readouterr().out


def test_verify_store_without_the_driver_says_how_to_install_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = "import sys; sys.modules['asyncpg'] = None; from audit.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "verify", "--store", "postgresql://guard@127.0.0.1:1/x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("GUARD_")},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.endswith(
        "asyncpg, which is not installed; install it with: .venv/bin/pip install -e '.[postgres]'\n"
    )
    assert "Traceback" not in done.stderr
