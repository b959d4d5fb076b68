"""The ``audit`` command: offline verification and display of agent logs.

    audit verify <file> [--public-key HEX] [--checkpoint SEQ:HASH | --checkpoint-file PATH]
                        [--log-id ID] [--json]
    audit verify --store URL [--agent ID] [--public-key HEX] [--json]
    audit show <file> [--json]
    audit replay <file> [--public-key HEX] [--log-id ID] [--json]
    audit replay --policy FILE (<file> | --data-dir DIR [--agent ID]) [--examples N] [--json]

Exit status: 0 OK, 1 FAILED (or, for show, a line that is not a record),
2 usage error or unreadable input. Each subcommand is one ``_add_<name>``
function listed in SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from agents_runtime.core.state import DEFAULT_IDEMPOTENCY_RETENTION
from agents_runtime.log import canonical
from agents_runtime.log.checkpoint import (
    CheckpointFile,
    CheckpointFileError,
    read_checkpoint_file,
)
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.verify import Checkpoint
from audit.errors import AuditError, UnknownFormat, UsageError
from audit.passkeys import check_source, operators_lines
from audit.replay import replay_records, replay_text
from audit.show import canonical_lines, table
from audit.source import data_dir_agent_id, read_source, shown
from audit.stored import (
    OPERATORS_LOG,
    report_json,
    report_text,
    store_operators_lines,
    verify_store,
)
from audit.verification import verify_source, verify_text
from audit.whatif import add_arguments as _add_what_if_arguments
from audit.whatif import run_what_if, wants_what_if

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """Raises UsageError instead of printing usage and exiting, so that main
    reports every error the same way: one line, exit 2. Options are never
    abbreviated: a mistyped or unknown flag that is the start of one of ours
    (``--log`` for ``--log-id``) would otherwise take the next argument, the
    log file, as its value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # main prefixes "audit: error: "; the help hint names the subcommand
        raise UsageError(f"{message} (see '{self.prog} --help')")


Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _public_key(text: str) -> bytes:
    value = text.strip()
    try:
        key = bytes.fromhex(value)
    except ValueError:
        key = b""
    if len(key) != 32 or len(value) != 64:
        raise argparse.ArgumentTypeError(
            f"must be 64 hex characters (an Ed25519 public key), not {text!r}"
        )
    return key


def _checkpoint(text: str) -> Checkpoint:
    try:
        return Checkpoint.parse(text.strip().lower())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _checkpoint_file(text: str) -> CheckpointFile:
    try:
        return read_checkpoint_file(Path(text))
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"no such file: {text}") from None
    except CheckpointFileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _log_id(text: str) -> str:
    if not valid_agent_id(text):
        raise argparse.ArgumentTypeError(
            f"must be an agent ID (1 to 64 of A-Z a-z 0-9 _ -), not {text!r}"
        )
    return text


def _add_verify(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="verify a log's hash chain and signatures",
        description=(
            "Verify a data-dir log (agents/<id>.jsonl) or records saved from "
            "GET /v1/agents/:id/log, or, with --store, the logs of a PostgreSQL store. "
            "Without --public-key only internal consistency is proven (from a store: "
            "against the key the store records)."
        ),
    )
    parser.add_argument("file", type=Path, nargs="?", help="the log file or saved records")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="verify from the postgresql:// store guardd nodes share instead of a file",
    )
    parser.add_argument(
        "--agent",
        type=_log_id,
        metavar="ID",
        help="with --store: this agent only (default: every agent; exit 1 if any fails)",
    )
    parser.add_argument(
        "--public-key", type=_public_key, metavar="HEX", help="the service's public key (hex)"
    )
    checkpoint = parser.add_mutually_exclusive_group()
    checkpoint.add_argument(
        "--checkpoint",
        type=_checkpoint,
        metavar="SEQ:HASH",
        help="a head recorded earlier: the log must reach it unchanged",
    )
    checkpoint.add_argument(
        "--checkpoint-file",
        type=_checkpoint_file,
        metavar="PATH",
        help="the same, read from a checkpoint file guardd keeps per agent "
        "(<checkpoint-dir>/<id>.checkpoint): a signed note whose signature and origin are "
        "checked too, or an older version's one line SEQ:HASH",
    )
    parser.add_argument(
        "--log-id",
        type=_log_id,
        metavar="ID",
        help="the log_id the genesis record must carry "
        "(default: <id> for a file named agents/<id>.jsonl)",
    )
    parser.add_argument(
        "--operators",
        type=Path,
        metavar="PATH",
        help="the operators log (operators.jsonl) whose passkeys sign approvals "
        "(default: the one beside agents/ for a data-dir log)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=_run_verify)


def _retention(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return seconds


def _add_show(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print a log's records as a table",
        description="Print the records of a log or of saved records. Does not verify.",
    )
    parser.add_argument("file", type=Path, help="the log file or saved records")
    parser.add_argument(
        "--json", action="store_true", help="print one canonical JSON record per line"
    )
    parser.set_defaults(run=_run_show)


def _add_replay(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-decide every action of a log from its own policy records, or under a "
        "candidate policy (--policy)",
        description=(
            "Verify a whole log, then re-run the service's checks and behaviour on it: "
            "report every record the log's own policy would not have made. With --policy, "
            "report instead which decisions a candidate policy would change."
        ),
    )
    parser.add_argument("file", nargs="?", help="the log file or saved records (from seq 0)")
    parser.add_argument(
        "--public-key", type=_public_key, metavar="HEX", help="the service's public key (hex)"
    )
    parser.add_argument(
        "--log-id", type=_log_id, metavar="ID", help="the log_id the genesis record must carry"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (per agent with --policy)"
    )
    parser.add_argument(
        "--idempotency-retention",
        type=_retention,
        default=DEFAULT_IDEMPOTENCY_RETENTION,
        metavar="SECONDS",
        help="seconds an Idempotency-Key was kept by the guardd that wrote the log "
        "(its --idempotency-retention; default 86400)",
    )
    _add_what_if_arguments(parser)
    parser.set_defaults(run=_run_replay)


SUBCOMMANDS: tuple[Callable[[Subparsers], None], ...] = (_add_verify, _add_show, _add_replay)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="audit",
        description="Verify and show Agent Action Guard logs offline.",
        epilog="The log format: docs/log-format.md.",
    )
    subparsers: Subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def _warn(warnings: tuple[str, ...] | list[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _run_verify(args: argparse.Namespace) -> int:
    if args.store is not None:
        return _run_verify_store(args)
    if args.agent is not None:
        raise UsageError("--agent goes with --store")
    if args.file is None:
        raise UsageError("give the log file to verify (or --store URL)")
    source = read_source(args.file)
    stored: CheckpointFile | None = args.checkpoint_file
    outcome = verify_source(
        source,
        public_key=args.public_key,
        log_id=args.log_id,
        checkpoint=stored.checkpoint if stored is not None else args.checkpoint,
        checkpoint_file=stored,
    )
    _warn(outcome.warnings)
    passkeys = None
    if outcome.ok:
        operators = args.operators or _operators_beside(args.file)
        lines = None if operators is None else operators_lines(operators)
        passkeys = check_source(source.items, lines, public_key=args.public_key)
    if args.json:
        body = outcome.to_json()
        if passkeys is not None:
            body["passkeys"] = {
                "checked": passkeys.checked,
                "failures": [str(failure) for failure in passkeys.failures],
            }
        print(json.dumps(body))
    else:
        print("\n".join(verify_text(outcome) + ([] if passkeys is None else passkeys.text())))
    return EXIT_OK if outcome.ok and (passkeys is None or passkeys.ok) else EXIT_FAILED


def _operators_beside(path: Path) -> Path | None:
    """The operators log of the data dir a log ``agents/<id>.jsonl`` is in, if any."""
    if data_dir_agent_id(path) is None:
        return None
    found = Path(os.path.abspath(path)).parent.parent / "operators.jsonl"
    return found if found.is_file() else None


def _run_verify_store(args: argparse.Namespace) -> int:
    if args.file is not None:
        raise UsageError("give a file or --store, not both")
    if args.checkpoint is not None or args.checkpoint_file is not None or args.log_id is not None:
        raise UsageError("--checkpoint and --log-id go with a file, not --store")
    if not args.store.startswith(("postgresql://", "postgres://")):
        raise UsageError("--store must be a postgresql:// URL")
    status = EXIT_OK
    warned: set[str] = set()
    operators: list[bytes] | None = None
    for agent_id, outcome in verify_store(
        args.store, agent_id=args.agent, public_key=args.public_key
    ):
        _warn([w for w in outcome.warnings if w not in warned])
        warned.update(outcome.warnings)
        passkeys = None
        if agent_id == OPERATORS_LOG:
            operators = [item for item in outcome.source.items if item is not None]
        elif outcome.ok:
            if operators is None and args.agent is not None:
                operators = store_operators_lines(args.store)
            passkeys = check_source(outcome.source.items, operators, public_key=args.public_key)
        if args.json:
            report = report_json(args.store, agent_id, outcome)
            if passkeys is not None:
                body = json.loads(report)
                body["passkeys"] = {
                    "checked": passkeys.checked,
                    "failures": [str(failure) for failure in passkeys.failures],
                }
                report = json.dumps(body)
            print(report, flush=True)
        else:
            text = report_text(args.store, agent_id, outcome)
            print("\n".join(text + ([] if passkeys is None else passkeys.text())), flush=True)
        if not outcome.ok or (passkeys is not None and not passkeys.ok):
            status = EXIT_FAILED
    return status


def _run_show(args: argparse.Namespace) -> int:
    source = read_source(args.file)
    _warn(
        [f"line {source.torn_tail.line}: torn tail of {source.torn_tail.size} bytes, not shown"]
        if source.torn_tail is not None
        else []
    )
    if args.json:
        unreadable = 0
        out = []
        for line, text in canonical_lines(source):
            if text is None:
                unreadable += 1
                _warn([f"line {line} is not a JSON record; skipped"])
            else:
                out.append(text)
        if out:
            print("\n".join(out))
    else:
        rows, unreadable = table(source)
        print("\n".join(rows))
    return EXIT_FAILED if unreadable else EXIT_OK


def _run_replay(args: argparse.Namespace) -> int:
    if wants_what_if(args):
        return run_what_if(args)
    if args.file is None:
        raise UsageError("give the log file to replay (or --data-dir DIR with --policy FILE)")
    source = read_source(Path(args.file))
    outcome = verify_source(source, public_key=args.public_key, log_id=args.log_id)
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not outcome.ok:
        if args.json:
            print(json.dumps({"ok": False, "verification": outcome.to_json(), "problems": []}))
        else:
            print("FAILED: the log does not verify, so it cannot be replayed")
            print("\n".join(verify_text(outcome)))
        return EXIT_FAILED
    if outcome.report.is_slice:
        raise UnknownFormat(
            f"{shown(source.path)}: the records start at seq {outcome.report.first_seq}, not 0: "
            "replay needs the whole log from its genesis record"
        )
    records = [canonical.loads(item) for item in source.items if item is not None]
    result = replay_records(records, args.idempotency_retention)
    if args.json:
        print(json.dumps({**result.to_json(), "verification": outcome.to_json()}))
    else:
        print("\n".join(replay_text(result)))
    return EXIT_OK if result.ok else EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """Run ``audit`` with ``argv`` (default: the command line); return the exit status."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise UsageError(
                f"unrecognized arguments: {' '.join(unknown)} (see 'audit {args.command} --help')"
            )
        status: int = args.run(args)
    except AuditError as exc:
        print(f"audit: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:
        # The reader went away (audit show ... | head): stop quietly.
        _silence_stdout()
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("audit: interrupted", file=sys.stderr)
        return 130
    return status


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
