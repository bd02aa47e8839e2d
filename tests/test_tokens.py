"""Token counting: the bundled offline encoding, and the heuristic when it is unavailable."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from chatgpt_tool_hub.llm import tokens

pytestmark = pytest.mark.usefixtures("fresh_token_cache")  # tests/token_fixtures.py (no_tiktoken is there too)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to download would fail the test loudly."""
    import tiktoken.load

    def forbidden(*args, **kwargs):
        raise AssertionError("tiktoken tried to download")

    monkeypatch.setattr(tiktoken.load, "read_file", lambda path: _local_only(path, forbidden))


def _local_only(path: str, forbidden):
    if "://" in path:
        forbidden()
    with open(path, "rb") as fh:
        return fh.read()


def test_import_does_not_import_tiktoken():
    code = "import sys, chatgpt_tool_hub.llm.tokens; print('tiktoken' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_offline_encoding_counts_exactly(no_network):
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("") == 0
    assert tokens.count_tokens("hello world", "gpt-4") == 2
    assert tokens.count_tokens("hello world", "gpt-3.5-turbo") == 2
    assert tokens.token_counter_is_exact() is True
    assert tokens.token_counter_is_exact("gpt-4") is True


def test_special_token_text_is_plain_text(no_network):
    assert tokens.count_tokens("<|endoftext|>") > 1  # never raises on special-token text


def test_unknown_and_o200k_models_are_approximate(no_network, monkeypatch):
    monkeypatch.setattr(tokens, "_load_cached", lambda name: (_ for _ in ()).throw(FileNotFoundError(name)))
    assert tokens.count_tokens("hello world", "llama3:8b") == 2  # cl100k approximation
    assert tokens.token_counter_is_exact("llama3:8b") is False
    assert tokens.count_tokens("hello world", "gpt-4o") == 2
    assert tokens.token_counter_is_exact("gpt-4o") is False


def test_o200k_only_from_a_verified_cache(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    (tmp_path / __import__("hashlib").sha1(tokens._CACHEABLE["o200k_base"][0].encode()).hexdigest()).write_bytes(
        b"not the real file")
    assert tokens.count_tokens("hello world", "gpt-4o-mini") == 2  # fell back to cl100k, no download
    assert tokens.token_counter_is_exact("gpt-4o-mini") is False
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # cache disabled: tiktoken would download, so we do not ask
    tokens._reset_cache()
    assert tokens.token_counter_is_exact("gpt-4o") is False


def test_message_overhead(no_network):
    one = tokens.count_message_tokens([{"role": "user", "content": "hello world"}])
    # 3 per message + role "user" (1) + content (2) + 3 reply priming
    assert one == 3 + 1 + 2 + 3
    named = tokens.count_message_tokens([{"role": "user", "name": "bob", "content": "hello world"}])
    assert named == one + tokens.count_tokens("bob") + 1
    two = tokens.count_message_tokens([{"role": "user", "content": "hello world"}] * 2)
    assert two == 2 * one - 3
    assert tokens.count_message_tokens([]) == 3


def test_message_content_parts_and_none(no_network):
    parts = [{"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}]
    with_image = tokens.count_message_tokens([{"role": "user", "content": parts}])
    plain = tokens.count_message_tokens([{"role": "user", "content": "hello world"}])
    assert with_image == plain + tokens.TOKENS_PER_IMAGE
    assert tokens.count_message_tokens([{"role": "assistant", "content": None}]) == 3 + 1 + 3


def test_truncate_exact(no_network):
    text = "one two three four five"
    assert tokens.truncate_to_tokens(text, 3) == "one two three"
    assert tokens.truncate_to_tokens(text, 100) == text
    assert tokens.truncate_to_tokens(text, 0) == ""
    cut = tokens.truncate_to_tokens("你好世界" * 10, 5)
    assert "\ufffd" not in cut and tokens.count_tokens(cut) <= 5
    assert ("你好世界" * 10).startswith(cut)


# --- fallback -------------------------------------------------------------------------------


def test_fallback_heuristic(no_tiktoken):
    assert tokens.token_counter_is_exact() is False
    assert tokens.count_tokens("abcd" * 10) == 10  # 1 per 4 ASCII chars
    assert tokens.count_tokens("你好世界") == 4  # 1 per CJK char
    assert tokens.count_tokens("abcde") == 2  # rounded up
    assert tokens.count_tokens("") == 0
    assert tokens.count_message_tokens([{"role": "user", "content": "abcd" * 4}]) == 3 + 1 + 4 + 3


def test_fallback_truncate(no_tiktoken):
    assert tokens.truncate_to_tokens("abcd" * 10, 2) == "abcdabcd"
    assert tokens.truncate_to_tokens("你好世界", 2) == "你好"
    assert tokens.truncate_to_tokens("short", 100) == "short"


def test_fallback_when_tiktoken_module_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    tokens._reset_cache()
    assert tokens.count_tokens("abcd" * 3) == 3
    assert tokens.token_counter_is_exact() is False
    assert tokens.token_counter_is_exact("gpt-4o") is False


def test_failed_load_is_cached(monkeypatch):
    calls = []

    def broken():
        calls.append(1)
        raise OSError("no file")

    monkeypatch.setitem(tokens._loaders, tokens.OFFLINE_ENCODING, broken)
    for _ in range(5):
        tokens.count_tokens("hello")
    assert len(calls) == 1


def test_thread_safe_single_load(monkeypatch):
    calls = []
    real = tokens._loaders[tokens.OFFLINE_ENCODING]

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setitem(tokens._loaders, tokens.OFFLINE_ENCODING, counting)
    results = []
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        results.append(tokens.count_tokens("hello world"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [2] * 8 and len(calls) == 1
