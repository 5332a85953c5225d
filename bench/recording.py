"""``--record PATH`` for every benchmark: its JSON object and the machine it was measured on.

The figures of docs/performance.md are rendered from these records (saga_local/harness/figures.py
and bench_figures.py), not typed by hand: wall and CPU time differ on every run and machine, so the
docs quote one recorded run with the time, cores and load it ran on.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


def machine_facts() -> dict[str, Any]:
    """When and on what the run was measured: every timing depends on it."""
    one, five, fifteen = os.getloadavg()
    return {
        "utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu_count": os.cpu_count(),
        "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)],
    }


def record(path: Path, measured: dict[str, Any]) -> None:
    """Write ``measured`` and the machine's facts to ``path``, the docs' recorded figures."""
    recorded = {**measured, "measured_on": machine_facts()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
