"""What the local tests that open a page in a real browser share: Debian's chromium, run headless."""

from __future__ import annotations

import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def chromium(profile: Path, *args: str, width: int = 1400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - a fixed binary and our own arguments
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},1000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
