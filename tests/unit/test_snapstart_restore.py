"""SnapStart: every environment restored from one snapshot must draw its own random numbers and build its
own clients (with its own credentials), and the webhook receiver must read its signing secrets again.

Lambda's managed runtime provides ``snapshot_restore_py``; here a stand-in with the same two functions
is put on the path of a fresh interpreter, which then plays two restores of one snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from saga_local.template import ROOT

if TYPE_CHECKING:
    from pathlib import Path

#: The runtime's library, as far as the handlers use it: hooks registered, run at each restore.
STAND_IN = """
hooks = []
def register_after_restore(func, *args, **kwargs):
    hooks.append((func, args, kwargs))
    return func
def register_before_snapshot(func, *args, **kwargs):
    return func
def restore():
    for func, args, kwargs in hooks:
        func(*args, **kwargs)
"""

#: Init (the import), then the same snapshot restored twice: what each restored environment sees.
PROGRAM = """
import json, random
import snapshot_restore_py
from handlers import runtime, webhook_receiver
held = webhook_receiver._secrets                             # as if init had read the secrets:
held.source, held.secrets, held.read_at = "arn", ("whsec_snapshot",), 0.0
client = runtime.client("sqs")                               # as if init had built a client
snapshot = random.getstate()
seen = []
for _ in range(2):
    random.setstate(snapshot)
    snapshot_restore_py.restore()
    seen.append(random.random())
print(json.dumps({
    "hooks": len(snapshot_restore_py.hooks),
    "draws_differ": seen[0] != seen[1],
    "client_rebuilt": runtime.client("sqs") is not client,
    "secrets_forgotten": held.secrets == (),
}))
"""


def test_two_environments_restored_from_one_snapshot_share_no_random_state_client_or_secret(
    tmp_path: Path,
) -> None:
    (tmp_path / "snapshot_restore_py.py").write_text(STAND_IN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "functions")]),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own program
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True, timeout=120
    )

    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen == {"hooks": 2, "draws_differ": True, "client_rebuilt": True, "secrets_forgotten": True}
