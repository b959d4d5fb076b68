"""A store's URL as it may be shown: without its password. No driver is
imported here, so the audit tool and guardd can print a URL even when the
PostgreSQL driver is missing."""

from __future__ import annotations

import urllib.parse


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``: for banners and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = urllib.parse.quote(parts.username or "", safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
