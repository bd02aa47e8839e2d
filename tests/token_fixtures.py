"""Fixtures for the token counters: a fresh encoding cache, and counters with no tiktoken at all."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.llm import tokens


@pytest.fixture
def fresh_token_cache():
    """No encoding loaded before the test, none kept after it."""
    tokens._reset_cache()
    yield
    tokens._reset_cache()


@pytest.fixture
def no_tiktoken(monkeypatch):
    """Every encoding loader fails, as if tiktoken were missing or broken."""

    def broken() -> None:
        raise ImportError("tiktoken is not installed")

    monkeypatch.setitem(tokens._loaders, tokens.OFFLINE_ENCODING, broken)
    monkeypatch.setattr(tokens, "_load_cached", lambda name: broken())
    tokens._reset_cache()
