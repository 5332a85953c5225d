"""What the ``saga`` commands print with: amounts, colour on a terminal, handlers kept quiet."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from payment_saga.currencies import decimals

if TYPE_CHECKING:
    from collections.abc import Iterator


def money(amount: int, currency: str) -> str:
    """Minor units to a readable amount: 15000 BRL -> '150.00 BRL', 500 JPY -> '500 JPY'."""
    places = decimals(currency)
    if places == 0:
        return f"{amount} {currency}"
    whole, fraction = divmod(amount, 10**places)
    return f"{whole}.{fraction:0{places}d} {currency}"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 event``, ``2 events``: the count and its noun as a person writes them (``nouns``: an
    irregular plural)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


class Out:
    """Terminal output with colour when it is a terminal."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.color = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def ok(self, text: str) -> str:
        return self.paint(text, "32")

    def bad(self, text: str) -> str:
        return self.paint(text, "31")

    def warn(self, text: str) -> str:
        return self.paint(text, "33")

    def bold(self, text: str) -> str:
        return self.paint(text, "1")

    def dim(self, text: str) -> str:
        return self.paint(text, "2")


@contextlib.contextmanager
def handlers_quiet() -> Iterator[None]:
    """In-process handlers print their EMF metric lines to stdout: keep them off a printed report."""
    with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stdout(devnull):
        yield
