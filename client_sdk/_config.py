"""Where the clients find the service's address and their tokens.

Order, first found wins (docs/sdk.md, "Discovery"):

- address: the ``base_url`` argument, ``GUARD_URL`` in the environment, then
  in ``./.env``, else ``http://127.0.0.1:9200``;
- admin token: the ``token`` argument, ``GUARD_ADMIN_TOKEN`` in the
  environment, then in ``./.env``, then the file ``keys/admin.token`` in the
  data directory (``GUARD_DATA_DIR`` from the environment, then ``./.env``,
  else ``./guard-data``);
- agent token: the ``token`` argument, ``GUARD_AGENT_TOKEN`` in the
  environment, then in ``./.env``.

``.env`` is read with python-dotenv's ``dotenv_values``: nothing is put into
``os.environ``. Empty values count as unset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

import attrs
from dotenv import dotenv_values

from client_sdk.errors import GuardSetupError

DEFAULT_URL = "http://127.0.0.1:9200"
DEFAULT_DATA_DIR = "guard-data"


@attrs.frozen
class Found:
    """A setting's value and where it came from, e.g. ``environment variable GUARD_URL``."""

    value: str
    source: str


class Discovery:
    """Looks settings up in the arguments, the environment, ``./.env`` and the data directory."""

    def __init__(self, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.cwd = Path.cwd() if cwd is None else cwd

    @property
    def dotenv_path(self) -> Path:
        return self.cwd / ".env"

    @cached_property
    def dotenv(self) -> dict[str, str | None] | None:
        """The ``.env`` file's values, or None when there is no such file."""
        if not self.dotenv_path.is_file():
            return None
        return dict(dotenv_values(self.dotenv_path))

    def _variable(self, name: str, looked: list[str]) -> Found | None:
        value = self.environ.get(name, "").strip()
        if value:
            return Found(value, f"environment variable {name}")
        looked.append(
            f"environment variable {name}: " + ("empty" if name in self.environ else "not set")
        )
        if self.dotenv is None:
            looked.append(f"{self.dotenv_path}: no such file")
            return None
        value = (self.dotenv.get(name) or "").strip()
        if value:
            return Found(value, f"{name} in {self.dotenv_path}")
        looked.append(f"{self.dotenv_path}: " + ("empty " if name in self.dotenv else "no ") + name)
        return None

    def base_url(self, explicit: str | None) -> Found:
        looked: list[str] = []
        found = (
            Found(explicit, "the base_url argument")
            if explicit
            else self._variable("GUARD_URL", looked) or Found(DEFAULT_URL, "the default")
        )
        parts = urlsplit(found.value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GuardSetupError(
                f"the service address from {found.source} is not an http:// or https:// URL: "
                f"{found.value!r}",
                looked_at=[found.source],
            )
        return Found(found.value.rstrip("/"), found.source)

    def data_dir(self) -> Found:
        found = self._variable("GUARD_DATA_DIR", [])
        if found is None:
            return Found(str(self.cwd / DEFAULT_DATA_DIR), f"the default ./{DEFAULT_DATA_DIR}")
        return Found(str(self.cwd / found.value), found.source)

    def admin_token(self, explicit: str | None) -> Found:
        if explicit:
            return Found(explicit.strip(), "the token argument")
        looked = ["the token argument: not given"]
        found = self._variable("GUARD_ADMIN_TOKEN", looked)
        if found:
            return found
        data_dir = self.data_dir()
        path = Path(data_dir.value) / "keys" / "admin.token"
        where = f"{path} (data directory from {data_dir.source})"
        try:
            token = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            looked.append(f"{where}: no such file")
        except OSError as exc:
            looked.append(f"{where}: unreadable ({exc.strerror or exc})")
        else:
            if token:
                return Found(token, str(path))
            looked.append(f"{where}: empty")
        raise GuardSetupError(
            _missing(
                "admin token",
                looked,
                "Set GUARD_ADMIN_TOKEN, put it in .env, or set GUARD_DATA_DIR to the "
                "service's data directory.",
            ),
            looked_at=looked,
        )

    def agent_token(self, explicit: str | None) -> Found:
        if explicit:
            return Found(explicit.strip(), "the token argument")
        looked = ["the token argument: not given"]
        found = self._variable("GUARD_AGENT_TOKEN", looked)
        if found:
            return found
        raise GuardSetupError(
            _missing(
                "agent token",
                looked,
                "Pass the token returned when the agent was created, or set GUARD_AGENT_TOKEN.",
            ),
            looked_at=looked,
        )


def _missing(what: str, looked: list[str], hint: str) -> str:
    lines = "".join(f"\n  - {place}" for place in looked)
    return f"no {what} found. Looked at:{lines}\n{hint}"
