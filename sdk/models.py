"""Writes the client's value classes and their parsers from the OpenAPI document.

``python sdk/models.py`` writes ``docs/openapi.json`` (the service's document,
as ``guardd.app.document()`` builds it from the endpoints' declarations), then
``client_sdk/_models.py`` and ``client_sdk/_parsers.py`` from that file alone.
``--check`` changes nothing and exits 1 when any of the three is not what it
would write. So the server, the document and the client cannot disagree: a
reply shape changed in ``guardd/replies.py`` shows in the document, and the
client's classes follow it or the check fails.

Only writing the document imports guardd; the client never does, and this
script is no part of the distribution ``sdk/pyproject.toml`` builds.

What the client makes of each shape is ``CLASSES`` below: the class, its
docstring, which schema it reads, and the properties it leaves out. A
property the service adds becomes an attribute (and the check fails until the
files are written again); one the client names that the document lacks stops
the script. Attribute names are the answer's keys. Types follow the
schemas: a number is ``Decimal``, an array a tuple, an object that is not one
of these classes a ``dict``; a key that may be absent or null is ``X | None``,
and defaults to None when the attributes after it do too. A ``OneOf`` is one
class with the attributes of all its variants. Properties and methods beyond
the attributes are written by hand in ``client_sdk/_members.py``.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from unasync import ruff

ROOT = Path(__file__).resolve().parents[1]
DOCUMENT = ROOT / "docs" / "openapi.json"
MODELS = ROOT / "client_sdk" / "_models.py"
PARSERS = ROOT / "client_sdk" / "_parsers.py"

Schema = dict[str, Any]


@dataclass(frozen=True)
class Class:
    """A value class of the client, read from one schema of the document."""

    name: str
    parser: str  # the name of its parse function
    doc: str
    schema: str = ""  # the document's name for it, when not ``name``
    fields: tuple[str, ...] = ()  # these attributes first, in this order
    omit: tuple[str, ...] = ()  # properties the client leaves out
    words: dict[str, str] = field(default_factory=dict)  # attribute -> StrEnum of its words
    flags: dict[str, str] = field(default_factory=dict)  # property -> the word it tests
    members: str = ""  # its hand-written base in _members.py

    @property
    def source(self) -> str:
        return self.schema or self.name


@dataclass(frozen=True)
class Unwrapped:
    """A parser that returns one key of an answer (a token, a list)."""

    parser: str
    schema: str
    key: str


CLASSES = (
    Class(
        "Decision",
        "parse_decision",
        """The answer to an action request, an approval or a rejection.

        ``decision`` is ``allowed``, ``denied`` or ``pending_approval``. ``cost`` and
        ``remaining`` are set when allowed; ``reason`` (``{code, ...}``) when denied.
        ``receipt``, when allowed, is the two signed log lines that prove it, for
        the tool's executor to check with ``verify_receipt`` (docs/receipts.md);
        ``grant_id`` the operator's grant it drew on instead of an approval.
        """,
        fields=("decision", "action_id", "cost", "remaining", "reason", "receipt", "grant_id"),
        words={"decision": "DecisionKind"},
        flags={"allowed": "ALLOWED", "denied": "DENIED", "pending": "PENDING_APPROVAL"},
    ),
    Class(
        "Action",
        "parse_action",
        """One action as the service holds it.

        ``status`` is ``pending_approval``, ``allowed``, ``denied``, ``completed``
        or ``cancelled``; ``outcome`` is None until reported. ``reason`` is set when
        denied (code ``approval_expired`` when nobody decided in time) or cancelled;
        ``approved_by`` and ``note`` when an operator approved it; ``receipt`` once
        it was allowed (see ``Decision``).
        """,
        omit=("requested_at", "decided_at", "expires_at"),
    ),
    Class(
        "Head",
        "parse_head",
        "The last record of a log: its ``seq`` (-1 for an empty log) and ``hash``.",
    ),
    Class(
        "Scar",
        "parse_scar",
        """One scar of an agent: ``seq`` of its record, ``severity`` (``minor``,
        ``moderate``, ``severe``, ``fatal``), ``reason`` and the action it is about.""",
    ),
    Class(
        "AgentStatus",
        "parse_status",
        """An agent's state, as the service rebuilds it from the agent's log.

        ``remaining`` is ``budget - spent`` (negative only when a new policy set a
        budget below what was spent). ``termination_reason`` is None while alive.
        """,
    ),
    Class(
        "ToolRule",
        "parse_tool_rule",
        """What a policy says about one tool: its minimum charge, whether every
        call is held for an operator, its lifetime cap (None: no cap), and how long
        a held call may wait (None: the policy's own ``approval_timeout_secs``).""",
        schema="ToolRuleInForce",
    ),
    Class(
        "RateLimit",
        "parse_rate_limit",
        "At most ``max_actions`` allowed actions within the trailing ``window_secs``.",
    ),
    Class(
        "Policy",
        "parse_policy",
        """An agent's policy in force, every default filled in.

        ``default`` is the rule of any tool not in ``tools``; None means such
        tools are always denied (``tool_not_allowed``). ``approval_timeout_secs``
        None: held actions wait for ever.
        """,
        schema="PolicyInForce",
        members="PolicyMembers",
    ),
    Class(
        "CreatedAgent",
        "parse_created",
        "A new agent: its status and its token (``agt_<agent_id>.<mac>``).",
        members="CreatedAgentMembers",
    ),
    Class(
        "VerifyFailure",
        "parse_failure",
        """The first bad record of a log: its 1-based ``line``, its ``seq`` when
        readable, and the ``reason`` (e.g. ``hash does not match content``).""",
    ),
    Class(
        "AgentListEntry",
        "parse_agent_entry",
        """One agent of ``list_agents``: ``state`` is ``active`` (with ``status``) or
        ``quarantined`` (its log failed verification: ``error`` says why, for people,
        and ``failure`` where).""",
    ),
    Class(
        "PendingAction",
        "parse_pending_action",
        "What an operator decides on: the action, and the ``cost`` approval would charge.",
    ),
    Class(
        "PendingEntry",
        "parse_pending_entry",
        """An action waiting for approval: when it was requested (ISO 8601 UTC), the
        ``seq`` of its ``action_requested`` record, and the action.""",
        omit=("expires_at",),
    ),
    Class(
        "LogPage",
        "parse_log_page",
        "Records with ``seq`` after the page's ``after``, and the log's ``head`` when read.",
    ),
    Class(
        "VerifyReport",
        "parse_verify_report",
        """The service's verification of an agent's log. When ``ok``, ``public_key``
        and ``head`` are set; otherwise ``failure`` names the first bad record.
        ``records`` counts the records that verified.""",
    ),
    Class(
        "Me",
        "parse_me",
        """The operator calling: ``name`` (what records carry as ``by``), ``id`` (what
        they carry as ``by_id``: ``oidc:<issuer>#<sub>``, ``token:<token_id>`` or
        ``admin-token``), every role held, highest first, and ``via``: how they
        authenticated (``oidc``, ``operator_token`` or ``admin_token``).""",
    ),
    Class(
        "OperatorToken",
        "parse_operator_token",
        """An operator token, without its secret: its ``role``, ``status`` (``active``,
        ``expired`` or ``revoked``) and times (ISO 8601 UTC; ``expires_at`` None:
        never).""",
    ),
    Class(
        "IssuedOperatorToken",
        "parse_issued_operator_token",
        """A token just issued, with its secret ``token`` (``opr_...``): the only
        time the service shows it.""",
    ),
)
UNWRAPPED = (
    Unwrapped("parse_token", "Token", "token"),
    Unwrapped("parse_public_key", "PublicKey", "public_key"),
    Unwrapped("parse_agents", "AgentList", "agents"),
    Unwrapped("parse_pending", "PendingList", "pending"),
    Unwrapped("parse_operator_tokens", "OperatorTokenList", "tokens"),
)

HEADER = """\
# Generated from docs/openapi.json by sdk/models.py: do not edit.
# Change the service's shapes (guardd/replies.py) or sdk/models.py, then run: python sdk/models.py
"""
MODELS_DOC = '''"""What the service answers, as plain frozen classes (parsed in ``_parsers``).

Attribute names are the JSON keys of the answer, so the HTTP API's
documentation reads for these classes too. Money is always ``Decimal``.
Log records stay JSON objects (``dict``): each kind has its own fields, and
they are the signed data itself, best read as the log format describes them.
"""
'''
PARSERS_DOC = '''"""Each answer read into the classes of ``_models``, or InvalidResponse
naming the key that is wrong (``_read`` reads each key)."""
'''


class Stop(Exception):
    """The document and CLASSES disagree: said, and nothing is written."""


@dataclass
class Attribute:
    name: str
    type: str  # its annotation
    read: str  # the expression that reads it from ``obj``
    default: bool = False


class Writer:
    """Reads the document's schemas as CLASSES asks."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.schemas: dict[str, Schema] = document["components"]["schemas"]
        self.classes = {spec.source: spec for spec in CLASSES}
        self.words: dict[str, list[str]] = {}  # StrEnum name -> its words
        for spec in CLASSES:
            if spec.source not in self.schemas:
                raise Stop(f"{spec.name}: the document has no schema {spec.source!r}")

    def _resolve(self, schema: Schema) -> Schema:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def _properties(self, spec: Class) -> tuple[dict[str, Schema], set[str]]:
        """The properties of ``spec``'s schema (all its variants' for a oneOf),
        and those every answer has."""
        schema = self.schemas[spec.source]
        variants = [self._resolve(v) for v in schema.get("oneOf", [schema])]
        properties: dict[str, Schema] = {}
        required = set(variants[0].get("required", []))
        for variant in variants:
            for name, prop in variant["properties"].items():
                properties.setdefault(name, prop)
            required &= set(variant.get("required", []))
        return properties, required

    def attributes(self, spec: Class) -> list[Attribute]:
        properties, required = self._properties(spec)
        kept = [*spec.fields, *(p for p in properties if p not in spec.fields + spec.omit)]
        unknown = sorted((set(kept) | set(spec.omit)) - set(properties))
        if unknown:
            raise Stop(f"{spec.name}: the document's {spec.source} has no {unknown}")
        out = []
        for name in kept:
            schema = properties[name]
            may_lack = name not in required or _nullable(schema) is not None
            annotation, read = self._field(spec, name, schema, may_lack)
            out.append(Attribute(name, annotation, read))
        for attribute in reversed(out):  # attrs: no attribute without a default after one with
            if not attribute.type.endswith("| None"):
                break
            attribute.default = True
        return out

    def _field(self, spec: Class, name: str, schema: Schema, may_lack: bool) -> tuple[str, str]:
        inner = _nullable(schema) or schema
        key = json.dumps(name)
        if name in spec.words:
            words = self._words(spec, name)
            self.words[spec.words[name]] = words
            return "str", f"word(obj, {key}, {_words_name(spec.words[name])})"
        annotation, reader, parse = self._type(inner)
        if reader == "any":
            return "Any", f"obj.get({key})"
        if may_lack:
            annotation += " | None"
            if reader in ("str", "bool", "dict"):
                kind = {"str": "str", "bool": "bool", "dict": "dict"}[reader]
                return annotation, f"opt(obj, {key}, {kind})"
            if reader in ("model",):
                return annotation, f"opt_model(obj, {key}, {parse})"
            if reader == "models":
                return annotation, f"opt_models(obj, {key}, {parse})"
            optional = {
                "int": "opt_integer",
                "number": "opt_number",
                "strings": "opt_strings",
                "dicts": "opt_objects",
            }
            if reader not in optional:
                raise Stop(f"{spec.name}.{name}: no reader for an optional {annotation}")
            return annotation, f"{optional[reader]}(obj, {key})"
        plain = {
            "str": "string",
            "bool": "boolean",
            "int": "integer",
            "number": "number",
            "dict": "json_object",
            "strings": "strings",
        }
        if reader in plain:
            return annotation, f"{plain[reader]}(obj, {key})"
        if reader == "dicts":
            return annotation, f"tuple(objects(obj, {key}))"
        return annotation, f"{reader}(obj, {key}, {parse})"

    def _type(self, schema: Schema) -> tuple[str, str, str]:
        """Annotation, kind of reader, and parse function of a (non-null) schema."""
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            spec = self.classes.get(name)
            if spec is not None:
                return spec.name, "model", spec.parser
            return self._type(self.schemas[name])
        if "oneOf" in schema or "allOf" in schema:
            return "dict[str, Any]", "dict", ""
        kind = schema.get("type")
        if kind is None and "const" in schema:
            kind = "boolean" if isinstance(schema["const"], bool) else "string"
        if kind == "string":
            return "str", "str", ""
        if kind == "boolean":
            return "bool", "bool", ""
        if kind == "integer":
            return "int", "int", ""
        if kind == "number":
            return "Decimal", "number", ""
        if kind == "array":
            item, reader, parse = self._type(schema["items"])
            if reader == "str":
                return "tuple[str, ...]", "strings", ""
            if reader == "dict":
                return "tuple[dict[str, Any], ...]", "dicts", ""
            if reader == "model":
                return f"tuple[{item}, ...]", "models", parse
            raise Stop(f"no reader for an array of {item}")
        if kind == "object":
            values = schema.get("additionalProperties")
            if isinstance(values, dict) and values:
                item, reader, parse = self._type(values)
                if reader != "model":
                    raise Stop(f"no reader for an object of {item}")
                return f"dict[str, {item}]", "mapping", parse
            return "dict[str, Any]", "dict", ""
        if kind is None:
            return "Any", "any", ""
        raise Stop(f"no Python type for {schema}")

    def _words(self, spec: Class, name: str) -> list[str]:
        schema = self.schemas[spec.source]
        variants = [self._resolve(v) for v in schema.get("oneOf", [schema])]
        words = []
        for variant in variants:
            prop = variant["properties"][name]
            words.extend([prop["const"]] if "const" in prop else prop["enum"])
        return words

    def models(self) -> str:
        classes = [(spec, self.attributes(spec)) for spec in CLASSES]
        out = [HEADER, MODELS_DOC, "from __future__ import annotations\n"]
        out.append("from decimal import Decimal\nfrom enum import StrEnum")
        out.append("from typing import Any\n")
        out.append("import attrs\n")
        members = sorted(spec.members for spec in CLASSES if spec.members)
        if members:
            out.append(f"from client_sdk._members import {', '.join(members)}\n")
        for enum, words in self.words.items():
            owner = next(spec for spec in CLASSES if enum in spec.words.values())
            attribute = next(a for a, e in owner.words.items() if e == enum)
            out.append(f"\nclass {enum}(StrEnum):")
            out.append(
                f'    """The words ``{owner.name}.{attribute}`` can be, as the service '
                'documents them."""\n'
            )
            out.extend(f"    {word.upper()} = {json.dumps(word)}" for word in words)
            out.append("")
        for spec, attributes in classes:
            for flag, member in spec.flags.items():
                enum = next(iter(spec.words.values()))
                if member.lower() not in self.words[enum]:
                    raise Stop(f"{spec.name}.{flag} tests {member}, which {enum} no longer has")
            base = f"({spec.members})" if spec.members else ""
            out.append(f"\n@attrs.frozen\nclass {spec.name}{base}:")
            out.append(_docstring(spec.doc))
            for a in attributes:
                out.append(f"    {a.name}: {a.type}" + (" = None" if a.default else ""))
            for flag, member in spec.flags.items():
                (attribute, enum), *_ = spec.words.items()
                out.append(f"\n    @property\n    def {flag}(self) -> bool:")
                out.append(f"        return self.{attribute} == {enum}.{member}")
            out.append("")
        return "\n".join(out)

    def parsers(self) -> str:
        classes = [(spec, self.attributes(spec)) for spec in CLASSES]
        names = sorted({spec.name for spec in CLASSES} | set(self.words))
        out = [HEADER, PARSERS_DOC, "from __future__ import annotations\n"]
        out.append("from typing import Any\n")
        out.append(f"from client_sdk._models import {', '.join(names)}")
        out.append(
            "from client_sdk._read import (json_object, mapping, model, models, number, "
            "object_of, objects, opt, opt_integer, opt_model, opt_models, opt_number, "
            "opt_objects, opt_strings, string, strings, boolean, integer, word)\n"
        )
        for enum in self.words:
            out.append(f"{_words_name(enum)} = frozenset({enum})")
        for spec, attributes in classes:
            out.append(f"\n\ndef {spec.parser}(body: Any) -> {spec.name}:")
            out.append("    obj = object_of(body)")
            out.append(f"    return {spec.name}(")
            out.extend(f"        {a.name}={a.read}," for a in attributes)
            out.append("    )")
        for unwrapped in UNWRAPPED:
            schema = self._resolve(self.schemas[unwrapped.schema])
            prop = schema["properties"][unwrapped.key]
            annotation, reader, parse = self._type(prop)
            key = json.dumps(unwrapped.key)
            if reader == "models":
                item = annotation.removeprefix("tuple[").removesuffix(", ...]")
                out.append(f"\n\ndef {unwrapped.parser}(body: Any) -> list[{item}]:")
                items = f"objects(object_of(body), {key})"
                out.append(f"    return [{parse}(item) for item in {items}]")
            elif reader == "str":
                out.append(f"\n\ndef {unwrapped.parser}(body: Any) -> str:")
                out.append(f"    return string(object_of(body), {key})")
            else:
                raise Stop(f"{unwrapped.parser}: no reader for {annotation}")
        return "\n".join(out) + "\n"


def _words_name(enum: str) -> str:
    """``_DECISION_KIND`` for ``DecisionKind``: the set its parser checks against."""
    return "_" + re.sub(r"(?<!^)(?=[A-Z])", "_", enum).upper()


def _nullable(schema: Schema) -> Schema | None:
    """The non-null schema of ``anyOf: [X, null]``, else None."""
    variants = schema.get("anyOf")
    if variants and len(variants) == 2 and {"type": "null"} in variants:
        return next(v for v in variants if v != {"type": "null"})
    return None


def _docstring(text: str) -> str:
    first, *rest = inspect.cleandoc(text).splitlines()
    if not rest:
        return f'    """{first}"""\n'
    body = "\n".join(f"    {line}" if line else "" for line in rest)
    if "" not in rest:  # one paragraph: it closes on its last line
        return f'    """{first}\n{body}"""\n'
    return f'    """{first}\n{body}\n    """\n'


def served_document() -> bytes:
    """``docs/openapi.json`` as the service's declarations make it."""
    sys.path.insert(0, str(ROOT))
    from guardd.app import document  # at generation time only: the client never does

    return orjson.dumps(document(), option=orjson.OPT_INDENT_2) + b"\n"


def generate(document: dict[str, Any]) -> dict[Path, str]:
    """The text of each generated client file for ``document``."""
    writer = Writer(document)
    models = writer.models()  # first: it collects the words the parsers check
    parsers = writer.parsers()
    return {
        MODELS: _formatted(models, MODELS),
        PARSERS: _formatted(parsers, PARSERS),
    }


def _formatted(text: str, path: Path) -> str:
    text = ruff("check", "--fix", "--exit-zero", "--quiet", text=text, path=path)
    return ruff("format", "--quiet", text=text, path=path)


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python sdk/models.py [--check]", file=sys.stderr)
        return 2
    check = argv == ["--check"]
    try:
        wanted = {DOCUMENT: served_document().decode()}
        wanted.update(generate(json.loads(wanted[DOCUMENT])))
    except Stop as exc:
        print(f"sdk/models.py: {exc}", file=sys.stderr)
        return 1
    stale = []
    for path, text in wanted.items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if check and stale:
        names = ", ".join(str(path) for path in stale)
        print(f"{names}: not what sdk/models.py makes: run python sdk/models.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
