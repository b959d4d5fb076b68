"""Tamper vectors (tests/data/tampered/, made by its generate.py from a real
log signed with a fixed test key): every attack is caught, with the fixed
reason phrase of agents_runtime/log/verify.py, by

- the audit tool, given the public key (and again given the checkpoint of
  the untampered head: only then is truncation caught; and given no key:
  then a log re-signed throughout with a foreign key passes, which is why
  the tool warns that without a key nothing is proven about the writer);
- guardd's startup, which quarantines the agent (a truncated log passes:
  startup has no checkpoint to hold it against, see test below);
- the verify endpoint, for a log replaced under a running server: the
  endpoint re-reads the file and holds it against the head the server
  knows, so truncation is caught there too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.errors import Quarantined
from agents_runtime.log.verify import Failure
from audit import cli as audit_cli
from guardd.__main__ import build
from guardd.config import parse_settings
from tests.reliability.support import ok_json
from tests.support.server import GuardServer

DATA = Path(__file__).resolve().parents[1] / "data" / "tampered"
EXPECT: dict[str, Any] = json.loads((DATA / "expectations.json").read_text())
VICTIM: str = EXPECT["victim"]
OTHER: str = EXPECT["other"]
PUBLIC_KEY: str = EXPECT["public_key"]
ADMIN_TOKEN = "tamper-test-admin-token-0123456789"
VECTORS = [pytest.param(v, id=v["file"].removesuffix(".jsonl")) for v in EXPECT["vectors"]]
ATTACKS = [
    "content_byte_changed",
    "hash_byte_changed",
    "signature_byte_changed",
    "record_deleted",
    "record_duplicated",
    "records_swapped",
    "record_inserted",
    "record_from_other_agent",
    "log_from_other_agent",
    "prefix_spliced",
    "resigned_foreign_key",
    "resigned_foreign_key_genesis_kept",
    "truncated",
]


def test_every_attack_has_a_vector_and_the_public_key_file_matches() -> None:
    assert [v["file"] for v in EXPECT["vectors"]] == [f"{a}.jsonl" for a in ATTACKS]
    assert (DATA / "public_key.hex").read_text().strip() == PUBLIC_KEY


def test_generator_reproduces_the_committed_vectors(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DATA / "generate.py"), str(tmp_path)], check=True, timeout=60
    )
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file() and p.suffix != ".py"
    )
    assert made == committed
    for name in made:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), (
            f"{name} is not what generate.py makes: run python tests/data/tampered/generate.py"
        )


# -- the audit tool -------------------------------------------------------------


def _audit(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, Any]:
    code = audit_cli.main(["verify", str(path), *options, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def victim_file(tmp_path: Path) -> Path:
    """Where a data-dir log of the victim would be: the tool takes the
    expected log_id from the file name agents/<id>.jsonl."""
    path = tmp_path / "agents" / f"{VICTIM}.jsonl"
    path.parent.mkdir()
    return path


@pytest.mark.parametrize("vector", VECTORS)
@pytest.mark.parametrize(
    ("given", "expected_key"),
    [
        pytest.param(("--public-key", PUBLIC_KEY), "failure", id="key"),
        pytest.param(
            ("--public-key", PUBLIC_KEY, "--checkpoint", EXPECT["checkpoint"]),
            "failure_with_checkpoint",
            id="key+checkpoint",
        ),
        pytest.param((), "failure_without_key", id="no-key"),
    ],
)
def test_audit_tool_reports_the_expected_failure(
    vector: dict[str, Any],
    given: tuple[str, ...],
    expected_key: str,
    victim_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copyfile(DATA / vector["file"], victim_file)
    code, report = _audit(victim_file, capsys, *given)
    expected = vector[expected_key]
    assert report["failure"] == expected
    assert report["ok"] is (expected is None)
    assert code == (0 if expected is None else 1)


def test_audit_tool_passes_the_originals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for agent_id in (VICTIM, OTHER):
        code, report = _audit(
            DATA / "original" / f"{agent_id}.jsonl",
            capsys,
            "--public-key",
            PUBLIC_KEY,
            "--log-id",
            agent_id,
        )
        assert (code, report["ok"], report["key_trusted"]) == (0, True, True)
    code, report = _audit(
        DATA / "original" / f"{VICTIM}.jsonl",
        capsys,
        "--public-key",
        PUBLIC_KEY,
        "--checkpoint",
        EXPECT["checkpoint"],
    )
    assert (code, report["ok"]) == (0, True)


# -- guardd startup -------------------------------------------------------------


def _data_dir(root: Path, victim_log: Path) -> Path:
    """A data dir holding the victim's log and the other agent's, with the
    public key but no private key: guardd starts read-only, which is all
    verification needs."""
    keys, agents = root / "keys", root / "agents"
    keys.mkdir(parents=True, mode=0o700)
    agents.mkdir(mode=0o700)
    (keys / "audit.pub").write_text(PUBLIC_KEY + "\n")
    fd = os.open(keys / "token.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, bytes(range(32)))
    os.close(fd)
    shutil.copyfile(victim_log, agents / f"{VICTIM}.jsonl")
    shutil.copyfile(DATA / "original" / f"{OTHER}.jsonl", agents / f"{OTHER}.jsonl")
    return root


@pytest.mark.parametrize("vector", VECTORS)
def test_startup_quarantines_the_tampered_agent_with_the_reason(
    vector: dict[str, Any], tmp_path: Path
) -> None:
    root = _data_dir(tmp_path / "guard-data", DATA / vector["file"])
    settings = parse_settings(["--data-dir", str(root)], env={"GUARD_ADMIN_TOKEN": ADMIN_TOKEN})
    guard, summary, _ = build(settings)  # what guardd does before it serves
    registry = guard.registry
    assert OTHER in registry.actors
    expected = vector["failure"]
    if expected is None:
        # Truncation at a record boundary leaves a valid, shorter log; startup
        # has no checkpoint to hold it against. The verify endpoint and the
        # audit tool with --checkpoint catch it.
        assert vector["file"] == "truncated.jsonl"
        assert summary.quarantined == {}
        assert VICTIM in registry.actors
        return
    assert summary.quarantined == {VICTIM: Failure(**expected)}
    message = f"line {expected['line']} (seq {expected['seq']}): {expected['reason']}"
    with pytest.raises(Quarantined, match=rf"\({re.escape(message)}\)$"):
        registry.ref(VICTIM)


def test_guardd_lists_a_quarantined_agent_and_answers_503(tmp_path: Path) -> None:
    vector = EXPECT["vectors"][0]
    root = _data_dir(tmp_path / "guard-data", DATA / vector["file"])
    server = GuardServer(root, env={"GUARD_ADMIN_TOKEN": ADMIN_TOKEN}).start()
    try:
        failure = vector["failure"]
        message = f"line {failure['line']} (seq {failure['seq']}): {failure['reason']}"
        with server.client(ADMIN_TOKEN) as admin:
            agents = {a["agent_id"]: a for a in ok_json(admin.get("/v1/agents"))["agents"]}
            assert agents[VICTIM]["state"] == "quarantined"
            assert agents[VICTIM]["error"] == message
            assert agents[OTHER]["state"] == "active"
            for path in ("", "/verify", "/log", "/actions/act-1"):
                answer = ok_json(admin.get(f"/v1/agents/{VICTIM}{path}"), 503)
                assert answer["code"] == "quarantined"
        assert f"quarantined: {VICTIM}: {message}" in server.read_output()
        assert "agents: 1 loaded, 1 quarantined" in server.read_output()
    finally:
        server.kill()


# -- the verify endpoint of a running server -------------------------------------


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardServer]:
    root = tmp_path_factory.mktemp("tamper") / "guard-data"
    _data_dir(root, DATA / "original" / f"{VICTIM}.jsonl")
    server = GuardServer(root, env={"GUARD_ADMIN_TOKEN": ADMIN_TOKEN}).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.parametrize("vector", VECTORS)
def test_verify_endpoint_catches_a_log_changed_under_the_running_server(
    vector: dict[str, Any], running: GuardServer
) -> None:
    path = running.data_dir / "agents" / f"{VICTIM}.jsonl"
    original = (DATA / "original" / f"{VICTIM}.jsonl").read_bytes()
    with running.client(ADMIN_TOKEN) as admin:
        assert ok_json(admin.get(f"/v1/agents/{VICTIM}/verify"))["ok"] is True
        with path.open("r+b") as fh:  # in place, as an attacker with write access would
            fh.write((DATA / vector["file"]).read_bytes())
            fh.truncate()
        try:
            report = ok_json(admin.get(f"/v1/agents/{VICTIM}/verify"))
        finally:
            path.write_bytes(original)
        expected = vector["failure_with_checkpoint"]
        assert report["ok"] is False
        assert report["failure"] == expected
        assert ok_json(admin.get(f"/v1/agents/{VICTIM}/verify"))["ok"] is True
