"""A model checker for the claim protocol: every interleaving of a few deliveries, the sweeper and faults.

``protocol`` is the model (its steps call the real handlers, ``ClaimsStore`` on moto and
``StripeProvider`` on the Stripe emulator), ``explore`` the exhaustive search, ``scopes`` what is
explored in CI and by ``make model``. Run ``python -m tests.model --help``.
"""
