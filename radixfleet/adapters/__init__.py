"""Adapters to the systems outside radixfleet, each behind a small Protocol (a port)."""
