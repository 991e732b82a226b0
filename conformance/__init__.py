"""The conformance suite."""
