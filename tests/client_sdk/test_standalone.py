"""The client installs and runs without the server: ``sdk/pyproject.toml``
builds a distribution holding ``client_sdk`` alone, requiring only what the
client imports, and the client works in a Python where every server package
is impossible to import. PyNaCl and rfc8785 are the server's and also the
client's, for ``verify_receipt`` alone: the client imports them only when a
receipt is checked, so asking works with them blocked too."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from tests.support.server import GuardServer

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"
SERVER_PACKAGES = [
    "quart",
    "hypercorn",
    "nacl",
    "cattrs",
    "rfc8785",
    "prometheus_client",
    "uvloop",
    "guardd",
    "agents_runtime",
    "audit",
    "console",
]
SETUP = "from setuptools import setup; setup()"
# What the client's imports are called on the package index.
DISTRIBUTION_OF = {"dotenv": "python-dotenv", "nacl": "pynacl"}
# Server packages the client needs for verify_receipt only.
RECEIPT_PACKAGES = {"pynacl", "rfc8785"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def _metadata(tmp_path: Path) -> tuple[list[str], list[str], list[str]]:
    """(requirements, top-level packages, source files) as setuptools reads
    ``sdk/pyproject.toml``: the metadata any wheel built from it carries."""
    subprocess.run(
        [sys.executable, "-c", SETUP, "-q", "egg_info", "--egg-base", str(tmp_path)],
        cwd=SDK,
        check=True,
        capture_output=True,
    )
    (info,) = tmp_path.glob("*.egg-info")
    # requires.txt lists the extras' requirements after the base ones, each
    # extra under its own [section]: the adapters' frameworks are not the client's.
    base = (info / "requires.txt").read_text().partition("\n[")[0]
    return (
        base.split(),
        (info / "top_level.txt").read_text().split(),
        (info / "SOURCES.txt").read_text().split(),
    )


def _third_party_imports(*, top_level_only: bool = False) -> set[str]:
    """Top-level modules ``client_sdk`` imports that are not the standard
    library (only those its modules import as they load, if ``top_level_only``)."""
    found: set[str] = set()
    for path in (ROOT / "client_sdk").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body if top_level_only else ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {name.split(".")[0] for name in names}
    return found - set(sys.stdlib_module_names) - {"client_sdk"}


def test_the_client_distribution_holds_client_sdk_and_requires_only_client_packages(
    tmp_path: Path,
) -> None:
    requires, top_level, sources = _metadata(tmp_path)
    assert top_level == ["client_sdk"]
    packages = {Path(s).parent.name for s in sources if s.endswith(".py")}
    assert packages == {"client_sdk", "integrations"}
    assert {_name(r) for r in requires} == {
        "httpx",
        "anyio",
        "attrs",
        "orjson",
        "python-dotenv",
        *RECEIPT_PACKAGES,
    }
    server = {_name(p) for p in [*SERVER_PACKAGES, "pynacl"]} - RECEIPT_PACKAGES
    assert not {_name(r) for r in requires} & server


def test_the_client_requires_exactly_what_it_imports_with_the_root_projects_bounds() -> None:
    project = tomllib.loads((SDK / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"]
    # An extra's package (webauthn for receipts' passkeys) is imported only
    # inside the function that needs it, never as a module loads.
    extras = {_name(r) for group in project["optional-dependencies"].values() for r in group}
    imported = {DISTRIBUTION_OF.get(module, module) for module in _third_party_imports()}
    on_load = {
        DISTRIBUTION_OF.get(module, module) for module in _third_party_imports(top_level_only=True)
    }
    assert {_name(r) for r in declared} == imported - extras
    assert not on_load & extras
    # one lower bound per package for the whole repository
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(declared) <= set(root)


BLOCKED_CLIENT = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the client must not need it")
            return None

    sys.meta_path.insert(0, Block())
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} could still be imported")

    from client_sdk import AdminClient, GuardClient

    url, admin_token = sys.argv[2], sys.argv[3]
    policy = {"budget": 10, "scar_limit": 5, "tools": {"search": {"cost": 1}}}
    with AdminClient(admin_token, base_url=url) as admin:
        created = admin.create_agent("standalone", policy)
    with GuardClient(created.token, base_url=url) as agent:
        decision = agent.request_action("search", {"q": "guard"})
    print(decision.decision, decision.remaining)
    """
)


def test_the_client_works_against_guardd_with_every_server_package_blocked(
    tmp_path: Path,
) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GUARD_")}
        env["PYTHONPATH"] = str(ROOT)
        blocked = ",".join(SERVER_PACKAGES)
        result = subprocess.run(
            [sys.executable, "-c", BLOCKED_CLIENT, blocked, server.url, server.admin_token],
            cwd=tmp_path,  # no .env of this repository
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.kill()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["allowed", "9"]
