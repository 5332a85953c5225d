"""The local stack: the embedded stack, its driver, the execution archive and the outcome log."""
