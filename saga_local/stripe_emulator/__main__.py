"""Serve the emulator alone until interrupted: ``python -m saga_local.stripe_emulator --port N``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import TYPE_CHECKING

from saga_local.stripe_emulator.emulator import ProviderEmulator

if TYPE_CHECKING:
    from types import FrameType


def main(argv: list[str] | None = None) -> None:
    """Serve the emulator until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m saga_local.stripe_emulator",
        description="A local Stripe: the PaymentIntents API the saga uses, with injectable failures.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: 0, an ephemeral port)")
    parser.add_argument(
        "--no-dedupe", action="store_true", help="ignore Idempotency-Key (apply every request)"
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to delay every API request")
    parser.add_argument(
        "--search-lag",
        type=float,
        default=0.0,
        help="seconds the search lags behind creations and updates (any length; the list never lags)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for failure rates")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    emulator = ProviderEmulator(
        host=args.host,
        port=args.port,
        dedupe=not args.no_dedupe,
        latency=args.latency,
        search_lag_seconds=args.search_lag,
        seed=args.seed,
    ).start()
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"provider emulator listening on {emulator.url} (dedupe={'on' if emulator.dedupe else 'off'})",
        flush=True,
    )
    try:
        while not done.wait(0.5):
            pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
