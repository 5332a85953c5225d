"""The local Lambda runtime: run the template's functions the way Lambda does, faults included."""
