"""What the state machine's observability tests share: the handlers' log and metric lines as a test
captures them (the ``captured`` fixture in conftest.py), and those lines parsed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import io

    import pytest


class Captured:
    """The handlers' JSON log lines (Powertools' logger) and their EMF metric lines (printed)."""

    def __init__(self, buffer: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
        self.buffer = buffer
        self.capsys = capsys

    def clear(self) -> None:
        self.buffer.seek(0)
        self.buffer.truncate()
        self.capsys.readouterr()

    def text(self) -> str:
        return self.buffer.getvalue() + self.capsys.readouterr().out


def lines(captured: str) -> list[dict[str, Any]]:
    out = []
    for line in captured.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
