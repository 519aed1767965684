"""Running the app on Hypercorn: HTTP/1.1, cleartext HTTP/2 with prior knowledge, and HTTP/2 or
HTTP/1.1 over TLS chosen by ALPN when a certificate is given; graceful stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
from typing import Any

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from hypercorn.logging import Logger

from server import http2
from server.app import create_app
from server.config import Settings
from server.node.limits import LimitsFileError
from server.state import ServerState

log = logging.getLogger(__name__)

# Requests in flight get this long to finish after SIGTERM before they are cut.
GRACEFUL_TIMEOUT_S = 30.0
ACCESS_LOG_FORMAT = '%(h)s "%(r)s" %(s)s %(b)s %(L)ss %({x-request-id}o)s'


# Polled every few seconds by orchestrators and scrapers: their access lines are DEBUG.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


class AccessLog(Logger):
    """Hypercorn's logger (its `logger_class`), the probes' access lines at DEBUG."""

    async def access(self, request: Any, response: Any, request_time: float) -> None:
        if request.get("path") not in PROBES:
            await super().access(request, response, request_time)
        elif self.access_logger is not None and self.access_logger.isEnabledFor(logging.DEBUG):
            atoms = self.atoms(request, response, request_time)
            self.access_logger.debug(self.access_log_format, atoms)


def hypercorn_config(settings: Settings) -> Config:
    config = Config()
    config.bind = [_bind(settings.host, settings.port)]
    if settings.tls:
        config.certfile = settings.certfile
        config.keyfile = settings.keyfile
        config.alpn_protocols = ["h2", "http/1.1"]
    config.include_server_header = False
    config.graceful_timeout = GRACEFUL_TIMEOUT_S
    # Bounds on slow and idle clients (docs/node.md, "Slow and idle clients"). No read timeout: a
    # client waiting for a long JSON answer sends nothing, and must not be cut for it.
    config.keep_alive_timeout = settings.keep_alive_timeout
    config.h2_max_concurrent_streams = settings.h2_max_streams
    config.accesslog = logging.getLogger("b3os.access")
    config.logger_class = AccessLog
    config.access_log_format = ACCESS_LOG_FORMAT
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve(settings: Settings) -> int:
    """Serves until SIGTERM or SIGINT; returns the process exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    exit_code = 0

    def stop_serving() -> None:
        if not stop.is_set():
            log.info(
                "stopping: no new connections; requests in flight get %.0f s", GRACEFUL_TIMEOUT_S
            )
            stop.set()

    def install_signal_handlers() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop_serving)

    def start_failed(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        stop.set()

    try:
        state = ServerState(
            settings, on_engine_started=install_signal_handlers, on_start_failed=start_failed
        )
    except (LimitsFileError, sqlite3.Error) as error:
        log.error("cannot start: %s", error)
        return 1
    install_signal_handlers()
    app = create_app(settings, state)
    scheme = "https" if settings.tls else "http"
    log.info(
        "listening on %s://%s:%d (node %s)",
        scheme,
        settings.host,
        settings.port,
        settings.node_name,
    )
    http2.install()
    await hypercorn_serve(app, hypercorn_config(settings), shutdown_trigger=stop.wait)
    log.info("stopped")
    return exit_code
