"""A Lambda function URL, locally: HTTP on loopback in, the function invoked with payload format 2.0.

moto registers a function URL's configuration but serves nothing at it, so the local stack serves
each function that has ``FunctionUrlConfig`` itself. A request becomes the event Lambda's function
URLs build (payload format 2.0: ``version``, ``rawPath``, lower-cased ``headers``,
``requestContext.http``, ``body``, base64-encoded when it is not text), the function is invoked
through the Lambda API (so moto routes it to the local runtime, with its faults and its role), and
its answer is written back as Lambda writes it: a ``{"statusCode", "headers", "body"}`` result as
given, anything else as a 200 JSON body; a function that fails is a 502, a throttled one a 429.
``AuthType: NONE`` is the only kind served: the receiver's authentication is Stripe's signature.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from saga_local.loopback import LoopbackServer, refusal

logger = logging.getLogger(__name__)

#: Content types Lambda passes as text; any other body is base64-encoded (``isBase64Encoded``).
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-www-form-urlencoded")


def url_event(
    method: str, target: str, headers: dict[str, str], body: bytes, *, domain: str, source_ip: str
) -> dict[str, Any]:
    """The event a function URL hands its function for one request (payload format 2.0)."""
    split = urlsplit(target)
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        lowered[key] = f"{lowered[key]},{value}" if key in lowered else value
    content_type = lowered.get("content-type", "")
    text = not body or content_type.startswith(_TEXT_TYPES)
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": split.path or "/",
        "rawQueryString": split.query,
        "headers": lowered,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": domain.split(".", 1)[0],
            "domainName": domain,
            "domainPrefix": domain.split(".", 1)[0],
            "http": {
                "method": method,
                "path": split.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": body.decode("utf-8", "replace") if text else base64.b64encode(body).decode(),
        "isBase64Encoded": not text,
    }


class FunctionUrlServer(LoopbackServer):
    """Serve ``function_name`` at ``http://127.0.0.1:PORT/`` as its function URL would (see the module)."""

    def __init__(
        self, lambda_client: Any, function_name: str, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.lambda_client = lambda_client
        self.function_name = function_name
        #: Requests served, and how many the function answered with a status of 2xx.
        self.requests = 0
        self.answered_2xx = 0
        self._lock = threading.Lock()
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "function-url"

            def do_POST(self) -> None:
                self._serve("POST")

            def do_GET(self) -> None:
                self._serve("GET")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("%s - " + format, self.address_string(), *args)

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length > 0 else b""
                why = refusal(self.headers.get, front.address[1])
                if why is not None:
                    status, headers, payload = (
                        403,
                        {"Content-Type": "application/json"},
                        json.dumps({"message": why}),
                    )
                else:
                    status, headers, payload = front.handle(
                        method, self.path, dict(self.headers.items()), body, self.client_address[0]
                    )
                data = payload.encode()
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in ("content-length", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler, name="function-url", host=host, port=port)

    @property
    def url(self) -> str:
        """The function's local URL (what the stack's ``<Function>Url`` output names on AWS)."""
        host, port = self.address
        return f"http://{host}:{port}/"

    def handle(
        self, method: str, target: str, headers: dict[str, str], body: bytes, source_ip: str
    ) -> tuple[int, dict[str, str], str]:
        """Invoke the function with one request's event; the status, headers and body to answer."""
        host, port = self.address
        event = url_event(method, target, headers, body, domain=f"{host}:{port}", source_ip=source_ip)
        with self._lock:
            self.requests += 1
        try:
            response = self.lambda_client.invoke(
                FunctionName=self.function_name, Payload=json.dumps(event).encode()
            )
        except self.lambda_client.exceptions.TooManyRequestsException:
            return 429, {"Content-Type": "application/json"}, json.dumps({"Message": "Rate Exceeded."})
        raw = response["Payload"].read()
        if response.get("FunctionError"):
            return 502, {"Content-Type": "application/json"}, json.dumps({"Message": "Internal Server Error"})
        status, answer_headers, payload = _answer(raw)
        if 200 <= status < 300:
            with self._lock:
                self.answered_2xx += 1
        return status, answer_headers, payload


def _answer(raw: bytes) -> tuple[int, dict[str, str], str]:
    """What Lambda makes of a function URL's result (a result without ``statusCode`` is a 200 body)."""
    with contextlib.suppress(ValueError):
        result = json.loads(raw or b"null")
        if isinstance(result, dict) and "statusCode" in result:
            body = result.get("body") or ""
            if result.get("isBase64Encoded"):
                body = base64.b64decode(body).decode("utf-8", "replace")
            headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
            return int(result["statusCode"]), headers, str(body)
        return 200, {"Content-Type": "application/json"}, json.dumps(result)
    return 200, {"Content-Type": "application/json"}, raw.decode("utf-8", "replace")
