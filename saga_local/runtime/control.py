"""The fault control of a running `saga up`: faults for its functions, from another terminal.

The functions of `saga up` run in its own process (or in workers it starts), and their faults live in
its :class:`~saga_local.runtime.faults.FaultPlan`, which no other process can reach. This is the
small HTTP route that hands a fault to it, for ``saga fault throttle|crash|late-write|clear``:

* ``POST /faults`` with a JSON :class:`~saga_local.runtime.faults.Fault` (``function``, ``point``,
  ``kind``, ``times``, ``orderId``, ``seconds``, ``landsAfter``, and ``forSeconds``: a window of wall
  time from now, after which the fault no longer fires) adds it, and answers what it will do;
* ``GET /faults`` lists the faults with how often each fired;
* ``DELETE /faults`` removes them all (a late write still held lands first);
* ``GET /clock`` answers how far the stack's clock runs ahead of the machine's, and ``POST /clock``
  with ``advanceSeconds`` moves it on (``saga clock advance``), when the stack was given a clock.

It listens on 127.0.0.1 only, and refuses what the other local servers refuse (a web page's request,
a foreign ``Host``: :mod:`saga_local.loopback`) and any request without this run's token in
:data:`TOKEN_HEADER`, as the emulator's admin routes do: the token is in the stack file `saga up`
writes, private to its user.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from saga_local.loopback import LoopbackHTTPServer, LoopbackServer, refusal
from saga_local.runtime.faults import Fault

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.runtime.faults import FaultPlan

TOKEN_HEADER = "X-Saga-Token"  # noqa: S105 - a header name, not a secret
#: A fault's fields as they travel (JSON names) and as :class:`Fault` takes them.
_FIELDS = {
    "function": "function",
    "point": "point",
    "kind": "kind",
    "times": "times",
    "orderId": "order_id",
    "seconds": "seconds",
    "landsAfter": "lands_after",
    "diesAs": "dies_as",
}


class FaultControl(LoopbackServer):
    """Serve ``/faults`` for ``plan`` on a free loopback port, from a background thread."""

    def __init__(
        self, plan: FaultPlan, *, port: int = 0, clock: Callable[[float], dict[str, Any]] | None = None
    ) -> None:
        self.plan = plan
        #: Moves the stack's clock on by its argument (0: only reads it); what it did, as JSON.
        self.clock = clock
        #: What every request must carry in :data:`TOKEN_HEADER`: new every run.
        self.token = secrets.token_urlsafe(32)
        super().__init__(_Handler, name="fault-control", port=port, server_class=_Server)

    @property
    def url(self) -> str:
        """Where ``saga fault`` sends the functions' faults."""
        return f"http://127.0.0.1:{self.port}"

    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        """The status and JSON answer of one request (the server around it only carries bytes)."""
        why = refusal(headers.get, self.port)
        if why is not None:
            return 403, {"error": why}
        if not hmac.compare_digest(headers.get(TOKEN_HEADER) or "", self.token):
            why = f"fault control needs this run's {TOKEN_HEADER} (the stack file of `saga up`)"
            return 403, {"error": why}
        if path == "/clock" and self.clock is not None:
            return self._clock(method, body)
        if path != "/faults":
            return 404, {"error": f"no route {path}: /faults only"}
        if method == "GET":
            return 200, {"faults": [{"fault": str(f), "fired": f.fired} for f in list(self.plan.faults)]}
        if method == "DELETE":
            removed = len(self.plan.faults)
            self.plan.clear()
            return 200, {"cleared": removed}
        if method != "POST":
            return 405, {"error": f"{method} /faults: GET, POST or DELETE"}
        try:
            fault = _fault(json.loads(body or b"{}"))
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
            return 400, {"error": str(exc)}
        self.plan.add(fault)
        return 200, {"fault": str(fault)}

    def _clock(self, method: str, body: bytes) -> tuple[int, dict[str, Any]]:
        assert self.clock is not None
        if method == "GET":
            return 200, self.clock(0.0)
        if method != "POST":
            return 405, {"error": f"{method} /clock: GET or POST"}
        try:
            seconds = json.loads(body or b"{}").get("advanceSeconds")
        except (ValueError, AttributeError):
            seconds = None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
            return 400, {"error": "advanceSeconds must be a number of seconds above 0 (time only moves on)"}
        return 200, self.clock(float(seconds))


def _fault(spec: Any) -> Fault:
    """The :class:`Fault` a request describes; ``ValueError`` in words when it describes none."""
    if not isinstance(spec, dict):
        raise ValueError("the body must be a JSON object describing one fault")
    unknown = sorted(set(spec) - set(_FIELDS) - {"forSeconds"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; the fields: {', '.join(sorted(_FIELDS))}")
    if "function" not in spec or "point" not in spec:
        raise ValueError("a fault names its function and point")
    window = spec.get("forSeconds")
    if window is not None and not (isinstance(window, (int, float)) and window > 0):
        raise ValueError(f"forSeconds must be a number of seconds above 0, not {window!r}")
    fault = Fault(**{_FIELDS[name]: value for name, value in spec.items() if name in _FIELDS})
    if window is not None:
        # monotonic time is this process's: the window starts when the fault arrives here.
        fault.until = time.monotonic() + float(window)
    return fault


class _Server(LoopbackHTTPServer):
    front: FaultControl


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "saga-fault-control"
    timeout = 30
    server: _Server

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: `saga up` prints the executions, not every control request."""

    def _serve(self, method: str) -> None:
        try:
            length = max(0, int(self.headers.get("Content-Length") or 0))
        except ValueError:
            length = 0
        body = self.rfile.read(min(length, 64 * 1024)) if length else b""
        status, answer = self.server.front.handle(method, self.path, self.headers, body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(payload)
