"""The HTTP side: which endpoint a request is for, and the threaded server that carries it.

The server knows nothing of PaymentIntents: it reads a request, hands ``(method, target, headers,
body)`` to a dispatch function and writes the :class:`~.responses.Reply` back, or resets the
connection (at once, or after holding it open) when the reply says so. Replies are JSON over
HTTP/1.1 with keep-alive, as the ``stripe`` SDK expects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, Literal, get_args

from saga_local.loopback import LoopbackHTTPServer, LoopbackServer, refusal
from saga_local.stripe_emulator.responses import error

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga_local.stripe_emulator.responses import Reply

    Dispatch = Callable[[str, str, Mapping[str, str], bytes], Reply]

logger = logging.getLogger(__name__)

Endpoint = Literal["create", "retrieve", "search", "cancel", "list", "refund"]
ENDPOINTS: frozenset[Endpoint] = frozenset(get_args(Endpoint))


def route(method: str, path: str) -> tuple[Endpoint, str | None] | None:
    """The endpoint a Stripe API request is for and the PaymentIntent id in its path, if any."""
    if path == "/v1/payment_intents" and method == "POST":
        return "create", None
    if path == "/v1/payment_intents" and method == "GET":
        return "list", None
    if path == "/v1/payment_intents/search" and method == "GET":
        return "search", None
    if path == "/v1/refunds" and method == "POST":
        return "refund", None
    match = re.fullmatch(r"/v1/payment_intents/([^/]+)(/cancel)?", path)
    if match and match.group(2) and method == "POST":
        return "cancel", match.group(1)
    if match and not match.group(2) and method == "GET":
        return "retrieve", match.group(1)
    return None


class EmulatorServer(LoopbackServer):
    """Serve ``dispatch`` on ``host:port`` (0: an ephemeral port) from a background thread.

    ``stopping`` is set by :meth:`stop`; a reply that holds its connection open waits on it, so a
    stop cuts hung requests short. :meth:`stop` also cuts idle keep-alive connections, so the port
    is free when it returns.
    """

    def __init__(self, dispatch: Dispatch, *, host: str, port: int, stopping: threading.Event) -> None:
        self.dispatch = dispatch
        self.stopping = stopping
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        super().__init__(
            _Handler, name="provider-emulator:{port}", host=host, port=port, server_class=_Server
        )

    def stop(self) -> None:
        """Stop serving, cut open connections (and hung requests) and release the port."""
        self.stopping.set()
        super().stop()

    def closed(self) -> None:
        """Cut the connections still open (idle keep-alive ones, hung requests)."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def track(self, connection: socket.socket, open_: bool) -> None:
        """Remember the open connections, so that :meth:`stop` can cut them."""
        with self._lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


class _Server(LoopbackHTTPServer):
    allow_reuse_address = True
    request_queue_size = 128
    front: EmulatorServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (it gave up waiting, as a Charge whose call timed out does) is
        how networks behave, not an emulator fault: one debug line, not a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            logger.debug("client %s went away before its answer was written: %s", client_address, error)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "provider-emulator"
    #: Idle keep-alive connections are dropped after this long.
    timeout = 60
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.front.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.front.track(self.connection, False)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - " + format, self.address_string(), *args)

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.send_error(400, "bad Content-Length")
            return
        body = self.rfile.read(length) if length else b""
        # Header names are case-insensitive: index them the way the emulator looks them up.
        canonical = {name.title(): value for name, value in self.headers.items()}
        front = self.server.front
        why = refusal(self.headers.get, front.address[1])
        # A web page must not drive the emulator (reset it, inject faults, turn deduplication off).
        reply = error(403, why) if why is not None else front.dispatch(method, self.path, canonical, body)
        if reply.action == "hang":
            front.stopping.wait(reply.hang_seconds)
        if reply.action != "respond":
            self._reset_connection()
            return
        payload = json.dumps(reply.body, indent=2).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _reset_connection(self) -> None:
        self.close_connection = True
        # Linger 0: closing sends a TCP reset rather than an orderly FIN.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
