"""The emulator's errors: one base class, one class per failure.

Only failures that become one of Stripe's answers live here. Misuse of the Python test controls
(an unknown fault kind, a probability above 1) raises :class:`ValueError`, as it always has, and the
admin routes turn that into a 400 of their own (not in Stripe's shape: no SDK reads them).
"""

from __future__ import annotations


class StripeEmulatorError(Exception):
    """Base class of the errors the emulator answers in Stripe's error shape."""


class BadRequest(StripeEmulatorError):
    """A 400 ``invalid_request_error``: a parameter, or an object it names, is not acceptable.

    Raised while validating (before the idempotency layer: never saved under the key) or while
    executing (after it: saved and replayed). Which of the two is decided by where it is caught,
    not by the error.
    """

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
