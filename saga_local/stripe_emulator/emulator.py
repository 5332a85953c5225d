"""The front: :class:`ProviderEmulator` holds the state and runs a request through Stripe's layers.

A request is checked in the order Stripe checks it: authentication (401), rate limiting (429
``rate_limit`` or ``lock_timeout``, injected as faults), the key's permissions (403), parameter
validation (400), then the idempotency layer, then execution. Nothing answered before the
idempotency layer is saved under the key, so a retry is judged afresh. Each layer lives in its own
module; this class owns the data they work on (plain attributes, so a test can copy and restore
them) and the lock they run under. The test controls it offers are a mixin of their own
(:mod:`.controls`).
"""

from __future__ import annotations

import copy
import hmac
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from saga_local.stripe_emulator import admin, idempotency, intents, search
from saga_local.stripe_emulator.controls import DEFAULT_ACCOUNT, EmulatorControls
from saga_local.stripe_emulator.exceptions import BadRequest
from saga_local.stripe_emulator.recording import Recording
from saga_local.stripe_emulator.responses import (
    STRIPE_VERSION,
    Permission,
    Reply,
    authenticate,
    bad_request,
    boolean,
    decode_form,
    error,
    new_id,
    permission_denied,
    revoked_key,
    server_error,
    too_many_requests,
    unrecognized_url,
)
from saga_local.stripe_emulator.server import ENDPOINTS, EmulatorServer, Endpoint, route
from saga_local.stripe_emulator.webhooks import WebhookSender

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    from saga_local.stripe_emulator.admin import FailureRate, ProviderFault
    from saga_local.stripe_emulator.idempotency import Saved, Slot
    from saga_local.stripe_emulator.intents import CreateRequest, Decline, ForcedOutcome, LedgerEntry
    from saga_local.stripe_emulator.search import Versions

#: The header that carries the per-run admin token (a custom header: a browser preflights it).
ADMIN_TOKEN_HEADER = "X-Emulator-Token"  # noqa: S105 - a header name, not a secret


@dataclass(frozen=True)
class _Call:
    """An authenticated request to a known endpoint, its parameters decoded."""

    method: str
    path: str
    endpoint: Endpoint
    intent_id: str | None
    params: dict[str, Any]
    api_key: str
    #: The ``Idempotency-Key`` of a POST (a GET's is ignored, as on Stripe).
    key: str | None
    request_id: str
    version: str

    @property
    def echo(self) -> dict[str, str]:
        """Stripe echoes the ``Idempotency-Key`` on every answer to a request that sent one."""
        return {"Idempotency-Key": self.key} if self.key else {}


class ProviderEmulator(EmulatorControls):
    """A threaded HTTP server on ``host:port`` (port 0: an ephemeral port) speaking Stripe's API subset.

    ``dedupe=False`` ignores ``Idempotency-Key`` altogether (every request is applied).
    ``clock`` (seconds since the epoch) drives ``created`` and the 24-hour idempotency window;
    :meth:`advance_clock` moves it on. ``latency`` delays every API request before it is applied.
    ``search_lag_seconds`` models the eventual consistency of Stripe's search: the search sees every
    PaymentIntent as it was that long ago (not at all if it was created since, in its earlier status
    if it was updated since); any lag is accepted, hours included (Stripe gives no bound during
    incidents). The list, retrieve and the ledger are never behind. ``hang_seconds`` is how long
    ``timeout_after_apply`` holds a connection (``stop()`` cuts it short). ``seed`` makes failure
    rates reproducible.

    Webhooks (:mod:`.webhooks`): :attr:`webhooks` sends every PaymentIntent change to the endpoints
    registered through ``POST /v1/webhook_endpoints``, signed, retried on Stripe's schedule times
    ``webhook_time_scale``, with the disorder it is given; an endpoint that fails every delivery for
    that whole window is disabled until ``POST /v1/webhook_endpoints/{id}`` enables it.
    ``settle_seconds`` (None: never by itself) is how long a ``processing`` PaymentIntent takes to
    settle, as a bank debit does, into :attr:`settle_outcome` (``succeeded`` or ``failed``; per
    order with :meth:`settle_as`); its settlement sends its event like any other change.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        dedupe: bool = True,
        clock: Callable[[], float] = time.time,
        latency: float = 0.0,
        search_lag_seconds: float = 0.0,
        hang_seconds: float = 30.0,
        seed: int | None = None,
        settle_seconds: float | None = None,
        webhook_time_scale: float = 1.0,
    ) -> None:
        self.host = host
        self.port = port
        self.dedupe = dedupe
        self.latency = latency
        self.search_lag_seconds = search_lag_seconds
        self.hang_seconds = hang_seconds
        self._clock = clock
        self._clock_offset = 0.0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: EmulatorServer | None = None
        #: Restricted keys' PaymentIntents permission (an ``rk_`` key not listed may write).
        self._key_permissions: dict[str, Permission] = {}
        self._revoked: set[str] = set()
        #: API key -> its account, for keys not of :data:`DEFAULT_ACCOUNT` (see ``assign_key``).
        self._key_accounts: dict[str, str] = {}
        #: What a request to ``/_emulator/*`` must carry in :data:`ADMIN_TOKEN_HEADER`: new every run.
        self.admin_token = secrets.token_urlsafe(32)
        self.webhooks = WebhookSender(self.now, time_scale=webhook_time_scale)
        #: What the emulator was asked, answered and sent, once :meth:`record` switched it on.
        self.recording: Recording | None = None
        self.settle_seconds = settle_seconds
        self.settle_outcome = "succeeded"
        self._settlements: set[threading.Timer] = set()
        self._reset_state()

    def _reset_state(self) -> None:
        # Plain data only (tests/model snapshots and restores these attributes by name).
        self._intents: dict[str, dict[str, Any]] = {}
        #: Refunds (POST /v1/refunds), and the amount refunded so far of each PaymentIntent.
        self._refunds: list[dict[str, Any]] = []
        self._refunded: dict[str, int] = {}
        #: intent id -> payment_method, idempotency_key, request_id of its create (for the ledger).
        self._intent_info: dict[str, dict[str, Any]] = {}
        #: Every state each PaymentIntent was in, with the time it took it: what search lags behind.
        self._versions: Versions = {}
        self._ledger: list[LedgerEntry] = []
        self._saved: dict[Slot, Saved] = {}
        self._in_flight: set[Slot] = set()
        self._faults: list[ProviderFault] = []
        self._rates: list[FailureRate] = []
        self._forced: list[ForcedOutcome] = []
        self._requests: dict[str, int] = dict.fromkeys(sorted(ENDPOINTS), 0)
        #: order id -> how its processing payment settles (``succeeded`` or ``failed``).
        self._settle_as: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ProviderEmulator:
        """Bind and serve in a background thread. Returns self, so ``ProviderEmulator().start()`` works."""
        if self._server is not None:
            raise RuntimeError("the provider emulator is already running")
        self._stopping.clear()
        self._server = EmulatorServer(self._dispatch, host=self.host, port=self.port, stopping=self._stopping)
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections (and hung requests) and release the port."""
        server, self._server = self._server, None
        self.webhooks.stop()
        with self._lock:
            timers, self._settlements = self._settlements, set()
        for timer in timers:
            timer.cancel()
        if server is not None:
            server.stop()

    def __enter__(self) -> ProviderEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to give the SDK, e.g. ``http://127.0.0.1:54321``."""
        if self._server is None:
            raise RuntimeError("the provider emulator is not running")
        host, port = self._server.address
        return f"http://{host}:{port}"

    # -- the request pipeline ----------------------------------------------------------------

    def _dispatch(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one HTTP request (the server calls this; so does the in-process link of tests/model)."""
        split = urlsplit(target)
        if split.path.startswith("/_emulator/"):
            # The admin routes reset the emulator, inject faults and turn deduplication off: only a
            # caller that read this run's token (the stack file, or this object) may use them.
            if not hmac.compare_digest(headers.get(ADMIN_TOKEN_HEADER, ""), self.admin_token):
                return Reply(
                    403, {"error": f"the emulator's admin routes need this run's {ADMIN_TOKEN_HEADER}"}
                )
            return admin.admin_reply(self, method, split.path, split.query, body)
        request_id = new_id("req_", 14)
        version = headers.get("Stripe-Version") or STRIPE_VERSION
        if split.path == "/v1/webhook_endpoints" or split.path.startswith("/v1/webhook_endpoints/"):
            reply = self._webhook_endpoints(method, split.path, headers, body)
        else:
            reply = self._api(method, split.path, split.query, headers, body, request_id, version)
        reply.headers.setdefault("Request-Id", request_id)
        reply.headers.setdefault("Stripe-Version", version)
        if self.recording is not None:
            answered = reply.body if reply.action == "respond" else None
            self.recording.exchange(method, split.path, split.query, body, reply.status, answered)
        return reply

    def record(self) -> Recording:
        """Keep every Stripe API request, its answer and every Event made from now on (for the
        contract test; off until called). Returns the :class:`~.recording.Recording`."""
        recording = Recording()
        self.recording = self.webhooks.recording = recording
        return recording

    def _webhook_endpoints(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """``POST /v1/webhook_endpoints`` (``url``, ``enabled_events[]``, ``description``,
        ``metadata``), ``GET`` to list them, ``GET``, ``POST`` (the same, and ``disabled``) and
        ``DELETE /v1/webhook_endpoints/{id}``: an endpoint is of its key's mode (``sk_live_`` keys make
        live endpoints, which receive live events only; a key sees its own mode's only)."""
        api_key = authenticate(headers.get("Authorization"))
        if isinstance(api_key, Reply):
            return api_key
        endpoint_id = path.removeprefix("/v1/webhook_endpoints").strip("/")
        if method == "POST" and not endpoint_id:
            try:
                params = decode_form(body)
                events = params.get("enabled_events")
                url = params.get("url")
                if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                    raise BadRequest("Invalid URL: a webhook endpoint needs an http(s) url.", param="url")
                if not isinstance(events, list):
                    raise BadRequest("Missing required param: enabled_events.", param="enabled_events")
                try:
                    endpoint = self.webhooks.register(
                        url,
                        [str(e) for e in events],
                        livemode="_live_" in api_key,
                        description=params.get("description"),
                        metadata=params.get("metadata") if isinstance(params.get("metadata"), dict) else None,
                    )
                except ValueError as exc:
                    raise BadRequest(str(exc), param="enabled_events") from None
            except BadRequest as exc:
                return bad_request(exc)
            return Reply(200, endpoint)
        if method == "GET" and not endpoint_id:
            mode = "_live_" in api_key
            data = [e for e in self.webhooks.endpoints() if e["livemode"] == mode]
            return Reply(
                200, {"object": "list", "data": data, "has_more": False, "url": "/v1/webhook_endpoints"}
            )
        if not endpoint_id or "/" in endpoint_id or method not in ("GET", "POST", "DELETE"):
            return unrecognized_url(method, path)
        try:
            if self.webhooks.retrieve(endpoint_id)["livemode"] != ("_live_" in api_key):
                raise KeyError(endpoint_id)
            if method == "GET":
                return Reply(200, self.webhooks.retrieve(endpoint_id))
            if method == "DELETE":
                return Reply(200, self.webhooks.delete(endpoint_id))
            return self._update_webhook_endpoint(endpoint_id, body)
        except KeyError:
            return error(404, f"No such webhook endpoint: '{endpoint_id}'", code="resource_missing")

    def _update_webhook_endpoint(self, endpoint_id: str, body: bytes) -> Reply:
        """``POST /v1/webhook_endpoints/{id}``: ``disabled=false`` enables an endpoint Stripe disabled."""
        try:
            params = decode_form(body)
            url = params.get("url")
            if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
                raise BadRequest("Invalid URL: a webhook endpoint needs an http(s) url.", param="url")
            events = params.get("enabled_events")
            if events is not None and not isinstance(events, list):
                raise BadRequest("Invalid array: enabled_events.", param="enabled_events")
            metadata = params.get("metadata")
            try:
                endpoint = self.webhooks.update(
                    endpoint_id,
                    disabled=boolean(params, "disabled", default=False) if "disabled" in params else None,
                    url=url,
                    enabled_events=[str(e) for e in events] if events is not None else None,
                    description=params.get("description"),
                    metadata=metadata if isinstance(metadata, dict) else None,
                )
            except ValueError as exc:
                raise BadRequest(str(exc), param="enabled_events") from None
        except BadRequest as exc:
            return bad_request(exc)
        return Reply(200, endpoint)

    def _api(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        request_id: str,
        version: str,
    ) -> Reply:
        call = self._receive(method, path, query, headers, body, request_id, version)
        if isinstance(call, Reply):
            return call
        # Before the idempotency layer: nothing answered here is saved under the key.
        edge = self._take_fault(call, edge=True)
        if edge is not None:
            return too_many_requests(edge.kind, call.echo)
        with self._lock:
            granted = self._key_permissions.get(call.api_key, "write")
        denied = permission_denied(call.api_key, granted, call.endpoint)
        if denied is not None:
            return denied
        try:
            checked = self._validate(call)
        except BadRequest as exc:
            return bad_request(exc, call.echo)

        with self._lock:
            account = self._key_accounts.get(call.api_key, DEFAULT_ACCOUNT)
        slot = idempotency.slot_of(account, call.api_key, call.key, dedupe=self.dedupe)
        if slot is None:
            return self._run(call, checked, None)
        refused = idempotency.key_too_long(slot, call.echo)
        if refused is not None:
            return refused
        with self._lock:
            answered = idempotency.admit(
                self._saved,
                self._in_flight,
                slot,
                path=path,
                params=call.params,
                now=self.now(),
                echo=call.echo,
            )
        if answered is not None:
            return answered
        try:
            return self._run(call, checked, slot)
        finally:
            with self._lock:
                idempotency.release(self._in_flight, slot)

    def _receive(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        request_id: str,
        version: str,
    ) -> _Call | Reply:
        """The authenticated, routed and decoded request, or the 401, 404 or 400 that ends it."""
        api_key = authenticate(headers.get("Authorization"))
        if isinstance(api_key, Reply):
            return api_key
        with self._lock:
            revoked = api_key in self._revoked
        if revoked:
            return revoked_key(api_key)
        routed = route(method, path)
        if routed is None:
            return unrecognized_url(method, path)
        try:
            params = decode_form(body if method == "POST" else query.encode())
        except BadRequest as exc:
            return bad_request(exc)
        return _Call(
            method=method,
            path=path,
            endpoint=routed[0],
            intent_id=routed[1],
            params=params,
            api_key=api_key,
            key=headers.get("Idempotency-Key") if method == "POST" else None,
            request_id=request_id,
            version=version,
        )

    def _validate(self, call: _Call) -> CreateRequest | None:
        """Parameter validation, before the idempotency layer: what it refuses is never saved."""
        if call.endpoint == "create":
            return intents.validate_create(call.params, call.version)
        if call.endpoint == "cancel":
            intents.validate_cancel(call.params)
        if call.endpoint == "retrieve":
            intents.validate_retrieve(call.params)
        if call.endpoint == "refund" and not call.params.get("payment_intent"):
            raise BadRequest("Missing required param: payment_intent.", param="payment_intent")
        if call.endpoint == "refund" and not str(call.params.get("amount", "1")).isdigit():
            raise BadRequest("Invalid integer: amount", param="amount")
        return None

    def _run(self, call: _Call, checked: CreateRequest | None, slot: Slot | None) -> Reply:
        """Past the idempotency layer: execute, save the result under the key, then fire any fault."""
        with self._lock:
            self._requests[call.endpoint] += 1
        if self.latency > 0:
            self._stopping.wait(self.latency)
        fault = self._take_fault(call, edge=False)
        if fault is not None and fault.kind == "fail_before_apply":
            return server_error(call.echo)
        reply = self._execute(call, checked)
        reply.headers.update(call.echo)
        if slot is not None:
            with self._lock:
                idempotency.save(
                    self._saved,
                    slot,
                    reply,
                    path=call.path,
                    params=call.params,
                    request_id=call.request_id,
                    now=self.now(),
                    replay_500=fault is not None and fault.kind == "fail_after_apply_replayed",
                    echo=call.echo,
                )
        if fault is None:
            return reply
        return admin.after_apply(fault, call.echo, default_hang=self.hang_seconds)

    def _execute(self, call: _Call, checked: CreateRequest | None) -> Reply:
        try:
            if checked is not None:
                return self._create(call, checked)
            if call.endpoint == "search":
                return self._search(call.params)
            if call.endpoint == "list":
                return self._list(call.params)
            if call.endpoint == "refund":
                return self._refund(call.params)
            with self._lock:
                intent = self._intents.get(call.intent_id or "")
                caller = self._key_accounts.get(call.api_key, DEFAULT_ACCOUNT)
                if (
                    intent is not None
                    and self._intent_info.get(intent["id"], {}).get("account", DEFAULT_ACCOUNT) != caller
                ):
                    intent = None  # another account's PaymentIntent: Stripe answers as if there were none
                if intent is None:
                    return error(
                        404,
                        f"No such payment_intent: '{call.intent_id}'",
                        param="intent",
                        code="resource_missing",
                    )
                if call.endpoint == "retrieve":
                    return Reply(200, copy.deepcopy(intent))
                return self._cancel(intent, call.params)
        except BadRequest as exc:
            # Raised while executing (an object that does not exist, an amount the currency does not
            # allow): the endpoint had begun, so Stripe saves this 400 under the key and replays it.
            return bad_request(exc)

    # -- endpoints ---------------------------------------------------------------------------

    def _create(self, call: _Call, checked: CreateRequest) -> Reply:
        intents.check_references(checked, call.params.get("customer"))
        with self._lock:
            keyed = intents.keyed_id(call.key) if call.key else None
            intent_id = keyed if keyed is not None and keyed not in self._intents else None
            intent = intents.new_intent(checked, call.params, self.now(), intent_id=intent_id)
            self._intents[intent["id"]] = intent
            self._intent_info[intent["id"]] = {
                "account": self._key_accounts.get(call.api_key, DEFAULT_ACCOUNT),
                "payment_method": checked.method,
                "idempotency_key": call.key,
                "request_id": call.request_id,
            }
            declined = self._confirm(intent, checked) if checked.confirm else None
            if declined is None:
                reply = Reply(200, copy.deepcopy(intent))
            else:
                reply = intents.decline(intent, declined, checked.method or "", call.request_id)
            self._publish(intent, {"id": call.request_id, "idempotency_key": call.key})
            return reply

    def _refund(self, params: dict[str, Any]) -> Reply:
        """``POST /v1/refunds`` with ``payment_intent`` (and ``amount``: the rest by default), as the
        DuplicateCharge runbook refunds an extra charge. Idempotent by key like every POST; a second
        refund of what is already refunded is Stripe's 400 ``charge_already_refunded``."""
        intent_id = str(params["payment_intent"])
        with self._lock:
            intent = self._intents.get(intent_id)
            if intent is None:
                raise BadRequest(
                    f"No such payment_intent: '{intent_id}'", param="payment_intent", code="resource_missing"
                )
            if intent["status"] != "succeeded" or not intent.get("latest_charge"):
                raise BadRequest(
                    f"This PaymentIntent ({intent_id}) does not have a successful charge to refund.",
                    param="payment_intent",
                )
            left = int(intent["amount_received"]) - self._refunded.get(intent_id, 0)
            if left <= 0:
                raise BadRequest(
                    f"Charge {intent['latest_charge']} has already been refunded.",
                    code="charge_already_refunded",
                )
            amount = int(params.get("amount") or left)
            if not 0 < amount <= left:
                raise BadRequest(
                    f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                    param="amount",
                )
            self._refunded[intent_id] = self._refunded.get(intent_id, 0) + amount
            refund = {
                "id": new_id("re_3", 24),
                "object": "refund",
                "amount": amount,
                "charge": intent["latest_charge"],
                "created": int(self.now()),
                "currency": intent["currency"],
                "metadata": {},
                "payment_intent": intent_id,
                "reason": params.get("reason"),
                "status": "succeeded",
            }
            self._refunds.append(refund)
            return Reply(200, copy.deepcopy(refund))

    def refunds(self, intent_id: str | None = None) -> list[dict[str, Any]]:
        """Every refund made (of one PaymentIntent, or all), oldest first."""
        with self._lock:
            return [copy.deepcopy(r) for r in self._refunds if intent_id in (None, r["payment_intent"])]

    def _confirm(self, intent: dict[str, Any], checked: CreateRequest) -> Decline | None:
        # Called with the lock held: move the new PaymentIntent on, or say how it declines.
        forced = intents.take_forced(self._forced, checked.metadata.get("orderId"))
        outcome = intents.confirm_outcome(checked, forced)
        if isinstance(outcome, tuple):
            return outcome
        self._transition(intent, outcome)
        return None

    def _cancel(self, intent: dict[str, Any], params: dict[str, Any]) -> Reply:
        # Called with the lock held (parameters already validated).
        refused = intents.cannot_cancel(intent)
        if refused is not None:
            return refused
        self._transition(intent, "canceled")
        intent["cancellation_reason"] = params.get("cancellation_reason")
        self._publish(intent)
        return Reply(200, copy.deepcopy(intent))

    def _search(self, params: dict[str, Any]) -> Reply:
        request = search.validate_search(params)
        # The search index is search_lag_seconds behind: it holds each PaymentIntent as it was then.
        horizon = self.now() - self.search_lag_seconds
        with self._lock:
            return search.search(request, list(self._intents), self._versions, horizon)

    def _list(self, params: dict[str, Any]) -> Reply:
        request = search.validate_list(params)
        with self._lock:
            return search.list_page(request, self._intents)

    # -- state changes (called with the lock held) -------------------------------------------

    def _publish(self, intent: dict[str, Any], request: dict[str, Any] | None = None) -> None:
        search.publish(self._versions, intent, self.now())
        self.webhooks.changed(intent, request=request)

    def _transition(self, intent: dict[str, Any], status: str) -> None:
        intents.transition(intent, status, self.now())
        if status == "processing" and self.settle_seconds is not None and self._server is not None:
            timer = threading.Timer(self.settle_seconds, lambda: self._settle(intent["id"], timer))
            timer.daemon = True
            self._settlements.add(timer)
            timer.start()
        if status == "succeeded":
            info = self._intent_info[intent["id"]]
            self._ledger.append(intents.ledger_entry(intent, info, self.now()))

    def _take_fault(self, call: _Call, *, edge: bool) -> ProviderFault | None:
        with self._lock:
            intent = self._intents.get(call.intent_id) if call.intent_id else None
            return admin.take_fault(
                self._faults,
                self._rates,
                self._random,
                endpoint=call.endpoint,
                order_id=admin.order_of(call.endpoint, call.params, intent),
                edge=edge,
            )
