"""The operator console: its static files, under a strict CSP."""

from __future__ import annotations

from pathlib import Path

from quart import Response

import console
from guardd.endpoints import PUBLIC, Reply
from guardd.errors import ApiNotFound
from guardd.routes.common import Service, ServiceBlueprint

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}

blueprint = ServiceBlueprint("console", __name__, tag="console")


@blueprint.endpoint(
    "GET",
    "/",
    "The operator console",
    caller=PUBLIC,
    reply=Reply(str, "A static page.", media=("text/html",)),
)
async def console_index(service: Service) -> Response:
    return console_file("index.html", _csp(service))


@blueprint.endpoint(
    "GET",
    "/console/<name>",
    "A static file of the console",
    caller=PUBLIC,
    reply=Reply(
        str,
        "The file.",
        media=tuple(dict.fromkeys(kind.split(";")[0] for kind in CONSOLE_TYPES.values())),
    ),
    errors=("not_found",),
)
async def console_asset(service: Service, name: str) -> Response:
    return console_file(name, _csp(service))


def _csp(service: Service) -> str:
    """The console's policy; with single sign-on the page also fetches from
    the issuer (discovery, then the token endpoint)."""
    oidc = service.guard.oidc
    if oidc is None:
        return CONSOLE_CSP
    return CONSOLE_CSP.replace(
        "connect-src 'self'", " ".join(("connect-src 'self'", *oidc.browser_origins))
    )


def console_file(name: str, csp: str = CONSOLE_CSP) -> Response:
    path = Path(console.STATIC_DIR, name)
    content_type = CONSOLE_TYPES.get(path.suffix)
    if content_type is None or "/" in name or name.startswith(".") or not _is_file(path):
        raise ApiNotFound("no such path")
    response = Response(path.read_bytes(), content_type=content_type)
    response.headers["Content-Security-Policy"] = csp
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-cache"
    return response


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # e.g. ENAMETOOLONG: no file can have that name
        return False
