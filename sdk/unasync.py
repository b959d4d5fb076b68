"""Writes ``_sync.py`` from ``_async.py``, so the sync clients are never edited by hand.

``python sdk/unasync.py`` rewrites the file; ``--check`` changes nothing and
exits 1 when the file on disk is not what it would write. It imports nothing
from ``client_sdk``, so it runs even when ``_sync.py`` is broken or stale; it
is no part of the distribution ``sdk/pyproject.toml`` builds.

The rules: ``async`` and ``await`` go; every name in ``RENAMES`` becomes its
sync counterpart (a whole word: ``aclose`` but not ``aclosed``); the lines
from ``# unasync: async only`` to ``# unasync: end`` are left out. Then ruff
fixes and formats the result under the project's own settings (imports the
sync code no longer needs drop out), so it passes ``make lint`` as written.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "client_sdk" / "_async.py"
TARGET = ROOT / "client_sdk" / "_sync.py"

RENAMES = {
    "AsyncGuardClient": "GuardClient",
    "AsyncAdminClient": "AdminClient",
    "AsyncSender": "SyncSender",
    "AsyncToolSpec": "ToolSpec",
    "AsyncIterator": "Iterator",
    "httpx.AsyncClient": "httpx.Client",
    "anyio.sleep": "time.sleep",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "acall": "call",
    "async_shield": "shield",
    "async_runs_to_the_end": "runs_to_the_end",
    # What guarded returns: the tool's own type, not a coroutine function.
    "Coroutine[Any, Any, R]": "R",
    "_guarded.AsyncGuardDecorator": "Callable[[Callable[P, R]], Callable[P, R]]",
}

ASYNC_ONLY = "# unasync: async only"
END = "# unasync: end"

HEADER = f'''\
# Generated from client_sdk/{SOURCE.name} by sdk/unasync.py: do not edit.
# Change {SOURCE.name}, then run: python sdk/unasync.py
"""The sync clients and their sender, generated from ``{SOURCE.name}``: read that."""
'''

_KEYWORDS = [
    (re.compile(r"\bawait\s+"), ""),
    (re.compile(r"\basync\s+(def|for|with)\b"), r"\1"),
]
_RENAMES = [
    (re.compile(rf"(?<!\w){re.escape(name)}(?!\w)"), sync) for name, sync in RENAMES.items()
]


def _without_async_only(lines: list[str]) -> list[str]:
    kept: list[str] = []
    skipping = False
    for number, line in enumerate(lines, 1):
        marker = line.strip()
        if marker == ASYNC_ONLY:
            if skipping:
                raise SystemExit(f"{SOURCE.name}:{number}: {ASYNC_ONLY!r} inside another")
            skipping = True
        elif marker == END:
            if not skipping:
                raise SystemExit(f"{SOURCE.name}:{number}: {END!r} without {ASYNC_ONLY!r}")
            skipping = False
        elif not skipping:
            kept.append(line)
    if skipping:
        raise SystemExit(f"{SOURCE.name}: {ASYNC_ONLY!r} never ends")
    return kept


def ruff(*args: str, text: str, path: Path = TARGET) -> str:
    """``text`` after ``ruff <args>``, under the project's settings for ``path``."""
    command = [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(path), "-"]
    # Runs the ruff of this interpreter on text we wrote: no shell, no outside input.
    done = subprocess.run(  # noqa: S603
        command, input=text, capture_output=True, text=True, cwd=ROOT, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def generate(source: str) -> str:
    """The text of ``_sync.py`` for ``source``, the text of ``_async.py``."""
    body = ast.parse(source).body
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)):
        raise SystemExit(f"{SOURCE.name} should start with its docstring")
    code = _without_async_only(source.splitlines()[body[0].end_lineno or 0 :])
    text = HEADER + "\n".join(code) + "\n"
    for pattern, replacement in [*_KEYWORDS, *_RENAMES]:
        text = pattern.sub(replacement, text)
    # An async generator cannot ``yield from``; its loop of ``yield`` becomes one
    # in sync code, as ruff's UP028 asks (unsafe only for generators sent into).
    text = ruff(
        "check",
        "--fix",
        "--exit-zero",
        "--quiet",
        "--config",
        "lint.extend-safe-fixes = ['UP028']",
        text=text,
    )
    return ruff("format", "--quiet", text=text)


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python sdk/unasync.py [--check]", file=sys.stderr)
        return 2
    wanted = generate(SOURCE.read_text())
    current = TARGET.read_text() if TARGET.exists() else None
    if argv == ["--check"]:
        if current != wanted:
            print(
                f"client_sdk/{TARGET.name} is not what client_sdk/{SOURCE.name} makes: "
                "run python sdk/unasync.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if current != wanted:
        TARGET.write_text(wanted)
        print(f"wrote client_sdk/{TARGET.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
