"""The emulator tokenizer fixture, shared with the local-fleet tests."""

from tests.localfleet.conftest import cache_dir, tokenizer

__all__ = ["cache_dir", "tokenizer"]
