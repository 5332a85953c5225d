"""The ``Idempotency-Key`` layer, as Stripe documents it for API v1.

A POST's status and body are saved under (account, mode, ``Idempotency-Key``) once the endpoint has
begun executing, and replayed for 24 hours (on the emulator's clock) with ``Idempotent-Replayed: true``::

    authenticate -> rate limit -> permissions -> validate | -> key seen? -> execute -> save
    (401)           (429)         (403)           (400)   |    replay / 400 idempotency_error / 409
    <---------- not saved: a retry is judged afresh ----> | <------ saved under the key -------->

What is saved: every result of an endpoint that ran, declines (402) and the 400s raised while
executing (a PaymentMethod or Customer that does not exist, an amount below the currency's minimum)
included, and a 500 injected as ``fail_after_apply_replayed`` (Stripe saves its own 500s). What is
not: anything answered before the layer, and a 500 injected before the endpoint ran.

The same key with other parameters or on another endpoint is a 400 ``idempotency_error``; the same
key while the first request is still executing is a 409 ``idempotency_key_in_use``.

Stripe scopes a key to the account and its mode (live or test), not to the API key that sent it: a
rolled key stays valid for hours beside the new one, and a retry sent with the new key must get the
replay of what the old one sent, not a second charge. Two accounts, or test and live mode of one
account, never share a key.

The store itself (``saved``, ``in_flight``) is plain data owned by the emulator, passed in, and
these functions are called with the emulator's lock held.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from saga_local.stripe_emulator.responses import Reply, error, server_error

#: Stripe keeps an idempotency key at least this long; the emulator forgets it exactly then.
IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60
#: Stripe's limit on the length of an ``Idempotency-Key``.
MAX_KEY_LENGTH = 255

#: (account, mode, Idempotency-Key): every API key of the account in that mode shares the key.
Slot = tuple[str, str, str]


@dataclass
class Saved:
    """An idempotent result: what a retry with the same key gets back."""

    path: str
    params: dict[str, Any]
    status: int
    body: dict[str, Any]
    request_id: str
    created: float


def mode_of(api_key: str) -> str:
    """``live`` or ``test``: the mode an API key (``sk_live_``, ``rk_test_``...) acts in."""
    return "live" if api_key.startswith(("sk_live_", "rk_live_")) else "test"


def slot_of(account: str, api_key: str, header_key: str | None, *, dedupe: bool) -> Slot | None:
    """Where a request's result is kept, or None when it is not kept at all (no key, or dedupe off).

    ``account`` is the account ``api_key`` belongs to: the slot is the account's, in the key's mode.
    """
    return (account, mode_of(api_key), header_key) if header_key and dedupe else None


def key_too_long(slot: Slot, echo: dict[str, str]) -> Reply | None:
    """Stripe's 400 for an over-long key (checked before the key is looked up)."""
    if len(slot[2]) > MAX_KEY_LENGTH:
        return error(400, "Idempotency keys can be up to 255 characters long.", headers=echo)
    return None


def admit(
    saved: dict[Slot, Saved],
    in_flight: set[Slot],
    slot: Slot,
    *,
    path: str,
    params: dict[str, Any],
    now: float,
    echo: dict[str, str],
) -> Reply | None:
    """The answer for a key already in use (a replay, a mismatch or a 409), or None to execute.

    None marks the key in flight: the caller must :func:`release` it when the request ends.
    """
    entry = saved.get(slot)
    if entry is not None and now - entry.created >= IDEMPOTENCY_TTL_SECONDS:
        del saved[slot]
        entry = None
    if entry is not None:
        return _replay(entry, slot, path, params, echo)
    if slot in in_flight:
        return error(
            409,
            "There is currently another in-progress request using this Idempotent Key (that "
            "probably means you submitted twice, and the other request is still going through): "
            f"{slot[2]}. Please try again later.",
            type_="idempotency_error",
            code="idempotency_key_in_use",
            headers=echo,
        )
    in_flight.add(slot)
    return None


def _replay(entry: Saved, slot: Slot, path: str, params: dict[str, Any], echo: dict[str, str]) -> Reply:
    if entry.path != path or entry.params != params:
        return error(
            400,
            "Keys for idempotent requests can only be used with the same parameters they "
            f"were first used with. Try using a key other than '{slot[2]}' if you meant to "
            "execute a different request.",
            type_="idempotency_error",
            headers=echo,
        )
    return Reply(
        entry.status,
        copy.deepcopy(entry.body),
        {**echo, "Idempotent-Replayed": "true", "Original-Request": entry.request_id},
    )


def release(in_flight: set[Slot], slot: Slot) -> None:
    """The request holding ``slot`` has ended (answered, failed or cut)."""
    in_flight.discard(slot)


def save(
    saved: dict[Slot, Saved],
    slot: Slot,
    reply: Reply,
    *,
    path: str,
    params: dict[str, Any],
    request_id: str,
    now: float,
    replay_500: bool,
    echo: dict[str, str],
) -> None:
    """Keep what a retry with the key gets: ``reply``, or a 500 when the 500 itself is to be replayed."""
    kept = server_error(echo) if replay_500 else reply
    saved[slot] = Saved(path, params, kept.status, copy.deepcopy(kept.body), request_id, now)
