"""``saga invoke``: one function on one event, as ``sam local invoke`` runs it, without Docker.

How the function is run, and its environment resolved as SAM CLI resolves it, is
saga_local/stack/local_invoke.py; this picks the env-vars file (the one `saga up` wrote, unless
told) and prints the result on stdout and the failure in words.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from saga_local.stack.function_logs import LogsError, resolve_functions
from saga_local.stack.local_invoke import SAM_ENV_FILE, InvokeError, invoke
from saga_local.stack.targets import relative, running_stack

if TYPE_CHECKING:
    import argparse


def cmd_invoke(args: argparse.Namespace) -> int:
    """One function on one event, as `sam local invoke` runs it: result on stdout, logs on stderr."""
    if args.env_vars:
        env_vars = Path(args.env_vars)
    elif running_stack("invoke") is not None and SAM_ENV_FILE.exists():
        env_vars = SAM_ENV_FILE
    else:
        raise SystemExit(
            "saga invoke: no local stack is running. Start one with `saga up` (another terminal): it writes"
            f" {relative(SAM_ENV_FILE)}, which points every function at it. Or pass --env-vars FILE"
            " (SAM's format) for another stack."
        )
    try:
        # ClaimOrder or claimorder, as `saga logs` takes them; an unknown name goes on, to be refused below.
        (function,) = resolve_functions([args.function])
    except LogsError:
        function = args.function
    try:
        result = invoke(function, Path(args.event), env_vars, region=args.region)
    except InvokeError as exc:
        raise SystemExit(f"saga invoke: {exc}") from None
    print(result.payload, flush=True)
    if result.function_error:
        sys.stderr.write(f"saga invoke: {function} failed ({result.function_error}); its error is above\n")
        return 1
    return 0
