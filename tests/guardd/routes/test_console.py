"""guardd.routes.console alone: the page under its CSP, unknown files 404."""

from __future__ import annotations

from pathlib import Path

from guardd.routes import console
from tests.guardd.routes.support import served


async def test_index_has_its_csp_and_unknown_files_are_404(tmp_path: Path) -> None:
    async with served(tmp_path, console.blueprint) as app:
        page = await app.client.get("/")
        assert page.status_code == 200
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        assert page.headers["Content-Security-Policy"] == console.CONSOLE_CSP
        missing = await app.client.get("/console/nothing.js")
        assert missing.status_code == 404
        assert (await missing.get_json())["code"] == "not_found"
