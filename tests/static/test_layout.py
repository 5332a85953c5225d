"""The repository's layout is described once, in docs/design.md, and that description is complete.

Two copies (the README's and the design's) drifted apart before: each missed folders the other
had. The README now points at the design's, and these tests fail when a folder is added without a
line there, so a reader who trusts the layout finds every folder in it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"


def layout_block() -> str:
    """The fenced block under docs/design.md's ``## Layout`` heading."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^```\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    assert match, "docs/design.md's Layout section has no fenced block"
    return match.group(1)


def named_folders() -> set[str]:
    """Each ``name/`` the layout lists, as a path: an indented line names a folder of the last
    line above it that is indented less."""
    names: set[str] = set()
    parents: list[tuple[int, str]] = []
    for line in layout_block().splitlines():
        match = re.match(r"^( *)(\.?[a-z_]+)/(?:\s|$)", line)
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = "/".join([*(p for _, p in parents), name])
        names.add(path)
        parents.append((indent, path))
    return names


def tracked_folders(under: str = "") -> set[str]:
    """The folders git tracks files in, directly under ``under`` (the top level when empty)."""
    listed = subprocess.run(  # noqa: S603 - git, with fixed arguments
        ["git", "ls-files", "--", under or "."],  # noqa: S607 - git from PATH, as everywhere in CI
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    depth = under.count("/") + 1 if under else 0
    return {"/".join(f.split("/")[: depth + 1]) for f in listed if f.count("/") > depth}


@pytest.mark.parametrize("under", ["", "tests", "scripts"])
def test_every_tracked_folder_is_named_in_the_design_layout(under: str) -> None:
    missing = sorted(tracked_folders(under) - named_folders())
    assert not missing, f"docs/design.md's Layout does not name: {missing}"


def test_every_saga_local_package_is_named_in_the_design_layout() -> None:
    packages = {f"saga_local/{p.parent.name}" for p in (ROOT / "saga_local").glob("*/__init__.py")}
    assert packages, "no saga_local package found"
    missing = sorted(packages - named_folders())
    assert not missing, f"docs/design.md's Layout does not name: {missing}"


def test_the_readme_points_at_the_design_layout_instead_of_keeping_a_copy() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    assert "docs/design.md#layout" in section
    assert "```" not in section, "the README keeps a second layout; it belongs in docs/design.md"
