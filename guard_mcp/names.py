"""Which tool names a call may use: exactly the names the upstream listed.

The policy is keyed by exact names, but an upstream server may find its tools
more loosely (by case, or by a Unicode normal form). Forwarding any name the
client sends would then let ``WRITE_FILE`` or the fullwidth ``ｗｒｉｔｅ_ｆｉｌｅ``
be decided by the policy's ``default`` rule, with no approval and no charge,
and run ``write_file`` upstream. So a call is forwarded only under a name the
upstream listed, character for character, and any other name is refused
before guardd is asked (it names nothing the agent could run).

Two listed names that differ only by case or Unicode compatibility form
(they *fold* alike: NFKC, then case folding) could be one tool to a loose
upstream, each under its own rule in the policy. Neither is offered nor
callable; guard-mcp says so on its standard error.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable

import attrs


def fold(name: str) -> str:
    """``name`` as a loose server may match it: NFKC, case folded, NFKC again
    (case folding can undo the normal form, e.g. ``ǰ``)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


@attrs.frozen
class Catalogue:
    """The upstream's listed tool names, as guard-mcp lets them be called."""

    callable: frozenset[str]  # listed, and no other listed name folds alike
    folded: dict[str, tuple[str, ...]]  # fold(name) -> every listed name of that fold

    @classmethod
    def of(cls, listed: Iterable[str]) -> Catalogue:
        folds: defaultdict[str, set[str]] = defaultdict(set)
        for name in listed:
            folds[fold(name)].add(name)
        return cls(
            callable=frozenset(n for same in folds.values() if len(same) == 1 for n in same),
            folded={key: tuple(sorted(same)) for key, same in folds.items()},
        )

    @property
    def ambiguous(self) -> tuple[tuple[str, ...], ...]:
        """Each group of listed names that fold alike, withheld."""
        return tuple(sorted(same for same in self.folded.values() if len(same) > 1))

    def lists(self, name: str) -> bool:
        """Whether the upstream listed ``name`` (withheld or not)."""
        return name in self.folded.get(fold(name), ())

    def refusal(self, name: str, prefix: str = "") -> str | None:
        """Why a call of ``name`` (unprefixed) is refused, or None when it may go on.

        Tools are named as the client knows them, with ``prefix``.
        """
        if name in self.callable:
            return None
        alike = self.folded.get(fold(name), ())
        if name in alike:
            others = [repr(prefix + n) for n in alike if n != name]
            differ = "differs" if len(others) == 1 else "differ"
            return (
                f"tool {prefix + name!r} is withheld: the upstream server also lists "
                f"{' and '.join(others)}, which {differ} from it only in case or Unicode form "
                "and may be the same tool"
            )
        known = f"unknown tool {prefix + name!r}: the upstream server lists no tool of that name"
        if alike:
            shown = " and ".join(repr(prefix + n) for n in alike)
            return f"{known}, only {shown} (names must match exactly, in case and Unicode form)"
        return known
