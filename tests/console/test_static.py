"""The console's files stay within what its Content-Security-Policy allows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console import STATIC_DIR

SCRIPTS = sorted(STATIC_DIR.glob("*.js"))


def test_index_has_no_inline_script_or_style() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert re.search(r'\bsrc="/console/[a-z]+\.js"', tag), tag
        assert 'type="module"' in tag, tag
    assert re.search(r"<script\b[^>]*>\s*[^<\s]", html) is None  # no script body
    assert "<style" not in html
    assert re.search(r"\sstyle=", html) is None
    assert re.search(r"\son[a-z]+=", html) is None
    assert re.search(r'(?:src|href)="(?:https?:)?//', html) is None  # nothing external


RISKY = {
    "assigns HTML": r"\.(?:inner|outer)HTML\s*=",
    "inserts HTML": r"insertAdjacentHTML\s*\(|document\.write\s*\(",
    "evaluates code": r"\beval\s*\(|\bnew\s+Function\b|set(?:Timeout|Interval)\s*\(\s*[\"'`]",
    "sets an inline handler": r"setAttribute\(\s*[\"'`]on",
}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_scripts_never_parse_strings_as_html_or_code(script: Path) -> None:
    source = script.read_text()
    for what, pattern in RISKY.items():
        assert re.search(pattern, source) is None, f"{script.name} {what}"


def test_the_token_is_kept_in_session_storage_only() -> None:
    api = (STATIC_DIR / "api.js").read_text()
    assert "sessionStorage.setItem(TOKEN_KEY" in api
    assert "localStorage" not in api.replace("sessionStorage", "")
