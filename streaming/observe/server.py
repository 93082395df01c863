"""`/metrics` and `/healthz` on one port, for every long-running process of the router.

`router run`, `router replay`, `router directory serve`, `router ddr serve` and an `Endpoint` given a
port serve the same two paths, so that one scrape configuration and one probe fit them all:

    GET /metrics    Prometheus' text format, made by prometheus_client from the process's registry
    GET /healthz    200 and a small JSON body while the process does its work, 503 and the reason
                    when it does not (each process says what "its work" is: `Health`)

The server listens on `metrics_host` (127.0.0.1 unless told otherwise) in threads of its own, and
stops with the process (or `stop`). A port of 0 means no server (`serve` returns None).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from streaming.errors import ConfigError

log = logging.getLogger("streaming.observe.server")

DEFAULT_HOST = "127.0.0.1"
"""Where the server listens unless `metrics_host` says otherwise: this machine only."""


@dataclass(frozen=True)
class Health:
    """What `/healthz` answers: healthy or not, and a small JSON body (with the reason when not)."""

    healthy: bool
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int:
        """The HTTP status: 200 healthy, 503 not."""
        return 200 if self.healthy else 503


class MetricsServer:
    """An HTTP server of `/metrics` (from `registry`) and `/healthz` (from `health()`)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        health: Callable[[], Health],
        port: int,
        host: str = DEFAULT_HOST,
    ) -> None:
        self.registry = registry
        self.health = health
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(self))
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; give another metrics_port "
                "(--metrics-port), or 0 for none"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-server", daemon=True)

    @property
    def address(self) -> str:
        """host:port the server listens on."""
        host, port = self._server.server_address[:2]
        return f"{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> MetricsServer:
        """Serve in a thread of its own; return self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def new_registry() -> CollectorRegistry:
    """A registry for one process's metrics, with the process's own (CPU, memory, open files).

    Counters are exported without their `_created` series: a dashboard has no use for them, and
    they would double what a scrape carries.
    """
    disable_created_metrics()  # a setting of the library, for the whole process
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def serve(
    registry: CollectorRegistry, health: Callable[[], Health], port: int, host: str = DEFAULT_HOST
) -> MetricsServer | None:
    """A started `MetricsServer` on `port`, or None when `port` is 0 (no server)."""
    if not port:
        return None
    if not 0 < port < 65536:
        raise ConfigError(f"metrics_port: expected 0 (none) or a TCP port 1-65535, got {port}")
    return MetricsServer(registry, health, port, host).start()


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the name http.server calls
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(server.registry))
            elif path == "/healthz":
                try:
                    health = server.health()
                except Exception as exc:  # a probe must get an answer, whatever went wrong
                    log.exception("the health check failed")
                    health = Health(False, {"status": "error", "reason": f"the health check failed: {exc}"})
                body = json.dumps(health.body, sort_keys=True).encode() + b"\n"
                self._send(health.status, "application/json", body)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # `format`: http.server's name
            log.debug("%s " + format, self.address_string(), *args)

    return Handler
