"""``guardd``: prepare the data directory, verify every log (all before serving,
or each before its first use: ``--load-agents``), serve."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TextIO

from hypercorn.config import Config
from quart import Quart

from agents_runtime.errors import (
    DataDirError,
    GuardError,
    KeyFileError,
    LogReadError,
    StoreError,
)
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.faults import FaultSpecError, io_for_from_env
from agents_runtime.log.files.lock import DataDirLock
from agents_runtime.log.keys import KeyRing
from agents_runtime.log.store import LogStore
from agents_runtime.log.stores import open_store
from agents_runtime.runtime.registry import Loading, LoadSummary, Registry, quarantine_message
from guardd.app import BY_COMMAND, Guard, create_app
from guardd.auth import Authenticator
from guardd.config import Settings, SettingsError, check_admin_token, parse_settings
from guardd.limits import (
    APP_QUEUE_CHUNKS,
    give_free_memory_back,
    return_large_buffers_to_the_system,
)
from guardd.logs import configure_logging
from guardd.metrics import TimedQuart, create_metrics_app
from guardd.oidc import Oidc
from guardd.operators import Operators
from guardd.passkeys import Passkeys, relying_party
from guardd.serving import receive_little, serve
from guardd.webhook_delivery import Webhooks
from guardd.webhooks import WebhookConfig

if TYPE_CHECKING:
    from guardd.tracing import Tracer

log = logging.getLogger("guardd")

SHUTDOWN_GRACE = 5.0
KEEP_ALIVE_TIMEOUT = 15.0  # seconds
LISTEN_BACKLOG = 2048
# A young-generation collection every this many allocations instead of 700
# (see tune_gc).
GC_YOUNG_THRESHOLD = 20000
GC_FULL_EVERY = 10.0  # seconds
STORE_CHECKPOINTS = "store-checkpoints"  # in the data dir, for a node on PostgreSQL


def open_configured_store(settings: Settings) -> LogStore:
    """The store guardd serves from (``--store``, or files in the data dir),
    built before the data dir is locked or touched: one that cannot be
    opened (its driver missing) leaves nothing behind. Nothing is read or
    connected yet. StoreError or SettingsError naming what is wrong."""
    if settings.store is not None:
        # Its heads apart from those of the data dir's own file logs, which
        # guardd migrate still verifies against theirs.
        return open_store(settings.store, checkpoint_dir=settings.data_dir / STORE_CHECKPOINTS)
    try:
        # GUARD_TEST_FAULTS: test-only fault injection (see agents_runtime/log/files/faults.py).
        io_for = io_for_from_env(os.environ)
    except FaultSpecError as exc:
        raise SettingsError(str(exc)) from None
    return open_store(settings.data_dir, io_for=io_for)


def build(settings: Settings, store: LogStore | None = None) -> tuple[Guard, LoadSummary, str]:
    """Open the data directory and load every agent. Returns the admin-token source."""
    if store is None:
        store = open_configured_store(settings)
    data_dir = DataDir(settings.data_dir)
    if settings.store is not None:
        ring = join_database(store, data_dir)
    else:
        ring = data_dir.prepare()
    if settings.admin_token is not None:
        admin, source = settings.admin_token, "GUARD_ADMIN_TOKEN"
    elif ring.admin_token:
        admin, source = ring.admin_token, str(data_dir.keys_dir / "admin.token")
        check_admin_token(admin, source)
    else:
        raise KeyFileError(
            f"no admin token: set GUARD_ADMIN_TOKEN or restore {data_dir.keys_dir / 'admin.token'}"
        )
    registry = Registry(
        store,
        ring,
        checkpoint_dir=settings.checkpoint_dir,
        snapshot_records=settings.snapshot_records,
        snapshot_secs=settings.snapshot_secs,
        idempotency_retention=settings.idempotency_retention,
        recent_actions=settings.recent_actions,
        render=BY_COMMAND,
        loading=Loading(settings.load_agents),
    )
    summary = registry.load()
    # Verified before anything is served: a failing operators log stops guardd.
    operators = Operators(store.operators_log(), ring, follow=store.others_create_agents)
    operators.load()
    oidc = None if settings.oidc is None else Oidc(settings.oidc)
    # Single sign-on is the bearer resolver: a person of the issuer is an
    # operator with the roles their claims map to.
    resolver = None if oidc is None else oidc.operator
    auth = Authenticator(admin, ring.token_key, operators, resolver)
    party = relying_party(
        settings.webauthn_rp_id,
        settings.webauthn_origin,
        settings.public_url,
        settings.port,
        settings.tls,
    )
    guard = Guard(data_dir, ring, registry, auth, operators, oidc, Passkeys(operators, party))
    return guard, summary, source


def join_database(store: LogStore, data_dir: DataDir) -> KeyRing:
    """This node joins the PostgreSQL store ``store``: its schema made
    current, and this node's keys, created only on a new database (every
    node of a store holds a copy of the same keys/) and recorded there, or
    checked against those recorded. KeyFileError when the store's logs need
    keys this node lacks or holds others. Imported here: the file store
    needs no database driver."""
    from agents_runtime.log.postgres.schema import SchemaError
    from agents_runtime.log.postgres.store import PgStore, masked, token_fingerprint

    assert isinstance(store, PgStore)  # what open_store gives for a postgresql:// URL
    try:
        recorded = store.prepare()
    except (LogReadError, SchemaError) as exc:
        store.close()
        raise DataDirError(f"cannot use the store {masked(store.url)}: {exc}") from None
    keys = data_dir.keys_dir
    has_keys = (keys / "audit.key").exists() or (keys / "audit.pub").exists()
    if recorded.public_key_hex is None and not recorded.has_agents:
        data_dir.create_keys()  # a new database: this node's keys become the store's
    elif not has_keys:
        store.close()
        raise KeyFileError(
            f"this node has no keys in {keys} and the store's logs are signed by"
            f" {recorded.public_key_hex}: give it a copy of keys/ from a node of this store"
        )
    ring = data_dir.prepare(may_create_keys=False)
    store.adopt_keys(ring.public_key_hex, token_fingerprint(ring.token_key))
    return ring


def print_startup(
    settings: Settings, guard: Guard, summary: LoadSummary, source: str, out: TextIO
) -> None:
    url = settings.url
    lines = [
        f"guardd listening on {url}",
        f"console: {url}/",
        f"data dir: {settings.data_dir}",
        f"public key: {guard.ring.public_key_hex}",
        f"admin token: from {source}",
        f"agents: {summary.loaded} loaded, {len(summary.quarantined)} quarantined"
        + _unloaded(summary, guard.registry),
        *WebhookConfig.from_settings(settings).banner(),
        *_traces_banner(settings),
    ]
    if settings.store is not None:  # the file store is the data dir's agents/
        lines.insert(3, f"store: {guard.registry.store.describe()}")
    if settings.oidc is not None:
        lines.append(settings.oidc.banner())
    for agent_id, failure in sorted(summary.quarantined.items()):
        lines.append(f"quarantined: {agent_id}: {quarantine_message(failure)}")
    for agent_id in summary.torn:
        lines.append(f"torn tail moved aside: {agent_id} (see agents/{agent_id}.jsonl.torn)")
    lines.extend(summary.odd)  # "skipped agents/<name>: <why>", one per odd entry
    if guard.ring.read_only:
        lines.append("read-only: keys/audit.key is missing; requests that would write get 503")
    print("\n".join(lines), file=out, flush=True)


def _unloaded(summary: LoadSummary, registry: Registry) -> str:
    """The banner's words for the agents listed but not loaded at the start."""
    if not summary.unloaded:
        return ""
    if registry.sweeps:
        return f", {summary.unloaded} loading in the background (each at once if used first)"
    return f", {summary.unloaded} loaded on first use"


def _traces_banner(settings: Settings) -> list[str]:
    if not settings.tracing:
        return []
    from guardd.tracing import endpoint

    inputs = "tool inputs recorded" if settings.otel_record_input else "no tool inputs"
    return [f"traces: OTLP/HTTP to {endpoint(os.environ)} ({inputs})"]


def start_tracer(settings: Settings) -> Tracer | None:
    """The tracer the OTEL_* variables ask for, or None. SettingsError when
    they ask and the OpenTelemetry SDK is not installed (the otel extra)."""
    if not settings.tracing:
        return None
    try:
        from guardd.tracing import start_tracing
    except ImportError as exc:
        raise SettingsError(
            f"an OTEL_* variable turns traces on, and the OpenTelemetry SDK cannot be "
            f"imported ({exc}): install guardd's otel extra (in a clone: pip install '.[otel]'), "
            "or unset the OTEL_* variables"
        ) from None
    return start_tracing(record_input=settings.otel_record_input)


def raise_open_file_limit() -> int:
    """Raise the soft limit on open files to the hard limit; return it.

    Each agent's log stays open (one descriptor per agent) next to the
    clients' sockets, and the usual soft limit (1024) would make the
    thousand-and-somethingth agent fail to load or to be created."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # keep the soft limit we were given
    return soft


def tune_gc() -> None:
    """Collector settings for serving, once every log is loaded: what startup
    built lives as long as the process, so it is frozen out of the
    collector's sight, and young collections run less often. A request makes
    hundreds of short-lived containers, nearly all freed by reference
    counting; with the defaults a young collection ran every few requests and
    the older ones walked every loaded agent's state, which showed as the p99
    (docs/benchmarks.md, "HTTP", has the figures)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


async def collect_old_garbage(every: float = GC_FULL_EVERY) -> None:
    """Run a full collection every ``every`` seconds, for ever.

    Objects of requests in flight survive the young collections and reach the
    old generation, where those in reference cycles become garbage that only
    a full collection frees; CPython runs one only when the old generation
    has grown by a quarter, so under steady load the garbage piled up and RSS
    grew with every request (bench/soak_bench.py: 75 bytes per action, about
    34 with this). A full collection here takes a few milliseconds: what
    startup built is frozen (tune_gc) and is not walked. Then the heaps'
    free memory goes back to the system if there is much of it
    (limits.give_free_memory_back)."""
    while True:
        await asyncio.sleep(every)
        started = time.perf_counter()
        freed = gc.collect()
        held = give_free_memory_back()
        log.debug(
            "full collection: %d freed, %.1f MiB free in the heaps, in %.1f ms",
            freed,
            held / 2**20,
            (time.perf_counter() - started) * 1e3,
        )


async def freeze_once_swept(registry: Registry) -> None:
    """Once the background sweep has loaded every agent (--load-agents
    on-first-use), freeze what it built out of the collector's sight, as
    tune_gc does for a start that loads them all before serving: otherwise
    every full collection (collect_old_garbage) would walk every agent's
    state. One full collection on the loop, once; an agent first used
    before the sweep came to it is frozen with the rest."""
    await registry.swept()
    gc.collect()
    gc.freeze()


def listen(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now, before any agent is loaded.

    Connections that arrive while the logs load wait in the kernel's listen
    backlog and are answered once guardd serves: nothing answers early, so
    ``/healthz`` answering means "serving". Binding first also means a port
    already in use stops guardd before it changes anything in the data dir."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, type_, proto, _, address = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
        receive_little(sock)  # and this (guardd.serving)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def hypercorn_config(host: str, port: int, sock: socket.socket | None = None) -> Config:
    """The Hypercorn settings guardd serves with (bench/floor_app.py reuses
    them). With ``sock`` Hypercorn serves on that listening socket, which it
    then owns."""
    config = Config()
    if sock is not None:
        config.bind = [f"fd://{sock.detach()}"]
    else:
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    # Hypercorn's default listen backlog (100) overflows when many agents
    # connect at once; the kernel then drops their handshakes and the clients
    # see resets. The kernel caps this at net.core.somaxconn.
    config.backlog = LISTEN_BACKLOG
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = SHUTDOWN_GRACE
    # Hypercorn keeps a connection whose client has gone (EOF read) until its
    # keep-alive timer ends, holding a socket and its buffers (docs/benchmarks.md,
    # "soak"); 75 s let the soak's reconnecting clients pile up hundreds. Longer
    # than the idle expiry of client pools (httpx: 5 s), so a client never
    # reuses a connection the server is closing.
    config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT
    # HTTP/1.1 only (docs/design.md, "Hostile clients"). Hypercorn would take
    # up HTTP/2 when TLS offers it (ALPN) or when a cleartext client asks
    # (the HTTP/2 preface, or "Upgrade: h2c"); its HTTP/2 side logs a
    # traceback and drops the connection when an answer (401, 413) goes
    # before the body has arrived, and takes in body data as fast as it
    # comes. No ALPN h2, and no HTTP/2 streams: a client that opens with the
    # HTTP/2 preface is sent GOAWAY at once.
    config.alpn_protocols = ["http/1.1"]
    config.h2_max_concurrent_streams = 0
    # Body chunks queued for the app per request (guardd.limits).
    config.max_app_queue_size = APP_QUEUE_CHUNKS
    return config


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on the event loop guardd serves on: uvloop where available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(main)
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)


async def _serve(
    settings: Settings,
    guard: Guard,
    sock: socket.socket,
    metrics_sock: socket.socket | None = None,
    tracer: Tracer | None = None,
) -> None:
    config = hypercorn_config(settings.host, settings.port, sock)
    if settings.certfile is not None and settings.keyfile is not None:
        config.certfile = str(settings.certfile)
        config.keyfile = str(settings.keyfile)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = create_app(guard, metrics=settings.metrics, hook_wait=settings.hook_wait, tracer=tracer)
    metrics = _metrics_listener(settings, app, metrics_sock)

    async def shutdown_trigger() -> None:
        await stop.wait()
        guard.registry.release_watchers()

    hooks = _webhooks(settings, guard, app)
    try:
        # The listeners and the collector in one task group: a listener that
        # fails stops the rest; once they have stopped, so does the collector.
        async with asyncio.TaskGroup() as group:
            collector = group.create_task(collect_old_garbage(), name="gc")
            freezer = None
            if guard.registry.sweeps:
                freezer = group.create_task(freeze_once_swept(guard.registry), name="freeze")
            listeners = [group.create_task(serve(app, config, shutdown_trigger=shutdown_trigger))]
            if metrics is not None:
                listeners.append(group.create_task(serve(*metrics, shutdown_trigger=stop.wait)))
            await asyncio.wait(listeners)
            collector.cancel()
            if freezer is not None:
                freezer.cancel()
    finally:
        if hooks is not None:
            await hooks.stop()
        if tracer is not None:
            # The spans still queued go out (for at most tracing.FLUSH_TIMEOUT).
            await asyncio.to_thread(tracer.shutdown)


def _webhooks(settings: Settings, guard: Guard, app: Quart) -> Webhooks | None:
    """Delivery of webhook events, started before serving, counted in the app's metrics."""
    if not settings.webhooks:
        return None
    hooks = Webhooks(WebhookConfig.from_settings(settings), guard.registry, settings.data_dir)
    if isinstance(app, TimedQuart):
        app.metrics.watch_webhooks(hooks.hooks)
    hooks.start()
    return hooks


def _metrics_listener(
    settings: Settings, app: Quart, sock: socket.socket | None
) -> tuple[Quart, Config] | None:
    """The app and settings of the ``--metrics-listen`` address (bound in
    ``main``, before loading), or None without one. A separate app, so that
    the main one checks nothing more per request. Plain HTTP: what it serves
    holds no token or agent data beyond counts; bind it to an address only
    scrapers reach."""
    if settings.metrics_listen is None or sock is None:
        return None
    assert isinstance(app, TimedQuart)  # metrics are on: settings refuse the flag without
    host, port = settings.metrics_listen
    print(f"metrics: http://{_host_port(host, port)}/metrics (no token)", flush=True)
    return create_metrics_app(app.metrics), hypercorn_config(host, port, sock)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _run(
    settings: Settings,
    guard: Guard,
    sock: socket.socket,
    metrics_sock: socket.socket | None,
    tracer: Tracer | None = None,
) -> None:
    run_event_loop(_serve(settings, guard, sock, metrics_sock, tracer))


class CannotListen(Exception):
    """An address to listen on is taken or not ours; the message names it."""


def _listen_all(settings: Settings) -> tuple[socket.socket, socket.socket | None]:
    """The main listening socket and the metrics one, if asked for; CannotListen
    naming the address when one cannot be had."""
    try:
        sock = listen(settings.host, settings.port)
    except OSError as exc:
        where = _host_port(settings.host, settings.port)
        raise CannotListen(f"cannot listen on {where}: {exc.strerror or exc}") from None
    if settings.metrics_listen is None:
        return sock, None
    host, port = settings.metrics_listen
    try:
        return sock, listen(host, port)
    except OSError as exc:
        sock.close()
        where = _host_port(host, port)
        raise CannotListen(
            f"cannot listen on {where} (--metrics-listen): {exc.strerror or exc}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """Start guardd. The order matters: build the store (nothing touched
    yet, so a store that cannot be opened, its driver missing, leaves
    nothing behind), lock the data dir, bind the port, then load (torn tails
    moved aside, keys created), then serve. Until the lock and the socket
    are held, nothing is changed but the data dir and its lock file coming
    into being, so a second guardd on the same data dir or port stops
    without touching the first one's files."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["migrate"]:
        from guardd import migrate

        return migrate.main(args[1:])
    try:
        settings = parse_settings(argv)
    except SettingsError as exc:
        print(f"guardd: {exc}", file=sys.stderr)
        return 1
    configure_logging(settings.log_format)
    try:
        tracer = start_tracer(settings)
    except SettingsError as exc:
        print(f"guardd: {exc}", file=sys.stderr)
        return 1
    try:
        store = open_configured_store(settings)
    except (SettingsError, StoreError) as exc:
        print(f"guardd: {exc}", file=sys.stderr)
        return 1
    raise_open_file_limit()
    try:
        lock = DataDirLock.acquire(settings.data_dir)
    except DataDirError as exc:
        print(f"guardd: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            sock, metrics_sock = _listen_all(settings)
        except CannotListen as exc:
            print(f"guardd: {exc}", file=sys.stderr)
            return 1
        try:
            guard, summary, source = build(settings, store)
        except (SettingsError, KeyFileError, DataDirError, LogReadError, OSError) as exc:
            for listening in (sock, metrics_sock):
                if listening is not None:
                    listening.close()
            if isinstance(exc, OSError) and not isinstance(exc, GuardError):
                where = exc.filename or settings.data_dir
                print(f"guardd: cannot use {where}: {exc.strerror or exc}", file=sys.stderr)
            else:
                print(f"guardd: {exc}", file=sys.stderr)
            return 1
        if not settings.loopback and not settings.tls:
            log.warning(
                "listening on %s without TLS: tokens cross the network in clear text; "
                "give --certfile and --keyfile to serve HTTPS",
                settings.host,
            )
        print_startup(settings, guard, summary, source, sys.stdout)
        tune_gc()
        return_large_buffers_to_the_system()
        _run(settings, guard, sock, metrics_sock, tracer)
        return 0
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
