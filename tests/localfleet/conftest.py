"""Fixtures of the local-fleet tests: the emulator tokenizer's cache, shared by the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the emulator's tokenizer is built once for the session (not the user's cache)."""
    return tmp_path_factory.getbasetemp() / "tokenizer-cache"


@pytest.fixture(scope="session")
def tokenizer(cache_dir: Path) -> EmulatorTokenizer:
    return load_tokenizer(cache_dir)
