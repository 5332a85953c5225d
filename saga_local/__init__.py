"""Everything that runs only on a developer machine: the local stack, the CLI, the provider emulator.

Nothing in this package is deployed to Lambda.
"""
