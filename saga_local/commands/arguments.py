"""The ``saga`` commands' argument parsing: one line for a mistake, and no nonsense accepted.

A count that is zero or negative, a share outside 0..1 or a port that cannot be one is refused by
the parser, naming the option, before anything starts: ``saga simulate --copies 0`` would otherwise
report every order lost (a false alarm about the promise) and ``saga send --copies -1`` would say it
sent -1 messages. A mistake is answered in one line on stderr (the usage is one ``--help`` away), so
the line a person reads is the line that says what was wrong.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, once: not when the help already says it in words
    (``(default: the file's)``), and not for a flag (off unless given) or an option with no value
    (its help says what happens without it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        # By identity: a default of 0 is a value to show (``--port``), not a flag's False.
        if "default" in text or any(
            action.default is nothing for nothing in (None, False, argparse.SUPPRESS)
        ):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that answers a mistake in one line, and shows each option's default."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``PROG: MESSAGE (PROG --help)`` on stderr."""
        usage_error(self.prog, message)


def usage_error(prog: str, message: str) -> NoReturn:
    """Answer a mistake in the command line as the parser does: ``PROG: MESSAGE (see PROG --help)``
    on stderr and exit status 2, for a mistake only the command can see (an option its choice
    makes meaningless)."""
    sys.stderr.write(f"{prog}: {message} (see {prog} --help)\n")
    raise SystemExit(2)


def count(minimum: int = 1) -> Callable[[str], int]:
    """An integer argument of at least ``minimum`` (1: a count of things to do)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    parse.__name__ = "count"  # what argparse names in "invalid count value"
    return parse


def share(text: str) -> float:
    """A share between 0 and 1 (0.1 is 10%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1 (0.1 is 10%), not {text}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, zero or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be zero or more seconds, not {text}")
    return value


def html_file(text: str) -> str:
    """A page to write (``--html PATH``): its folder must exist and be writable, checked before a run
    that may take minutes, so that its report is not lost at the end."""
    path = Path(text)
    folder = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: name the page, e.g. {path / 'report.html'}")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: no folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: the folder {folder} is not writable")
    return text


def port(text: str) -> int:
    """A TCP port, or 0 for a free one."""
    value = count(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0 for a free one, at most 65535), not {value}")
    return value


def duration(text: str) -> float:
    """A duration: seconds (``90``), or with a unit (``90s``, ``10m``, ``2h``, ``1d``)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1].lower() in units else (text, "s")
    try:
        value = float(number) * units[unit.lower()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (90s, 10m, 2h, 1d)") from None
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {text}")
    return value
