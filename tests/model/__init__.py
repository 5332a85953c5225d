"""A model checker for the claim protocol: every interleaving of a few deliveries, the sweeper, the
outcome relay and faults.

``protocol`` is the model (its steps call the real handlers, ``ClaimsStore`` on moto,
``StripeProvider`` on the Stripe emulator, and the outcome relay on the stream records the writes
make: ``relay``), ``explore`` the exhaustive search, ``scopes`` what is explored in CI and by
``make model``. Run ``python -m tests.model --help``.
"""
