"""State snapshots through a real guardd: written while it serves, a restart
from them gives what a fold from genesis gives, one that cannot be trusted
is ignored with a warning; and the settings that drive them."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from guardd.config import SettingsError, parse_settings
from tests.guardd.conftest import Agent, Api
from tests.guardd.test_restart import _serve_a_bit_of_everything, snapshot
from tests.support.server import GuardServer


def _snapshot_seqs(data_dir: Path) -> dict[str, int]:
    out = {}
    for path in sorted((data_dir / "snapshots").glob("*.snapshot")):
        body = path.read_bytes().partition(b"\n")[0]
        out[path.name.removesuffix(".snapshot")] = json.loads(body)["seq"]
    return out


def _wait_for_snapshots(api: Api, agent_ids: list[str]) -> None:
    """Until every agent's snapshot is at its head (the rounds run each second)."""
    heads = {a: api.status(Agent(a, "", api.admin))["head"]["seq"] for a in agent_ids}
    deadline = time.monotonic() + 30
    while _snapshot_seqs(api.server.data_dir) != heads:
        assert time.monotonic() < deadline, (_snapshot_seqs(api.server.data_dir), heads)
        time.sleep(0.1)


def test_a_restart_from_snapshots_rebuilds_everything_and_a_bad_one_is_ignored(
    tmp_path: Path,
) -> None:
    server = GuardServer(tmp_path / "guard-data", args=["--snapshot-records", "1"]).start()
    api = Api(server)
    try:
        agents = _serve_a_bit_of_everything(api)
        _wait_for_snapshots(api, sorted(agents))
        before = snapshot(api, list(agents.values()))
        assert server.stop() == 0
        server.start()
        assert snapshot(api, list(agents.values())) == before
        assert "ignoring its state snapshot" not in server.read_output()
        # Another agent's snapshot in busy's place: ignored, busy folded whole.
        assert server.stop() == 0
        snapshots = server.data_dir / "snapshots"
        shutil.copyfile(snapshots / "money.snapshot", snapshots / "busy.snapshot")
        server.start()
        assert snapshot(api, list(agents.values())) == before
        assert (
            "agent busy: ignoring its state snapshot: it is the snapshot of 'money', not of"
            " 'busy'; folded from genesis"
        ) in server.read_output()
    finally:
        api.close()
        server.kill()


def test_snapshot_settings_from_flags_and_environment() -> None:
    defaults = parse_settings([], {})
    assert (defaults.snapshot_records, defaults.snapshot_secs) == (10_000, 300)
    flags = parse_settings(["--snapshot-records", "50", "--snapshot-secs", "2.5"], {})
    assert (flags.snapshot_records, flags.snapshot_secs) == (50, 2.5)
    env = {"GUARD_SNAPSHOT_RECORDS": "7", "GUARD_SNAPSHOT_SECS": "60"}
    assert (parse_settings([], env).snapshot_records, parse_settings([], env).snapshot_secs) == (
        7,
        60,
    )


def test_recent_actions_from_flag_and_environment() -> None:
    assert parse_settings([], {}).recent_actions == 1_000
    assert parse_settings(["--recent-actions", "50"], {}).recent_actions == 50
    assert parse_settings([], {"GUARD_RECENT_ACTIONS": "7"}).recent_actions == 7


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--recent-actions", "0"],
            "--recent-actions must be a whole number above 0, not '0'",
            id="recent-zero",
        ),
        pytest.param(
            ["--snapshot-records", "0"],
            "--snapshot-records must be a whole number above 0, not '0'",
            id="records-zero",
        ),
        pytest.param(
            ["--snapshot-records", "1.5"],
            "--snapshot-records must be a whole number above 0, not '1.5'",
            id="records-fraction",
        ),
        pytest.param(
            ["--snapshot-secs", "nan"],
            "--snapshot-secs must be a number above 0, not 'nan'",
            id="secs-nan",
        ),
        pytest.param(
            ["--snapshot-secs", "-1"],
            "--snapshot-secs must be a number above 0, not '-1'",
            id="secs-negative",
        ),
    ],
)
def test_a_bad_snapshot_setting_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=f"^{re.escape(message)}$"):
        parse_settings(argv, {})
