"""Turn a cattrs structuring failure into messages that name the key path,
e.g. ``$.tools.search.requires_aproval: unknown key``."""

from __future__ import annotations

from cattrs.errors import ForbiddenExtraKeysError


def error_messages(exc: BaseException, path: str) -> list[str]:
    """One message per failure, each starting with its JSON path."""
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"{path}.{key}: unknown key" for key in sorted(exc.extra_fields)]
    if isinstance(exc, BaseExceptionGroup):
        out: list[str] = []
        for sub in exc.exceptions:
            sub_path = path
            for note in getattr(sub, "__notes__", []):
                name = getattr(note, "name", None)
                if name is not None:
                    sub_path = f"{path}.{name}"
                elif isinstance(note, str) and note.startswith("@key "):
                    sub_path = f"{path}.{note[5:]}"
                elif isinstance(note, str) and note.startswith("@index "):
                    sub_path = f"{path}[{note[7:]}]"
            if isinstance(sub, KeyError) and not isinstance(sub, BaseExceptionGroup):
                out.append(f"{sub_path}: required key missing")
            else:
                out.extend(error_messages(sub, sub_path))
        return out
    if isinstance(exc, ValueError | TypeError):
        text = str(exc.args[0]) if exc.args else "invalid value"
        return [f"{path}: {text}"]
    return [f"{path}: invalid value"]
