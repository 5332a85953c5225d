"""The repository stands alone: nothing in it points outside it, and every link in its docs resolves.

A user who clones the project has only the repository: a pointer to a sibling directory
(``../something``) or a relative link to a file that is not there is a dead end for them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from saga_local.template import ROOT

#: Markdown links and images: [text](target) -- the target up to a space, ``#`` or ``)``.
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
_OUTSIDE = re.compile(r"\.\./shared\b|\.\./\.\./")
#: A ticket number (the word, then a number) means nothing to a reader who has only the repository.
_TRACKER = re.compile(r"\bissues?\s+#?\d+(?:\.\d+)*\b", re.IGNORECASE)
#: The design lives in docs/design.md; the upper-case name is a file the repository lacks.
_DESIGN = re.compile(r"(?<![/\w])DESIGN\.md")


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"],  # noqa: S607 - git from PATH, as a developer runs it
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_no_tracked_file_points_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        if path.suffix in {".png", ".ico", ".zip"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _OUTSIDE.finditer(text)]
    assert offenders == []


def _text_files() -> list[Path]:
    return [
        path for path in tracked_files() if path.is_file() and path.suffix not in {".png", ".ico", ".zip"}
    ]


def test_no_tracked_file_cites_an_issue_tracker() -> None:
    offenders = []
    for path in _text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _TRACKER.finditer(text)]
    assert offenders == [], "say what the thing is for, not which ticket asked for it"


def test_every_mention_of_the_design_names_the_file_that_exists() -> None:
    offenders = []
    for path in _text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _DESIGN.finditer(text)]
    assert offenders == [], "the design is docs/design.md"


@pytest.mark.parametrize("document", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_in_the_docs_resolves_inside_the_repository(document: Path) -> None:
    for target in _LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        resolved = (document.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{document.name}: {target} is outside the repository"
        assert resolved.exists(), f"{document.name}: {target} does not exist"


def test_the_design_docs_the_readme_promises_are_there() -> None:
    for name in ("design.md", "field-reports.md", "runbook.md", "order-message.md"):
        assert (ROOT / "docs" / name).is_file(), name
