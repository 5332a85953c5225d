"""Stripe's wire format: decoding a request, authenticating it, and the shapes of its answers.

Requests are form-encoded with bracket notation (``metadata[orderId]=...``, ``a[]=x``, ``a[0]=x``);
answers are JSON, errors as ``{"error": {"type", "message", "param", "code", "doc_url"}}``. Keys are
sent as Bearer (or Basic) auth: secret (``sk_test_``, ``sk_live_``) and restricted (``rk_test_``,
``rk_live_``) keys; anything else is a 401, and a restricted key without the permission an endpoint
needs is a 403 naming the missing ``rak_`` permission. Nothing here holds state.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

from saga_local.stripe_emulator.exceptions import BadRequest

#: Secret and restricted keys, test and live mode (the emulator has no live mode: both behave alike).
API_KEY_PREFIXES = ("sk_test_", "sk_live_", "rk_test_", "rk_live_")
API_KEY_PREFIX = API_KEY_PREFIXES[0]
#: What a restricted key may do with PaymentIntents (Stripe's dashboard: None, Read, Write).
Permission = Literal["none", "read", "write"]
#: The version stripe==16.1.0 pins; the emulator behaves like it when a request names none.
STRIPE_VERSION = "2026-10-28.endive"


@dataclass
class Reply:
    """What the server sends back (or does instead of answering)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    #: respond normally, reset the connection, or hold it open and then reset it.
    action: Literal["respond", "reset", "hang"] = "respond"
    hang_seconds: float = 0.0
    #: Whether the result may be saved under the request's idempotency key.
    saved: bool = True


# -- errors --------------------------------------------------------------------------------------


def error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Reply:
    """An error in Stripe's shape (``doc_url`` derived from ``code``, as Stripe links it)."""
    body: dict[str, Any] = {"message": message, "type": type_}
    if param is not None:
        body["param"] = param
    if code is not None:
        body["code"] = code
        body["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
    body.update(extra or {})
    return Reply(status, {"error": body}, dict(headers or {}))


def bad_request(exc: BadRequest, headers: dict[str, str] | None = None) -> Reply:
    """The 400 for a :class:`BadRequest`."""
    return error(400, exc.message, param=exc.param, code=exc.code, headers=headers)


def unrecognized_url(method: str, path: str) -> Reply:
    """Stripe's 404 for a path it has no endpoint for."""
    return error(
        404,
        f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can "
        "help at https://support.stripe.com/.",
    )


def too_many_requests(kind: str, headers: dict[str, str]) -> Reply:
    """A 429 as Stripe sends it: the rate limiter's, or an object lock that could not be taken."""
    if kind == "lock_timeout":
        return error(
            429,
            "This object cannot be accessed right now because another API request or Stripe process is "
            "currently accessing it. If you see this error intermittently, retry the request. If you see "
            "this error frequently and are making multiple concurrent requests to a single object, make "
            "your requests serially or at a lower rate.",
            code="lock_timeout",
            headers=headers,
        )
    return error(
        429,
        "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        code="rate_limit",
        headers={**headers, "Stripe-Rate-Limited-Reason": "endpoint-rate"},
    )


def server_error(headers: dict[str, str]) -> Reply:
    """The 500 an injected fault answers."""
    return error(
        500,
        "An unknown error occurred while processing your request (the provider emulator injected it).",
        type_="api_error",
        headers=headers,
    )


# -- authentication ------------------------------------------------------------------------------


def authenticate(authorization: str | None) -> str | Reply:
    """The API key of a request, or the 401 Stripe would answer."""
    if not authorization:
        return error(
            401,
            "You did not provide an API key. You need to provide your API key in the Authorization header, "
            "using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api"
            "#authentication for details, or we can help at https://support.stripe.com/.",
        )
    scheme, _, credentials = authorization.strip().partition(" ")
    key = credentials.strip()
    if scheme.lower() == "basic":
        try:
            key = base64.b64decode(key, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    elif scheme.lower() != "bearer":
        key = ""
    prefix = next((p for p in API_KEY_PREFIXES if key.startswith(p)), None)
    if prefix is None or len(key) == len(prefix):
        return error(401, f"Invalid API Key provided: {mask_key(key)}")
    return key


def revoked_key(api_key: str) -> Reply:
    """The 401 for a key that was rolled or deleted."""
    return error(401, f"Expired API Key provided: {mask_key(api_key)}")


def permission_denied(api_key: str, granted: Permission, endpoint: str) -> Reply | None:
    """The 403 Stripe answers a restricted key that lacks the endpoint's permission, if it does."""
    needed: Permission = "write" if endpoint in ("create", "cancel", "refund") else "read"
    if granted == "write" or granted == needed:
        return None
    return error(
        403,
        f"The provided key '{mask_key(api_key)}' does not have the required permissions for this "
        f"endpoint on account 'acct_emulator'. Having the 'rak_payment_intent_{needed}' permission "
        "would allow this request to continue.",
    )


def mask_key(key: str) -> str:
    """A key as Stripe quotes it in errors."""
    # Stripe quotes the key's type prefix and last four characters, never the rest.
    match = re.match(r"^[a-z]{2}_(?:test|live)_", key)
    prefix = match.group(0) if match else ""
    hidden = len(key) - len(prefix) - 4
    if hidden <= 0:
        return "*" * len(key)
    return prefix + "*" * hidden + key[-4:]


# -- parameters ----------------------------------------------------------------------------------


def decode_form(raw: bytes) -> dict[str, Any]:
    """Decode Stripe's form encoding: ``a[b]=1``, ``a[]=x``, ``a[0]=x`` into nested dicts and lists."""
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise BadRequest("The request body is not valid UTF-8.") from None
    root: dict[str, Any] = {}
    for name, value in pairs:
        base, bracket, rest = name.partition("[")
        path = [base, *re.findall(r"([^\]]*)\]", rest)] if bracket else [base]
        node = root
        for position, part in enumerate(path):
            if part == "":
                part = str(len(node))
            if position == len(path) - 1:
                node[part] = value
                break
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BadRequest(f"Invalid hash: {name}", param=path[0], code="parameter_invalid_hash")
            node = child
    params = _listify(root)
    if not isinstance(params, dict):
        raise BadRequest("Invalid request: the parameters must be named.")
    return params


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _listify(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def reject_unknown(params: dict[str, Any], allowed: frozenset[str]) -> None:
    """Stripe names the first unknown parameter (alphabetically) and refuses the request."""
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise BadRequest(
            f"Received unknown parameter: {unknown[0]}", param=unknown[0], code="parameter_unknown"
        )


def string(params: dict[str, Any], name: str) -> str:
    """A required string parameter."""
    value = params.get(name)
    if value is None or value == "":
        raise BadRequest(f"Missing required param: {name}.", param=name, code="parameter_missing")
    if not isinstance(value, str):
        raise BadRequest(f"Invalid string: {name}", param=name, code="parameter_invalid_string")
    return value


def integer(params: dict[str, Any], name: str, *, default: int | None = None) -> int:
    """An integer parameter (required unless ``default`` is given)."""
    if default is not None and name not in params:
        return default
    value = string(params, name)
    if not re.fullmatch(r"-?[0-9]+", value):
        raise BadRequest(f"Invalid integer: {value}", param=name, code="parameter_invalid_integer")
    return int(value)


def boolean(params: dict[str, Any], name: str, *, default: bool) -> bool:
    """A ``true``/``false`` parameter."""
    value = params.get(name)
    if value is None:
        return default
    if value not in ("true", "false"):
        raise BadRequest(f"Invalid boolean: {value}", param=name)
    return bool(value == "true")


def limit(params: dict[str, Any]) -> int:
    """The page size of a search or a list: 1 to 100, 10 if not given."""
    value = integer(params, "limit", default=10)
    if not 1 <= value <= 100:
        raise BadRequest("Limit must be between 1 and 100.", param="limit")
    return value


def new_id(prefix: str, length: int) -> str:
    """A random id in Stripe's alphabet (``pi_3...``, ``req_...``)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = uuid.uuid4().int
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(alphabet))
        chars.append(alphabet[digit])
    return prefix + "".join(chars)
