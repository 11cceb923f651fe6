"""Fixtures of the chaos tests: the local-fleet tests' tokenizer cache, shared by the session."""

from tests.localfleet.conftest import cache_dir, tokenizer

__all__ = ["cache_dir", "tokenizer"]
