"""Each framework's extra installs the client and that framework alone: in a
fresh virtual environment, ``pip install './sdk[<extra>]'`` is enough to
import the adapter. One framework is enough to prove the wiring (each extra is
one line of ``sdk/pyproject.toml``, and installing is slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CHECK = """
import importlib.util, sys
from client_sdk.integrations.pydantic_ai import ActionGuard
for server in ("guardd", "quart", "hypercorn", "agents_runtime"):
    assert importlib.util.find_spec(server) is None, server
print(ActionGuard.__name__)
"""


@pytest.mark.slow
def test_the_pydantic_ai_extra_installs_on_its_own_and_imports_the_adapter(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{ROOT / 'sdk'}[pydantic-ai]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr
    result = subprocess.run(
        [str(python), "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ActionGuard"]
