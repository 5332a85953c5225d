"""``saga fault``: break a running `saga up`, its provider or its functions, to rehearse the runbook.

The Stripe emulator of `saga up` takes the provider's faults over its own ``/_emulator/`` routes (not
Stripe's; see ``saga_local.stripe_emulator.admin``):

* ``outage``: every request to the provider fails with a 500 before it is applied, until
  ``saga fault clear``: charges end in Needs Reconciliation (the outcome is unknown), the claim is
  kept, and the sweeper resolves it once the provider is back and the lease has run out;
* ``lost-answer``: the next charge (of ``--order-id``, or any) is applied, then its answer is lost
  (a 500 after the commit): the retry replays it under the same idempotency key and the order is
  charged once;
* ``webhook-outage``: Stripe's webhook events never reach the stack (each delivery lost on the way)
  until ``saga fault clear``: what the saga does when the claims wait for its own steps and the
  sweeper alone, as before webhooks (and as when the endpoint is disabled).

The functions run inside the `saga up` process (or its workers): their faults go to its fault
control route (``saga_local.runtime.control``), which hands them to the runtime's fault points
(``saga_local.runtime.faults``):

* ``throttle``: every invocation of ``--function`` is refused for ``--seconds``, as Lambda refuses
  one with ``TooManyRequestsException`` when the concurrency is used up;
* ``crash``: the next invocation(s) of ``--function`` die at ``--point`` (``Runtime.ExitError``);
* ``late-write``: the next invocation of ``--function`` dies with its write sent, and the write lands
  later, once the state machine has moved on;

and ``clear`` removes every fault of both.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from saga_local.commands.arguments import usage_error
from saga_local.output import Out, plural
from saga_local.runtime.control import TOKEN_HEADER
from saga_local.runtime.faults import CALLS, LANDS_AFTER, WRITE_CALLS, Fault
from saga_local.stack.function_logs import LogsError, resolve_functions
from saga_local.stack.targets import running_stack
from saga_local.stripe_emulator import ENDPOINTS
from saga_local.stripe_emulator.emulator import ADMIN_TOKEN_HEADER

#: The provider's faults (the emulator takes them).
PROVIDER_KINDS = ("outage", "lost-answer", "webhook-outage")
#: The functions' faults (the fault control of `saga up` takes them).
FUNCTION_KINDS = ("throttle", "crash", "late-write")
KINDS = (*PROVIDER_KINDS, *FUNCTION_KINDS, "clear")
#: How long ``throttle`` lasts unless ``--seconds`` says otherwise.
THROTTLE_SECONDS = 60.0
#: A fault that fires for a window of time, however many invocations come (``Fault.times``).
_ALWAYS = 10**9
#: Each option of ``saga fault`` (its ``argparse`` dest, its flag) and the kinds it means something
#: to: given to another kind it would be silently ignored, so it is refused instead.
OPTION_KINDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("function", "--function"): FUNCTION_KINDS,
    ("seconds", "--seconds"): ("throttle",),
    ("point", "--point"): ("crash", "late-write"),
    ("order_id", "--order-id"): ("lost-answer", *FUNCTION_KINDS),
    ("times", "--times"): ("lost-answer", "crash", "late-write"),
}

if TYPE_CHECKING:
    import argparse


class FaultError(Exception):
    """The emulator could not be reached, or refused the fault, in words."""


def _call(provider: str, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return _request(f"{provider}/_emulator{path}", {ADMIN_TOKEN_HEADER: token}, method, body, "the emulator")


def _request(url: str, headers: dict[str, str], method: str, body: dict[str, Any] | None, who: str) -> Any:
    request = urllib.request.Request(  # noqa: S310 - a loopback URL of `saga up`
        url,
        data=json.dumps(body or {}).encode(),
        method=method,
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read())["error"]
            said = str(error.get("message", error) if isinstance(error, dict) else error)
        except (ValueError, KeyError, TypeError):
            said = f"HTTP {exc.code}"
        raise FaultError(f"{who} refused {method} {urllib.parse.urlsplit(url).path}: {said}") from None
    except OSError as exc:
        raise FaultError(f"nothing answers at {url} (is `saga up` still running?): {exc}") from None


def apply(provider: str, kind: str, *, token: str, order_id: str | None = None, times: int = 1) -> str:
    """Put the fault on the emulator at ``provider`` (``token``: its admin token, from the stack
    file `saga up` writes); what it will do, in one line."""
    if kind == "outage":
        for endpoint in sorted(ENDPOINTS):
            _call(
                provider,
                token,
                "POST",
                "/failure-rates",
                {"kind": "fail_before_apply", "probability": 1.0, "endpoint": endpoint},
            )
        return "provider outage: every request fails (HTTP 500, nothing applied) until `saga fault clear`"
    if kind == "lost-answer":
        _call(
            provider,
            token,
            "POST",
            "/faults",
            {"kind": "fail_after_apply", "orderId": order_id, "times": times},
        )
        which = f"of {order_id}" if order_id else "of any order"
        return (
            f"the next {plural(times, 'charge')} {which} will be applied and the answer lost (HTTP 500 after"
            " the commit); the retry replays the charge under the same key"
        )
    if kind == "webhook-outage":
        _call(provider, token, "POST", "/webhooks", {"lose": 1.0})
        return (
            "webhook outage: no Stripe webhook event reaches the stack until `saga fault clear` (the"
            " claims wait for the saga's own steps and the sweeper)"
        )
    if kind == "clear":
        _call(provider, token, "DELETE", "/faults")
        _call(provider, token, "POST", "/webhooks", {})
        return "provider faults cleared: every request is answered normally, every webhook delivered"
    raise FaultError(f"no fault kind {kind!r}; the kinds: {', '.join(KINDS)}")


def _short(logical_id: str) -> str:
    return logical_id.removesuffix("Function")


def function_id(name: str) -> str:
    """The logical id of the function ``name`` means, as `saga logs` and `saga invoke` take it
    (``ClaimOrderFunction``, ``ClaimOrder`` or ``claimorder``); :class:`FaultError` naming them all."""
    try:
        (found,) = resolve_functions([name])
    except LogsError:
        found = None
    if found not in CALLS:  # every function of the template has its fault points
        raise FaultError(f"no function {name!r} in template.yaml; name one of: {_function_names()}")
    return str(found)


def _function_names() -> str:
    return f"{', '.join(sorted(_short(k) for k in CALLS))} (or its logical id, e.g. ClaimOrderFunction)"


def function_fault(
    kind: str,
    function: str,
    *,
    seconds: float = THROTTLE_SECONDS,
    point: str | None = None,
    order_id: str | None = None,
    times: int = 1,
) -> dict[str, Any]:
    """The fault control's body for a function fault of ``kind`` (:data:`FUNCTION_KINDS`), checked
    here first so that a mistake is named before anything is sent: :class:`FaultError` in words.
    ``function`` is a name :func:`function_id` takes."""
    function = function_id(function)
    target: dict[str, Any] = {"function": function, "orderId": order_id}
    if kind == "throttle":
        if not seconds > 0:
            raise FaultError(f"--seconds: a throttle lasts more than 0 seconds, not {seconds:g}")
        spec = {**target, "point": "start", "kind": "throttle", "times": _ALWAYS, "forSeconds": seconds}
    elif kind == "crash":
        spec = {**target, "point": point or "start", "kind": "die", "times": times}
    elif kind == "late-write":
        writes = [call for call in CALLS[function] if call in WRITE_CALLS]
        if not writes:
            raise FaultError(f"{function} writes nothing, so no write of it can land late")
        spec = {
            **target,
            "point": point or f"after:{writes[0]}",
            "kind": "late_write",
            "times": times,
            "landsAfter": LANDS_AFTER.get(function),
        }
    else:
        raise FaultError(f"no function fault kind {kind!r}; the kinds: {', '.join(FUNCTION_KINDS)}")
    try:
        Fault(**{_FIELD_NAMES[k]: v for k, v in spec.items() if k in _FIELD_NAMES})
    except ValueError as exc:
        raise FaultError(str(exc)) from None
    return spec


#: The body's names for :class:`Fault`'s fields (``forSeconds`` is the window; it has no field).
_FIELD_NAMES = {
    "function": "function",
    "point": "point",
    "kind": "kind",
    "times": "times",
    "orderId": "order_id",
    "landsAfter": "lands_after",
}


def _control(control: dict[str, str], method: str, body: dict[str, Any] | None) -> Any:
    headers = {TOKEN_HEADER: control["token"]}
    return _request(f"{control['url']}/faults", headers, method, body, "the fault control of `saga up`")


def apply_to_functions(control: dict[str, str], spec: dict[str, Any]) -> str:
    """Hand ``spec`` (:func:`function_fault`) to the fault control of `saga up` (``control``: its URL
    and token, from the stack file); what it will do, in one line."""
    answer = _control(control, "POST", spec)
    said = str(answer["fault"])
    if spec["kind"] == "throttle":
        which = f" for order {spec['orderId']}" if spec.get("orderId") else ""
        return (
            f"{spec['function']}: every invocation{which} refused (Lambda's TooManyRequestsException) for"
            f" {spec['forSeconds']:g} s, or until `saga fault clear`"
        )
    if spec["kind"] == "late_write":
        return f"{said}: the invocation dies with its write sent, and the write lands after the saga moved on"
    return f"{said}: the invocation dies there (Runtime.ExitError), and the state machine retries it"


def clear_functions(control: dict[str, str]) -> str:
    """Remove every function fault of `saga up`; how many, in one line."""
    answer = _control(control, "DELETE", None)
    return f"function faults cleared ({answer['cleared']} removed): every invocation runs normally"


def _kinds(kinds: tuple[str, ...]) -> str:
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"


def misplaced(args: argparse.Namespace) -> str | None:
    """The options given that mean nothing to ``args.kind``, as one sentence saying what to do, or
    None: ``saga fault outage --seconds 5`` would otherwise do something other than what was meant."""
    given = [
        (flag, kinds)
        for (dest, flag), kinds in OPTION_KINDS.items()
        if getattr(args, dest, None) is not None and args.kind not in kinds
    ]
    if not given:
        return None
    named = " or ".join(f"{flag} (for {_kinds(kinds)})" for flag, kinds in given)
    return f"{args.kind} takes no {named}: leave {'it' if len(given) == 1 else 'them'} out"


def check(args: argparse.Namespace) -> dict[str, Any] | None:
    """The function fault ``saga fault`` was asked for (None for a provider's, or ``clear``), checked
    before any stack is looked for, so that a mistake in it is what the one line names."""
    if args.kind not in FUNCTION_KINDS:
        return None
    if not args.function:
        raise FaultError(f"{args.kind} needs --function NAME, one of: {_function_names()}")
    return function_fault(
        args.kind,
        args.function,
        seconds=THROTTLE_SECONDS if args.seconds is None else args.seconds,
        point=args.point,
        order_id=args.order_id,
        times=1 if args.times is None else args.times,
    )


def run(state: dict[str, Any], args: argparse.Namespace, spec: dict[str, Any] | None) -> str:
    """Put the fault of ``args`` on the `saga up` that ``state`` (its stack file) describes."""
    control = state.get("faultControl")
    if spec is not None:
        if not control:
            raise FaultError("this `saga up` takes no function faults (it predates them): restart it")
        return apply_to_functions(control, spec)
    if state.get("stripeTestMode"):
        if args.kind != "clear":
            raise FaultError(
                f"{args.kind} is a fault of the Stripe emulator, and this `saga up` runs on Stripe's test"
                " mode (--stripe-test): the functions' faults (throttle, crash, late-write) still work"
            )
        return clear_functions(control) if control else "no function faults to clear"
    said = apply(
        str(state["provider"]),
        args.kind,
        token=str(state.get("providerAdminToken", "")),
        order_id=args.order_id,
        times=1 if args.times is None else args.times,
    )
    if args.kind == "clear" and control:
        said = f"{said}; {clear_functions(control)}"
    return said


def cmd_fault(args: argparse.Namespace) -> int:
    """A fault of the provider or of a function on the running `saga up`."""
    mistake = misplaced(args)
    if mistake is not None:
        usage_error("saga fault", mistake)
    try:
        spec = check(args)
    except FaultError as exc:
        raise SystemExit(f"saga fault: {exc}") from None
    state = running_stack("fault")
    if state is None:
        raise SystemExit(
            "saga fault: no local stack is running: start one with `saga up` (another terminal)."
        )
    try:
        said = run(state, args, spec)
    except FaultError as exc:
        raise SystemExit(f"saga fault: {exc}") from None
    Out()(said)
    return 0
