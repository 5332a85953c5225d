"""Where the payment API key may be sent, and in which mode: checked before any request is made.

A key is read from a secret (:func:`stripe_secret_from_string`), must be of the stack's mode
(:func:`check_key_mode`: the template's ``PaymentApiMode``), and goes only to a base URL it may go
to (:func:`check_api_base`: a live key to Stripe's own host alone). Each refusal names the rule,
never the key.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.parse

#: Stripe's own API host: the only one a live key is ever sent to.
STRIPE_API_HOST = "api.stripe.com"
#: A secret or restricted key of live mode: it moves real money.
_LIVE_KEY_PREFIXES = ("sk_live_", "rk_live_")


#: A secret or restricted key of test mode: it moves no money.
_TEST_KEY_PREFIXES = ("sk_test_", "rk_test_")
#: The stack's modes (the template's PaymentApiMode).
API_MODES = ("test", "live")


class UnsafeApiBase(ValueError):
    """A payment API base URL the key must not be sent to. The message names the rule, never the key."""


class KeyModeMismatch(ValueError):
    """The API key is not of the stack's mode (``PaymentApiMode``). Names the modes, never the key."""

    def __init__(self, message: str, *, key_mode: str | None, stack_mode: str) -> None:
        super().__init__(message)
        self.key_mode = key_mode
        self.stack_mode = stack_mode


def key_mode(api_key: str) -> str | None:
    """``live`` for ``sk_live_``/``rk_live_``, ``test`` for ``sk_test_``/``rk_test_``, None for any other
    string (Stripe then refuses it itself: a 401 before anything runs)."""
    if api_key.startswith(_LIVE_KEY_PREFIXES):
        return "live"
    if api_key.startswith(_TEST_KEY_PREFIXES):
        return "test"
    return None


def check_key_mode(api_key: str, mode: str) -> None:
    """Refuse a key whose mode is not the stack's ``mode`` (``test`` or ``live``), before anything is sent.

    The stack's mode is also what its webhook consumer accepts (the events' ``livemode``): a live key
    on a test stack (or the reverse) would charge, and every webhook about those charges would be
    refused, leaving each claim to the sweeper, silently. Refused here, nothing reaches the provider,
    which is a failure before the provider was called (the Charge step's ``ChargeNotAttempted``).

    Raises:
        KeyModeMismatch: ``mode`` is not one of :data:`API_MODES`, or the key is of the other mode.
    """
    if mode not in API_MODES:
        raise KeyModeMismatch(
            f"the stack's payment API mode must be one of {', '.join(API_MODES)}, not {mode!r}",
            key_mode=key_mode(api_key),
            stack_mode=mode,
        )
    found = key_mode(api_key)
    if found is not None and found != mode:
        raise KeyModeMismatch(
            f"the payment API key is a {found}-mode key and the stack's PaymentApiMode is {mode}:"
            " nothing is sent to the provider until they agree",
            key_mode=found,
            stack_mode=mode,
        )


def check_api_base(api_base: str | None, *, api_key: str | None = None) -> None:
    """Refuse a base URL the key must not go to; None or empty is the SDK's own (Stripe's host).

    Whoever sets the base decides where the key goes, so: plain http only to a loopback address (the
    local emulator), https otherwise, no credentials, query or fragment in the URL; and a live or
    restricted live key (``sk_live_``, ``rk_live_``) only to ``https://api.stripe.com`` itself (not a
    look-alike such as ``api.stripe.com.attacker.example``, another port or a path). Without
    ``api_key`` only the first rules are checked (a caller that has not read the key yet, such as
    ``saga reconcile --stack`` before it reads the secret); the provider checks again with it.

    Raises:
        UnsafeApiBase: the URL breaks one of these rules.
    """
    if not api_base:
        return
    parts = urllib.parse.urlsplit(api_base)
    scheme, _, path, search, fragment = parts
    try:
        port = parts.port
    except ValueError:
        raise UnsafeApiBase("the payment API base has an invalid port") from None
    host = parts.hostname
    if parts.username is not None or search or fragment or not host:
        raise UnsafeApiBase(
            "the payment API base must be scheme://host[:port][/path], without credentials, query or fragment"
        )
    if scheme == "http":
        if not _loopback(host):
            raise UnsafeApiBase("plain http is allowed only to a loopback address (the provider emulator)")
    elif scheme != "https":
        raise UnsafeApiBase("the payment API base must be an https:// URL")
    stripes_own = scheme == "https" and host == STRIPE_API_HOST and port in (None, 443) and path in ("", "/")
    if api_key is not None and api_key.startswith(_LIVE_KEY_PREFIXES) and not stripes_own:
        raise UnsafeApiBase(f"a live key is sent only to https://{STRIPE_API_HOST}, not to another base URL")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def stripe_secret_from_string(raw: str) -> str:
    """The API key in a secret's string: either the key itself or JSON ``{"apiKey": "..."}``.

    Error messages never quote the secret.
    """
    text = raw.strip()
    if not text:
        raise ValueError("the payment API secret is empty")
    if not text.startswith("{"):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("the payment API secret looks like JSON but does not parse") from None
    key = data.get("apiKey") if isinstance(data, dict) else None
    if not isinstance(key, str) or not key.strip():
        raise ValueError('the payment API secret is JSON without a non-empty "apiKey" string')
    return key.strip()
