"""One thin module per Lambda: parse the event, call the domain with its dependencies, shape the result."""
