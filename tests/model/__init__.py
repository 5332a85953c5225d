"""A model checker for the claim protocol: every interleaving of a few deliveries, the sweeper, the
outcome relay, Stripe's webhook deliveries and faults.

``protocol`` is the model's actions and their steps (they call the real handlers, ``ClaimsStore``
on moto, ``StripeProvider`` on the Stripe emulator, the outcome relay on the stream records the
writes make: ``relay``, and the webhook consumer on the emulator's events: ``webhooks``), on the
system ``world`` sets up and wires, in the vocabulary of ``state``, checked by ``invariants``;
``explore`` the exhaustive search, ``scopes`` what is explored in CI and by ``make model``. Run
``python -m tests.model --help``.
"""
