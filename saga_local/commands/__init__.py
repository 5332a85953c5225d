"""The ``saga`` subcommands' implementations (``saga_local.cli`` parses, these run)."""
