"""``python -m tests.model [--scope ci|full] [NAME...]``: explore, print figures and counterexamples.

Exits 1 when an invariant is broken or a scope was not explored to the end.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "payment-saga")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "PaymentSaga/payment-saga")
# moto only: never a real account.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(_name, None)
os.environ.update(
    {"AWS_ACCESS_KEY_ID": "model", "AWS_SECRET_ACCESS_KEY": "model", "AWS_DEFAULT_REGION": "us-east-1"}
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model", description=__doc__)
    parser.add_argument("--scope", choices=("ci", "full"), default=os.environ.get("SAGA_MODEL_SCOPE", "ci"))
    parser.add_argument("names", nargs="*", help="only these scopes (default: all of the set)")
    args = parser.parse_args(argv)
    os.environ["SAGA_MODEL_SCOPE"] = args.scope
    from tests.model.explore import Explorer
    from tests.model.scopes import selected

    failed = False
    for scope in selected():
        if args.names and scope.name not in args.names:
            continue
        report = Explorer(scope).run()
        print(report.summary(), flush=True)
        failed = failed or bool(report.counterexamples) or not report.complete
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path[:0] = [p for p in ("functions",) if p not in sys.path]
    sys.exit(main())
