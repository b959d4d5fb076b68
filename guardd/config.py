"""Server settings: command-line flags, then GUARD_* environment variables,
then defaults. ``guardd --help`` lists each with its default and variable."""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from guardd.oidc import OidcConfig

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9200
DEFAULT_DATA_DIR = "guard-data"
# Seconds POST /v1/hooks/claude-code holds a call waiting for an operator:
# under the 60 seconds Claude Code gives an HTTP hook unless told otherwise.
DEFAULT_HOOK_WAIT = 50
MAX_HOOK_WAIT = 600
# A state snapshot of an agent every this many records, or this many seconds
# after the first record that follows its last, whichever comes first.
DEFAULT_SNAPSHOT_RECORDS = 10_000
DEFAULT_SNAPSHOT_SECS = 300
# Seconds an Idempotency-Key is kept: reused later, it is a new request.
DEFAULT_IDEMPOTENCY_RETENTION = 86_400
# The latest actions of an agent whose Idempotency-Keys stay as they came.
DEFAULT_RECENT_ACTIONS = 1_000
LOG_FORMATS = ("text", "json")
# When each agent's log is verified and folded (--load-agents): all before
# serving, or each before its first answer with the rest in the background
# (agents_runtime.runtime.registry.Loading).
LOAD_AGENTS = ("at-start", "on-first-use")
# An admin token approves, rejects and terminates; one this short could be
# guessed. guardd's own (keys/admin.token) is 43 characters.
MIN_ADMIN_TOKEN = 32
STORE_SCHEMES = ("postgresql://", "postgres://")


@attrs.frozen
class Settings:
    host: str
    port: int
    data_dir: Path
    admin_token: str | None  # GUARD_ADMIN_TOKEN, which wins over keys/admin.token
    certfile: Path | None = None
    keyfile: Path | None = None
    log_format: str = "text"
    metrics: bool = True  # --no-metrics, GUARD_METRICS=off
    metrics_listen: tuple[str, int] | None = None  # --metrics-listen HOST:PORT
    webhooks: tuple[str, ...] = ()  # --webhook (repeatable), GUARD_WEBHOOKS (comma-separated)
    webhook_secret: str | None = None  # --webhook-secret, GUARD_WEBHOOK_SECRET: whsec_<base64>
    webhook_format: str = "standard"  # --webhook-format, GUARD_WEBHOOK_FORMAT
    public_url: str | None = None  # --public-url, GUARD_PUBLIC_URL: the console as operators see it
    # --store, GUARD_STORE: a postgresql:// URL; None keeps the logs in files in data_dir
    store: str | None = None
    # --checkpoint-dir, GUARD_CHECKPOINT_DIR; None: the store's own place
    # (<data-dir>/checkpoints for files, <data-dir>/store-checkpoints for PostgreSQL)
    checkpoint_dir: Path | None = None
    hook_wait: float = DEFAULT_HOOK_WAIT  # --hook-wait, GUARD_HOOK_WAIT
    # Traces, on when an OTEL_* variable asks for them (tracing_wanted)
    tracing: bool = False
    # --otel-record-input, GUARD_OTEL_RECORD_INPUT=on: tool inputs go into the decision spans
    otel_record_input: bool = False
    snapshot_records: int = DEFAULT_SNAPSHOT_RECORDS  # --snapshot-records, GUARD_SNAPSHOT_RECORDS
    snapshot_secs: float = DEFAULT_SNAPSHOT_SECS  # --snapshot-secs, GUARD_SNAPSHOT_SECS
    # --idempotency-retention, GUARD_IDEMPOTENCY_RETENTION
    idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION
    # --recent-actions, GUARD_RECENT_ACTIONS
    recent_actions: int = DEFAULT_RECENT_ACTIONS
    # --load-agents, GUARD_LOAD_AGENTS: one of LOAD_AGENTS (a PostgreSQL
    # store always loads on first use)
    load_agents: str = "at-start"
    # --oidc-issuer and its companions: people sign in with the issuer's tokens
    oidc: OidcConfig | None = None
    # --webauthn-rp-id, --webauthn-origin: whom passkeys are made for (guardd.passkeys);
    # None: from --public-url, else from the listen address
    webauthn_rp_id: str | None = None
    webauthn_origin: str | None = None

    @property
    def tls(self) -> bool:
        return self.certfile is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


class SettingsError(ValueError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: assume it reaches beyond this machine


def _option(
    parser: argparse.ArgumentParser,
    flag: str,
    env: Mapping[str, str],
    var: str,
    default: str | None,
    text: str,
    **kwargs: object,
) -> None:
    shown = "none" if default is None else default
    parser.add_argument(
        flag,
        default=env.get(var, default),
        help=f"{text} (default: {shown}; environment: {var})",
        **kwargs,  # type: ignore[arg-type]
    )


def build_parser(env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardd",
        # guardd/__main__.py sends "migrate" to guardd/migrate.py before this
        # parser sees it, so argparse would never show it on its own.
        usage="%(prog)s [OPTIONS]\n       %(prog)s migrate --data-dir DIR --store URL",
        description="Agent Action Guard: the decision service.",
        epilog=(
            "GUARD_ADMIN_TOKEN (environment only) sets the admin token instead of "
            "keys/admin.token; it must be at least 32 characters. "
            "'guardd migrate' copies every log of a data dir into a PostgreSQL store "
            "(--store), each verified first: see 'guardd migrate --help'."
        ),
    )
    _option(parser, "--host", env, "GUARD_HOST", DEFAULT_HOST, "address to listen on")
    _option(parser, "--port", env, "GUARD_PORT", str(DEFAULT_PORT), "port to listen on")
    _option(
        parser,
        "--data-dir",
        env,
        "GUARD_DATA_DIR",
        DEFAULT_DATA_DIR,
        "directory of keys and agent logs (one guardd per data dir)",
    )
    _option(
        parser,
        "--store",
        env,
        "GUARD_STORE",
        None,
        "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB: keep the logs in PostgreSQL, "
        "shared by any number of guardd nodes (none: files in the data dir)",
        metavar="URL",
    )
    _option(parser, "--certfile", env, "GUARD_CERTFILE", None, "TLS certificate (PEM): serve HTTPS")
    _option(parser, "--keyfile", env, "GUARD_KEYFILE", None, "TLS private key (PEM) of --certfile")
    _option(
        parser,
        "--log-format",
        env,
        "GUARD_LOG_FORMAT",
        "text",
        "log lines as text, or as one JSON object per line",
        choices=LOG_FORMATS,
    )
    _option(
        parser,
        "--hook-wait",
        env,
        "GUARD_HOOK_WAIT",
        str(DEFAULT_HOOK_WAIT),
        f"seconds (1 to {MAX_HOOK_WAIT}) a Claude Code hook call held for an operator "
        "waits before it is withdrawn and denied",
        metavar="SECONDS",
    )
    _option(
        parser,
        "--snapshot-records",
        env,
        "GUARD_SNAPSHOT_RECORDS",
        str(DEFAULT_SNAPSHOT_RECORDS),
        "write an agent's state snapshot once this many records follow its last "
        "(a start folds only the records after it)",
        metavar="N",
    )
    _option(
        parser,
        "--snapshot-secs",
        env,
        "GUARD_SNAPSHOT_SECS",
        str(DEFAULT_SNAPSHOT_SECS),
        "or this many seconds after the first record that follows it, if sooner",
        metavar="SECONDS",
    )
    _option(
        parser,
        "--idempotency-retention",
        env,
        "GUARD_IDEMPOTENCY_RETENTION",
        str(DEFAULT_IDEMPOTENCY_RETENTION),
        "seconds an Idempotency-Key is kept; reused later, it is a new request",
        metavar="SECONDS",
    )
    _option(
        parser,
        "--recent-actions",
        env,
        "GUARD_RECENT_ACTIONS",
        str(DEFAULT_RECENT_ACTIONS),
        "how many of each agent's latest actions keep their Idempotency-Keys as they"
        " came; older keys inside the retention are kept compactly",
        metavar="N",
    )
    parser.add_argument(
        "--load-agents",
        default=env.get("GUARD_LOAD_AGENTS"),
        metavar="WHEN",
        help="at-start: verify and load every agent's log before serving; on-first-use: "
        "serve at once, verify and load each agent before its first answer, and the others "
        "one after another in the background (default: at-start, and on-first-use with "
        "--store, which allows no other; environment: GUARD_LOAD_AGENTS)",
    )
    parser.add_argument(
        "--no-metrics",
        dest="metrics",
        action="store_false",
        default=_metrics_env(env.get("GUARD_METRICS")),
        help="keep no metrics and serve no /metrics "
        "(default: metrics on; environment: GUARD_METRICS=off)",
    )
    _option(
        parser,
        "--metrics-listen",
        env,
        "GUARD_METRICS_LISTEN",
        None,
        "HOST:PORT of a second listener that serves only /metrics, without a token "
        "(the main port keeps /metrics for the admin token)",
        metavar="HOST:PORT",
    )
    parser.add_argument(
        "--webhook",
        action="append",
        default=None,
        metavar="URL",
        help="post approval and termination events to URL; repeatable "
        "(default: none; environment: GUARD_WEBHOOKS, comma-separated)",
    )
    _option(
        parser,
        "--webhook-secret",
        env,
        "GUARD_WEBHOOK_SECRET",
        None,
        "whsec_<base64> key that signs every webhook (Standard Webhooks)",
    )
    _option(
        parser,
        "--webhook-format",
        env,
        "GUARD_WEBHOOK_FORMAT",
        "standard",
        "webhook bodies: standard (JSON events) or slack (a Slack-compatible message)",
    )
    _option(
        parser,
        "--public-url",
        env,
        "GUARD_PUBLIC_URL",
        None,
        "the console's address as operators reach it (links in webhook messages)",
    )
    _option(
        parser,
        "--webauthn-rp-id",
        env,
        "GUARD_WEBAUTHN_RP_ID",
        None,
        "the WebAuthn relying party ID passkeys are made for: the console's host name "
        "(default from --public-url, else localhost)",
    )
    _option(
        parser,
        "--webauthn-origin",
        env,
        "GUARD_WEBAUTHN_ORIGIN",
        None,
        "the origin passkey ceremonies must come from (default from --public-url, "
        "else http://localhost:PORT)",
    )
    parser.add_argument(
        "--otel-record-input",
        action="store_true",
        default=_on_off_env(env.get("GUARD_OTEL_RECORD_INPUT")),
        help="put each action's tool input in its decision span "
        "(gen_ai.tool.call.arguments); traces are on when an OTEL_* variable is set "
        "(default: inputs never leave guardd in a span; environment: "
        "GUARD_OTEL_RECORD_INPUT=on)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=env.get("GUARD_CHECKPOINT_DIR"),
        metavar="DIR",
        help="where each agent's committed head is kept, <id>.checkpoint; best on another "
        "volume or write-once storage (default: <data-dir>/checkpoints; "
        "environment: GUARD_CHECKPOINT_DIR)",
    )
    _option(
        parser,
        "--oidc-issuer",
        env,
        "GUARD_OIDC_ISSUER",
        None,
        "OpenID Connect issuer whose signed tokens name the operators (single sign-on); "
        "https://, or http:// on loopback",
        metavar="URL",
    )
    _option(
        parser,
        "--oidc-client-id",
        env,
        "GUARD_OIDC_CLIENT_ID",
        None,
        "the client ID registered at the issuer: the audience (aud) guardd accepts, "
        "and the console's public client",
        metavar="ID",
    )
    _option(
        parser,
        "--oidc-roles-claim",
        env,
        "GUARD_OIDC_ROLES_CLAIM",
        "groups",
        "the token claim whose values --oidc-role maps to roles (a dotted name that is no "
        "claim of its own is a path into nested claims: realm_access.roles)",
        metavar="CLAIM",
    )
    parser.add_argument(
        "--oidc-role",
        action="append",
        default=None,
        metavar="ROLE=VALUE",
        help="a value of the roles claim that gives ROLE (viewer, approver or admin; a role "
        "implies those below it); repeatable (default: none; environment: GUARD_OIDC_ROLES, "
        "comma-separated, e.g. admin=guard-admins,approver=guard-approvers)",
    )
    _option(
        parser,
        "--oidc-scopes",
        env,
        "GUARD_OIDC_SCOPES",
        "openid email profile",
        "the scopes the console asks the issuer for, space-separated (must include openid)",
        metavar="SCOPES",
    )
    return parser


def _on_off_env(value: str | None) -> bool:
    # Checked in parse_settings, as _metrics_env.
    return value is not None and value.strip().lower() == "on"


def tracing_wanted(env: Mapping[str, str]) -> bool:
    """Whether the OpenTelemetry variables ask for traces: any ``OTEL_*``
    variable does, unless ``OTEL_SDK_DISABLED=true`` or
    ``OTEL_TRACES_EXPORTER=none``. SettingsError for an exporter or protocol
    guardd does not speak (it exports OTLP over HTTP, protobuf), rather than
    serving with traces that go nowhere."""
    if not any(name.startswith("OTEL_") for name in env):
        return False
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporter == "none":
        return False
    if exporter != "otlp":
        raise SettingsError(
            f"OTEL_TRACES_EXPORTER must be otlp or none, not {exporter!r}: "
            "guardd exports traces over OTLP/HTTP"
        )
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(var)
        if protocol is not None:
            if protocol.strip().lower() != "http/protobuf":
                raise SettingsError(
                    f"{var} must be http/protobuf, not {protocol!r}: "
                    "guardd exports traces over OTLP/HTTP"
                )
            break
    return True


def _oidc(args: argparse.Namespace, env: Mapping[str, str]) -> OidcConfig | None:
    roles = args.oidc_role or [r for r in env.get("GUARD_OIDC_ROLES", "").split(",") if r.strip()]
    if not args.oidc_issuer:
        if args.oidc_client_id or roles:
            raise SettingsError("--oidc-client-id and --oidc-role need --oidc-issuer")
        return None
    from guardd.oidc import OidcConfig, OidcConfigError

    try:
        return OidcConfig.parse(
            args.oidc_issuer, args.oidc_client_id, args.oidc_roles_claim, roles, args.oidc_scopes
        )
    except OidcConfigError as exc:
        raise SettingsError(str(exc)) from None


def _metrics_env(value: str | None) -> bool:
    # Checked in parse_settings: argparse cannot raise SettingsError for a default.
    return value is None or value.strip().lower() != "off"


def parse_settings(argv: list[str] | None, env: Mapping[str, str] = os.environ) -> Settings:
    args = build_parser(env).parse_args(argv)
    try:
        port = int(args.port)
    except ValueError:
        raise SettingsError(f"port must be a number, not {args.port!r}") from None
    if not 0 < port < 65536:
        raise SettingsError(f"port must be 1 to 65535, not {port}")
    if args.log_format not in LOG_FORMATS:  # from the environment: argparse checked the flag
        raise SettingsError(f"log format must be text or json, not {args.log_format!r}")
    certfile = Path(args.certfile) if args.certfile else None
    keyfile = Path(args.keyfile) if args.keyfile else None
    if (certfile is None) != (keyfile is None):
        raise SettingsError("--certfile and --keyfile go together: give both or neither")
    store = args.store or None
    if store is not None and not store.startswith(STORE_SCHEMES):
        raise SettingsError("--store must be a postgresql:// URL (none keeps the logs in files)")
    token = env.get("GUARD_ADMIN_TOKEN") or None
    if token is not None:
        check_admin_token(token, "GUARD_ADMIN_TOKEN")
    hook_wait = hook_wait_seconds(args.hook_wait)
    snapshot_records = int(positive_number(args.snapshot_records, "--snapshot-records", whole=True))
    snapshot_secs = positive_number(args.snapshot_secs, "--snapshot-secs")
    retention = positive_number(args.idempotency_retention, "--idempotency-retention")
    recent_actions = int(positive_number(args.recent_actions, "--recent-actions", whole=True))
    load_agents = args.load_agents or ("at-start" if store is None else "on-first-use")
    if load_agents not in LOAD_AGENTS:
        raise SettingsError(f"--load-agents must be at-start or on-first-use, not {load_agents!r}")
    if store is not None and load_agents != "on-first-use":
        raise SettingsError(
            "--load-agents at-start: a node of a PostgreSQL store (--store) loads each agent "
            "on its first use, since other nodes create agents while it serves"
        )
    metrics_env = env.get("GUARD_METRICS")
    if metrics_env is not None and metrics_env.strip().lower() not in ("on", "off"):
        raise SettingsError(f"GUARD_METRICS must be on or off, not {metrics_env!r}")
    record_env = env.get("GUARD_OTEL_RECORD_INPUT")
    if record_env is not None and record_env.strip().lower() not in ("on", "off"):
        raise SettingsError(f"GUARD_OTEL_RECORD_INPUT must be on or off, not {record_env!r}")
    tracing = tracing_wanted(env)
    if args.otel_record_input and not tracing:
        raise SettingsError(
            "--otel-record-input puts tool inputs in traces, and no OTEL_* variable "
            "turns traces on (set OTEL_EXPORTER_OTLP_ENDPOINT)"
        )
    metrics_listen = listen_address(args.metrics_listen) if args.metrics_listen else None
    if metrics_listen is not None and not args.metrics:
        raise SettingsError("--metrics-listen serves metrics, which --no-metrics turns off")
    webhooks = tuple(args.webhook or [u for u in env.get("GUARD_WEBHOOKS", "").split(",") if u])
    for url in webhooks:
        if not url.startswith(("http://", "https://")):
            raise SettingsError(f"--webhook must be an http:// or https:// URL, not {url!r}")
    if len(set(webhooks)) < len(webhooks):
        from guardd.webhooks import shown_url

        # One URL twice would be delivered twice over, its two deliveries
        # writing one position file (named by the URL) and one metrics label.
        twice = next(u for u in webhooks if webhooks.count(u) > 1)
        raise SettingsError(f"--webhook {shown_url(twice)} is given twice")
    if args.webhook_format not in ("standard", "slack"):
        fmt = args.webhook_format
        raise SettingsError(f"--webhook-format must be standard or slack, not {fmt!r}")
    if args.webhook_secret is not None:
        from guardd.webhooks import WebhookConfigError, parse_secret

        try:
            parse_secret(args.webhook_secret)
        except WebhookConfigError as exc:
            raise SettingsError(str(exc)) from None
    elif webhooks and args.webhook_format == "standard":
        raise SettingsError("--webhook needs --webhook-secret (whsec_<base64>) to sign its events")
    oidc = _oidc(args, env)
    return Settings(
        args.host,
        port,
        Path(args.data_dir),
        token,
        certfile=certfile,
        keyfile=keyfile,
        log_format=args.log_format,
        metrics=args.metrics,
        metrics_listen=metrics_listen,
        webhooks=webhooks,
        webhook_secret=args.webhook_secret,
        webhook_format=args.webhook_format,
        public_url=args.public_url,
        store=store,
        hook_wait=hook_wait,
        tracing=tracing,
        otel_record_input=args.otel_record_input,
        snapshot_records=snapshot_records,
        snapshot_secs=snapshot_secs,
        idempotency_retention=retention,
        recent_actions=recent_actions,
        load_agents=load_agents,
        oidc=oidc,
        webauthn_rp_id=args.webauthn_rp_id,
        webauthn_origin=args.webauthn_origin,
        **({"checkpoint_dir": Path(args.checkpoint_dir)} if args.checkpoint_dir else {}),
    )


def hook_wait_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 1 <= seconds <= MAX_HOOK_WAIT:  # also false for NaN
        raise SettingsError(f"--hook-wait must be 1 to {MAX_HOOK_WAIT} seconds, not {text!r}")
    return seconds


def positive_number(text: str, flag: str, *, whole: bool = False) -> float:
    """``text`` as a number above 0 (a whole one when ``whole``), or
    SettingsError naming ``flag``."""
    try:
        number = float(int(text)) if whole else float(text)
    except ValueError:
        number = -1.0
    if not 0 < number < float("inf"):  # also false for NaN
        kind = "a whole number" if whole else "a number"
        raise SettingsError(f"{flag} must be {kind} above 0, not {text!r}")
    return number


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9300`` for an IPv6 address) as (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isascii() or not port_text.isdigit():
        raise SettingsError(f"--metrics-listen must be HOST:PORT, not {text!r}")
    port = int(port_text)
    if not 0 < port < 65536:
        raise SettingsError(f"--metrics-listen port must be 1 to 65535, not {port}")
    return host, port


def check_admin_token(token: str, source: str) -> None:
    """Refuse an admin token short enough to guess."""
    if len(token) < MIN_ADMIN_TOKEN:
        raise SettingsError(
            f"the admin token from {source} is {len(token)} characters; it must be at least "
            f"{MIN_ADMIN_TOKEN} (make one with: python3 -c "
            "'import secrets; print(secrets.token_urlsafe(32))')"
        )
