"""Where the local tooling keeps its state: ``.saga/`` in the project, or ``$SAGA_STATE_DIR``.

``saga up`` writes the running stack's description (``stack.json``) and SAM's env-vars file
(``sam-env.json``) there, the functions' logs under ``logs/``; ``saga demo`` records its executions
under ``executions/``. A test (or a second checkout's stack) sets ``SAGA_STATE_DIR`` to keep its
own.
"""

from __future__ import annotations

import os
from pathlib import Path

from saga_local.template import ROOT

STATE_DIR = Path(os.environ.get("SAGA_STATE_DIR") or ROOT / ".saga")
