"""Server settings: command-line flags, then GUARD_* environment variables,
then defaults."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

import attrs

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9200
DEFAULT_DATA_DIR = "guard-data"


@attrs.frozen
class Settings:
    host: str
    port: int
    data_dir: Path
    admin_token: str | None  # GUARD_ADMIN_TOKEN, which wins over keys/admin.token


class SettingsError(ValueError):
    pass


def parse_settings(argv: list[str] | None, env: Mapping[str, str] = os.environ) -> Settings:
    parser = argparse.ArgumentParser(
        prog="guardd", description="Agent Action Guard: the decision service."
    )
    parser.add_argument("--host", default=env.get("GUARD_HOST", DEFAULT_HOST))
    parser.add_argument("--port", default=env.get("GUARD_PORT", str(DEFAULT_PORT)))
    parser.add_argument("--data-dir", default=env.get("GUARD_DATA_DIR", DEFAULT_DATA_DIR))
    args = parser.parse_args(argv)
    try:
        port = int(args.port)
    except ValueError:
        raise SettingsError(f"port must be a number, not {args.port!r}") from None
    if not 0 < port < 65536:
        raise SettingsError(f"port must be 1 to 65535, not {port}")
    token = env.get("GUARD_ADMIN_TOKEN") or None
    return Settings(args.host, port, Path(args.data_dir), token)
