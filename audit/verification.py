"""``audit verify``: run a Source through the chain verifier and say what
the result proves (docs/log-format.md, "The audit tool")."""

from __future__ import annotations

from typing import Any

import attrs

from agents_runtime.errors import CanonicalError, VerificationError
from agents_runtime.log import canonical
from agents_runtime.log.checkpoint import CheckpointFile
from agents_runtime.log.operators import NOT_OPERATORS, OPERATORS_LOG_ID, check_fields
from agents_runtime.log.verify import (
    CHECKPOINT_ORIGIN,
    CHECKPOINT_UNSIGNED,
    KEY_MISMATCH,
    LOG_ID_MISMATCH,
    NOT_JSON,
    ChainVerifier,
    Checkpoint,
    Failure,
    Report,
)
from audit.source import FORMAT_NAMES, RECORDS, RESPONSE, Source, data_dir_agent_id, shown

OPERATORS_FILE = "operators.jsonl"  # the operators log of a data dir
GIVEN_KEY = "the one given with --public-key"

NO_KEY_WARNING = (
    "no --public-key given: this proves only that the file is internally consistent, "
    "nothing about who wrote it"
)


@attrs.frozen
class Expectation:
    """The log_id the genesis record must carry, and where that came from."""

    log_id: str
    origin: str  # "--log-id" or "the file name agents/<id>.jsonl"


@attrs.frozen
class Outcome:
    source: Source
    report: Report  # its failure's line is the file's line (or position in "records")
    checkpoint: Checkpoint | None
    expected: Expectation | None
    warnings: tuple[str, ...]
    detail: str | None  # a sentence after the failure reason, for people
    # Where the key the signatures were checked against came from, when the
    # user did not give it (the store's own record, a data dir's audit.pub):
    # the signatures match it, but nothing says it is the service's key.
    key_origin: str | None = None
    # The --checkpoint-file read: a signed note (its signature and origin
    # verified when ok) or an older version's unsigned line.
    checkpoint_file: CheckpointFile | None = None

    @property
    def checkpoint_signed(self) -> bool | None:
        """Whether the checkpoint file's signature verified; None without one."""
        stored = self.checkpoint_file
        if stored is None:
            return None
        return stored.is_signed_note and self.report.checkpoint_checked

    @property
    def ok(self) -> bool:
        return self.report.ok

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report: the keys docs/log-format.md ("The audit
        tool") lists."""
        report, source = self.report, self.source
        genesis_seen = report.first_seq == 0 and report.records > 0
        return {
            "ok": report.ok,
            "records": report.records,
            "log_id": report.log_id if genesis_seen else None,
            "public_key": report.public_key,
            "key_trusted": report.key_trusted,
            "head": report.head.to_json() if report.head is not None else None,
            "failure": report.failure.to_json() if report.failure is not None else None,
            "file": shown(source.path),
            "format": source.format,
            "first_seq": report.first_seq,
            "signatures_checked": report.signatures_checked,
            "checkpoint": (
                {"seq": self.checkpoint.seq, "hash": self.checkpoint.hash}
                if self.checkpoint is not None
                else None
            ),
            "checkpoint_checked": report.checkpoint_checked,
            "checkpoint_signed": self.checkpoint_signed,
            "expected_log_id": self.expected.log_id if self.expected is not None else None,
            "torn_tail": source.torn_tail.to_json() if source.torn_tail is not None else None,
            "warnings": list(self.warnings),
        }


def expectation(source: Source, log_id: str | None) -> Expectation | None:
    if log_id is not None:
        return Expectation(log_id, "--log-id")
    agent_id = data_dir_agent_id(source.path)
    if agent_id is not None:
        return Expectation(agent_id, f"the file name agents/{agent_id}.jsonl")
    return None


def is_operators_log(source: Source) -> bool:
    """The source is a data dir's operators log (``operators.jsonl`` beside ``agents/``)."""
    return source.path.name == OPERATORS_FILE and source.path.parent.name != "agents"


def _operators_record(record: dict[str, Any], position: int) -> None:
    """The operators log's own rules, beside those of every log."""
    seq = record["seq"]
    if seq == 0:
        why = None if record.get("log_id") == OPERATORS_LOG_ID else NOT_OPERATORS
    else:
        why = check_fields(record)
    if why is not None:
        raise VerificationError(Failure(position, seq, why))


def verify_source(
    source: Source,
    *,
    public_key: bytes | None = None,
    log_id: str | None = None,
    checkpoint: Checkpoint | None = None,
    key_origin: str | None = None,
    checkpoint_file: CheckpointFile | None = None,
) -> Outcome:
    """Verify every item of ``source`` in order and report the first failure,
    its line being the file's line. ``public_key`` is the user's own
    (``--public-key``) unless ``key_origin`` names where else it was read:
    then the signatures are checked against it, and the key is not trusted.
    A signed ``checkpoint_file`` (whose head is ``checkpoint``) must also be
    signed by that key, or without one by the genesis record's, and name
    the log as its origin."""
    expected = expectation(source, log_id)
    verifier = ChainVerifier(
        public_key=public_key,
        log_id=expected.log_id if expected is not None else None,
        checkpoint=checkpoint,
    )
    feed = verifier.feed
    operators = is_operators_log(source)
    failure: Failure | None = None
    try:
        for position, data in enumerate(source.items, start=1):
            if data is None:
                raise VerificationError(Failure(position, None, NOT_JSON))
            record = feed(data)
            if operators:
                _operators_record(record, position)
        verifier.finish()
    except VerificationError as exc:
        failure = exc.failure
    detail: str | None = None
    if failure is None and checkpoint_file is not None and checkpoint_file.is_signed_note:
        failure, detail = _checkpoint_problem(checkpoint_file, verifier, public_key, expected)
    report = verifier.report(failure)
    if failure is not None and failure.line > 0:
        report = attrs.evolve(
            report, failure=attrs.evolve(failure, line=source.line_of(failure.line))
        )
    if key_origin is not None:
        report = attrs.evolve(report, key_trusted=False)
    return Outcome(
        source=source,
        report=report,
        checkpoint=checkpoint,
        expected=expected,
        warnings=tuple(_warnings(source, report, public_key is not None, checkpoint_file)),
        detail=detail or _detail(source, report, expected, key_origin or GIVEN_KEY),
        key_origin=key_origin,
        checkpoint_file=checkpoint_file,
    )


def _checkpoint_problem(
    stored: CheckpointFile,
    verifier: ChainVerifier,
    public_key: bytes | None,
    expected: Expectation | None,
) -> tuple[Failure | None, str | None]:
    """Why a signed checkpoint file does not hold for the log just verified
    (line 0: not a line of the log), with a sentence for people."""
    log_id = expected.log_id if expected is not None else verifier.log_id
    key = public_key
    if key is None and verifier.public_key_hex is not None:
        key = bytes.fromhex(verifier.public_key_hex)
    if key is None or log_id is None:
        why = "no key or log_id to check it with (a slice: give --public-key and --log-id)"
        return Failure(0, None, CHECKPOINT_UNSIGNED), f"the checkpoint file has {why}"
    if stored.origin != f"guardd/{log_id}":
        return (
            Failure(0, None, CHECKPOINT_ORIGIN),
            f"the checkpoint file names origin {stored.origin!r}; this log is {log_id!r}",
        )
    problem = stored.problem(key, log_id)
    if problem is not None:
        return Failure(0, None, CHECKPOINT_UNSIGNED), f"the checkpoint file: {problem}"
    return None, None


def _warnings(
    source: Source, report: Report, key_given: bool, stored: CheckpointFile | None
) -> list[str]:
    warnings = []
    if stored is not None and not stored.is_signed_note and report.ok:
        warnings.append(
            "the checkpoint file is unsigned (written by an older version): it shows the "
            "log reaches that head, nothing about who wrote the checkpoint"
        )
    if report.ok and not key_given:
        if report.signatures_checked:
            warnings.append(NO_KEY_WARNING)
        else:
            warnings.append(
                f"the records start at seq {report.first_seq}, not 0: with no genesis record "
                "to take the public key from and no --public-key, signatures were not checked; "
                "this proves only that the records chain together"
            )
    if source.format == RECORDS:
        warnings.append(
            "the lines are not in canonical form, so this is not a data-dir log: each record "
            "was re-canonicalized before verification, which proves the records' content, "
            "not these bytes"
        )
    if source.torn_tail is not None:
        tail = source.torn_tail
        warnings.append(
            f"line {tail.line}: torn tail of {tail.size} bytes without a final newline that "
            "do not parse (a write cut short by a crash): not verified, not counted"
        )
    if source.missing_newline:
        warnings.append(
            "the last line has no final newline (a crash cut the write after the record); "
            "the record itself was verified"
        )
    if source.format == RESPONSE and report.ok:
        warnings.extend(_response_head_warnings(source.response_head, report))
    return warnings


def _response_head_warnings(head: Any, report: Report) -> list[str]:
    if not isinstance(head, dict) or report.head is None:
        return []
    seq, digest = head.get("seq"), head.get("hash")
    last = report.head
    if type(seq) is int and seq > last.seq:
        return [
            f"the response's head is seq {seq} but its records end at seq {last.seq}: "
            f"this is one page of the log; fetch the rest with ?after={last.seq}"
        ]
    if seq == last.seq and digest != last.hash:
        return ["the response's head hash is not the hash of its last record"]
    return []


def _detail(
    source: Source, report: Report, expected: Expectation | None, key_origin: str
) -> str | None:
    failure = report.failure
    if failure is None:
        return None
    if failure.reason == LOG_ID_MISMATCH and expected is not None:
        found = _genesis_field(source, "log_id")
        return f"the genesis record names {found!r}; {expected.origin} expects {expected.log_id!r}"
    if failure.reason == KEY_MISMATCH:
        found = _genesis_field(source, "public_key")
        return f"the genesis record names public key {found}, not {key_origin}"
    return None


def _genesis_field(source: Source, name: str) -> Any:
    first = source.items[0] if source.items else None
    try:
        record = canonical.loads(first) if first is not None else None
    except CanonicalError:  # pragma: no cover - the verifier read it before failing on it
        return None
    return record.get(name) if isinstance(record, dict) else None


def verify_text(outcome: Outcome) -> list[str]:
    """The human report of ``audit verify``."""
    report, source = outcome.report, outcome.source
    head = report.head
    lines = []
    if report.failure is None:
        span = f" (seq {report.first_seq} to {head.seq})" if head is not None else ""
        lines.append(f"OK: {report.records} records{span}")
    else:
        failure = report.failure
        where = "checkpoint file" if failure.line == 0 else f"line {failure.line}"
        if failure.seq is not None:
            where += f" (seq {failure.seq})"
        lines.append(f"FAILED: {where}: {failure.reason}")
        if outcome.detail:
            lines.append(f"  {outcome.detail}")
    lines.append(f"file:       {shown(source.path)} ({FORMAT_NAMES[source.format]})")
    if report.failure is not None:
        verified = f"{report.records} records before the failure"
        if head is not None:
            verified += f" (seq {report.first_seq} to {head.seq})"
        lines.append(f"verified:   {verified}")
    if report.first_seq == 0 and report.records:
        lines.append(f"log_id:     {report.log_id}")
    elif report.is_slice:
        lines.append("log_id:     unknown (no genesis record in a slice)")
    if head is not None:
        lines.append(f"head:       {head.checkpoint()}")
    if report.public_key is None:
        lines.append("public key: none: signatures not checked")
    elif report.key_trusted:
        lines.append(f"public key: {report.public_key} (given; every signature matches it)")
    elif outcome.ok and outcome.key_origin is not None:
        lines.append(
            f"public key: {report.public_key} ({outcome.key_origin}, not given; "
            "every signature matches it)"
        )
    elif outcome.ok:
        lines.append(f"public key: {report.public_key} (from the genesis record, not given)")
    else:
        lines.append(f"public key: {report.public_key}")
    if report.is_slice:
        lines.append(
            f"slice:      starts at seq {report.first_seq}, not 0: verified its own chain only; "
            f"records before seq {report.first_seq} are not covered"
        )
    if outcome.checkpoint is not None and report.checkpoint_checked:
        how = ""
        if outcome.checkpoint_signed:
            how = f" (signed by that key, origin guardd/{report.log_id})"
        elif outcome.checkpoint_file is not None:
            how = " (unsigned: an older version's file)"
        checkpoint = outcome.checkpoint
        lines.append(f"checkpoint: {checkpoint.seq}:{checkpoint.hash} matches{how}")
    if source.torn_tail is not None:
        tail = source.torn_tail
        lines.append(f"torn tail:  line {tail.line}, {tail.size} bytes, not verified")
    return lines
