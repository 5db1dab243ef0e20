"""/healthz (liveness: the loop still turns) and /readyz (the first pass completed)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(
    address: str, alive: Callable[[], bool], ready: Callable[[], bool]
) -> ThreadingHTTPServer:
    """Start the health server on HOST:PORT in a daemon thread; returns it (for .server_port)."""
    host, _, port = address.rpartition(":")
    checks = {"/healthz": alive, "/readyz": ready}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            check = checks.get(self.path.split("?", 1)[0])
            if check is None:
                self._reply(404, b"not found\n")
            elif check():
                self._reply(200, b"ok\n")
            else:
                self._reply(503, b"not ok\n")

        def _reply(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the decisions in the log

    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
