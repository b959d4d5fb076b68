"""The OpenAPI 3.1 document (filled in below)."""

from __future__ import annotations

from typing import Any


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Agent Action Guard", "version": "1"},
        "paths": {},
    }
