"""The repository's text stands alone: it names no document the repository
does not hold, and every relative link of the docs and the README leads to a
file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {
    ".git",
    ".venv",
    "guard-data",
    "build",
    "dist",
    "__pycache__",
    ".cache",
    ".hypothesis",
    "node_modules",  # the TypeScript client's installed packages: not ours
}
SUFFIXES = {
    ".py",
    ".md",
    ".js",
    ".ts",
    ".json",
    ".html",
    ".css",
    ".toml",
    ".txt",
    ".cfg",
    ".ini",
    ".yml",
    ".yaml",
}
THIS = Path(__file__).resolve()

# Prose that points at a text the reader does not have.
OUTSIDE = [
    (re.compile(r"\bthe spec(ification)?\b", re.IGNORECASE), "the spec"),
    (re.compile(r"\bthe issue\b|\bissue #?\d+\b", re.IGNORECASE), "an issue"),
    (re.compile(r"\bthe brief\b", re.IGNORECASE), "the brief"),
    (re.compile(r"PERF-NOTES"), "PERF-NOTES"),
    (re.compile(r"(?<![\w.])/(work|shared|root|home)/"), "a path outside the repository"),
]
MD_NAME = re.compile(r"[\w./-]*[\w-]\.md\b")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|<(?!https?:)([\w./-]+\.md(?:#[\w-]+)?)>")


def _text_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT)
        if any(
            part in SKIP_DIRS or part.endswith((".egg-info", "_cache")) for part in relative.parts
        ):
            continue
        # test data and test run artifacts are not text anyone reads as ours
        if relative.parts[:2] in {("tests", "data"), ("tests", "artifacts")} or path == THIS:
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name in {"Makefile", ".npmrc"}):
            found.append(path)
    return sorted(found)


FILES = _text_files()
NAMES = {
    path.name
    for path in ROOT.rglob("*.md")
    if ".venv" not in path.parts and "node_modules" not in path.parts
}
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def test_no_text_refers_to_a_document_the_repository_does_not_hold() -> None:
    problems = []
    for path in FILES:
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern, what in OUTSIDE:
            for match in pattern.finditer(text):
                problems.append(f"{_where(path, text, match.start())}: {what} ({match.group(0)!r})")
        for match in MD_NAME.finditer(text):
            if Path(match.group(0)).name not in NAMES:
                problems.append(
                    f"{_where(path, text, match.start())}: {match.group(0)} is not here"
                )
    assert not problems, "\n".join(problems)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    problems = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            problems.append(f"{target}: no such heading in {linked.name}")
    assert not problems, "\n".join(problems)
