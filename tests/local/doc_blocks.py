"""The command blocks of the users' docs that run against a local stack, as the docs mark them.

A block a person runs under `saga up` (a rehearsal of the runbook, the adoption guide's cases, the
webhook trigger) is preceded by ``<!-- rehearsal: NAME -->``, and tests/local/test_entry_point.py
runs it as written and checks what its comments say. A block that looks local but cannot run here
says why instead: ``<!-- not-rehearsed: REASON -->``. A block that looks local and says neither is
a rehearsal nobody runs: tests/local/test_doc_rehearsals.py fails on it.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from saga_local.template import ROOT

#: The docs whose local command blocks are rehearsed.
DOCS = ("runbook.md", "adopting.md", "webhooks.md", "stripe-test-mode.md")
#: What only makes sense against a local stack: a block with one of these is a rehearsal (or says why not).
LOCAL_SIGNS = ("saga fault", "saga clock", "saga up", "/_emulator/", ".saga/stack.json", "$PROVIDER")
_MARKER = re.compile(r"^\s*<!--\s*(rehearsal|not-rehearsed):\s*(.+?)\s*-->\s*$")
_FENCE = re.compile(r"^\s*```")
#: A comment after a command: two spaces or more, then ``#``.
_COMMENT = re.compile(r"\s{2,}#\s.*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc, and the marker on the line before it (if any)."""

    doc: str
    line: int
    text: str
    marker: str | None = None
    name: str | None = None

    @property
    def local(self) -> bool:
        return any(sign in self.text for sign in LOCAL_SIGNS)

    def commands(self) -> list[tuple[str, str]]:
        """Each command (continued lines joined) with its comment (what it says will happen)."""
        found: list[tuple[str, str]] = []
        pending = ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            line = pending + line.strip()
            pending = ""
            comment = _COMMENT.search(line)
            command = line[: comment.start()] if comment else line
            found.append((command.strip(), comment.group().strip()[1:].strip() if comment else ""))
        return found


def blocks(doc: str) -> list[Block]:
    """Every fenced block of ``docs/<doc>``, with its marker."""
    lines = (ROOT / "docs" / doc).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        if not _FENCE.match(lines[index]):
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and not _FENCE.match(lines[index]):
            index += 1
        text = textwrap.dedent("\n".join(lines[start + 1 : index]))
        marked = _MARKER.match(lines[start - 1]) if start > 0 else None
        found.append(
            Block(
                doc=doc,
                line=start + 1,
                text=text,
                marker=marked.group(1) if marked else None,
                name=marked.group(2) if marked else None,
            )
        )
        index += 1
    return found


def markers(doc: str) -> list[tuple[int, str]]:
    """Every marker line of ``docs/<doc>`` (1-based line, the line), placed before a block or not."""
    lines = (ROOT / "docs" / doc).read_text(encoding="utf-8").splitlines()
    return [(n + 1, line) for n, line in enumerate(lines) if _MARKER.match(line)]


def rehearsals() -> dict[str, Block]:
    """The blocks marked ``rehearsal``, by name."""
    return {b.name: b for doc in DOCS for b in blocks(doc) if b.marker == "rehearsal" and b.name}
