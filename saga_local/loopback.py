"""What the local servers (moto's, the Stripe emulator's) answer: this machine's own tools, no web page.

Both listen on 127.0.0.1, which keeps other machines out but not the browser on this one. A page on
any site can make the browser send requests to a loopback port: a ``text/plain`` POST or a GET needs
no CORS preflight, so the request is *executed* even if its answer cannot be read, and with DNS
rebinding (a name that resolves to 127.0.0.1) the answer can be read too. So a request is refused,
before anything runs, when it:

* carries an ``Origin`` header, or ``Sec-Fetch-Site``/``Sec-Fetch-Mode`` (only browsers send these:
  the SDKs, the AWS CLI, SAM CLI and the saga's own clients never do), or
* names a ``Host`` that is not this loopback server itself (``127.0.0.1:<port>``,
  ``localhost:<port>`` or ``[::1]:<port>``): a rebound name arrives with its own name as the Host.

The small servers of the local stack written here (the Stripe emulator's, a function URL's, the
fault control of `saga up`) share how they run: :class:`LoopbackServer` binds a
``ThreadingHTTPServer``, serves it from a daemon thread and stops it, releasing the port.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from http.server import BaseHTTPRequestHandler
    from types import TracebackType

#: Headers that only a browser sends: a request carrying any of them came from a web page.
BROWSER_HEADERS = ("Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def refusal(header: Callable[[str], str | None], port: int) -> str | None:
    """Why a request must be refused (None: it may be served). ``header`` looks a header up by name."""
    for name in BROWSER_HEADERS:
        if header(name) is not None:
            return (
                f"requests from a web page are refused ({name} header): this server is for local tools only"
            )
    host = (header("Host") or "").strip().lower()
    if host not in {f"{name}:{port}" for name in LOOPBACK_NAMES}:
        return "the Host must be this loopback server (127.0.0.1, localhost or [::1], and its port)"
    return None


class LoopbackGuard:
    """WSGI middleware: :func:`refusal` in front of ``app`` (moto's server), a 403 when it refuses."""

    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.port = port

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def header(name: str) -> str | None:
            value = environ.get("HTTP_" + name.upper().replace("-", "_"))
            return str(value) if value is not None else None

        why = refusal(header, self.port)
        if why is None:
            result: Iterable[bytes] = self.app(environ, start_response)
            return result
        body = why.encode()
        start_response(
            "403 Forbidden",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]


class LoopbackHTTPServer(ThreadingHTTPServer):
    """The ``ThreadingHTTPServer`` of a :class:`LoopbackServer`: a thread per request, none waited for.

    Its ``front`` is the :class:`LoopbackServer` that runs it, for the request handlers to reach.
    """

    daemon_threads = True
    # stop() must not wait for a request still being served (or deliberately hanging).
    block_on_close = False
    front: LoopbackServer


class LoopbackServer:
    """An HTTP server on ``host:port`` (0: an ephemeral port) that serves ``handler`` from a thread.

    ``server_class`` is the :class:`LoopbackHTTPServer` to bind (a subclass may change its
    settings); ``name`` names the serving thread (``{port}`` in it is the bound port). The thread
    waits on the listening socket and on a wake-up socket that :meth:`stop` writes to, so a stop
    takes no poll interval (``socketserver``'s own loop wakes every half second, or every
    ``poll_interval``, to look for one: a test suite that starts an emulator per test waits that
    long per test).
    """

    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        server_class: type[LoopbackHTTPServer] = LoopbackHTTPServer,
    ) -> None:
        self._http = server_class((host, port), handler)
        self._http.front = self
        self._http.timeout = 0  # handle_request() is only called once a connection is waiting
        self._stopping = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name=name.format(port=self.port), daemon=True)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._http, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stopping.is_set():
                ready = selector.select()
                if not self._stopping.is_set() and any(key.fileobj is self._http for key, _ in ready):
                    self._http.handle_request()
                self._http.service_actions()

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        """The bound port."""
        return self.address[1]

    def start(self) -> Self:
        """Serve in the background thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (:meth:`closed` runs after the serving thread ended)."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\0")
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        self._http.server_close()
        self._wake_read.close()
        self._wake_write.close()
        self.closed()

    def closed(self) -> None:
        """Called by :meth:`stop` once the port is released: a subclass ends what is still open."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
