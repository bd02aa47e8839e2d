"""The first answer: budgets checked by an upper bound until they may be reached (no tokenizer loaded for a
short question), the same messages and tool lines kept as an exact count keeps, and one TLS context for the
LLM clients of every app."""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import chatgpt_tool_hub
from chatgpt_tool_hub.engine import memory, prompts
from chatgpt_tool_hub.engine.memory import ConversationMemory, trim_to_budget
from chatgpt_tool_hub.llm import tokens
from chatgpt_tool_hub.tools import Tool

TEXTS = [
    "hi", "Hello, how are you today?", "1,2,3,4,5,6,7,8,9" * 20, "!@#$%^&*()" * 30, "a b c d e f g" * 30,
    json.dumps({"a": [1, 2, 3], "b": "x,y", "c": {"d": None}}) * 20, "def f(x):\n    return x ** 2\n" * 30,
    "今天北京的天气怎么样？请帮我查一下明天上海的天气预报。" * 10, "😀🎉👍" * 30,
    "Ünïcödé ñ é ß " * 40,
    "a\ud800b lone surrogate", "\n\n\t  \r\n" * 50, "x" * 5000, "0123456789" * 300,
]


pytestmark = pytest.mark.usefixtures("fresh_token_cache")  # tests/token_fixtures.py (no_tiktoken is there too)


def _random_text(rng: random.Random) -> str:
    alphabet = "abc xyz,.;:!?0123456789{}[]\"'\n\t中文字ÄÖü😀\u200b"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))


@pytest.mark.parametrize("model", [None, "gpt-4o-mini", "gpt-3.5-turbo", "llama3.1"])
def test_the_bound_is_never_below_the_count(model):
    rng = random.Random(7)
    for text in [*TEXTS, *(_random_text(rng) for _ in range(300))]:
        assert tokens.token_upper_bound(text) >= tokens.count_tokens(text, model), text[:40]


def test_the_bound_is_never_below_the_heuristic_count(no_tiktoken):
    rng = random.Random(11)
    for text in [*TEXTS, *(_random_text(rng) for _ in range(300))]:
        assert tokens.token_upper_bound(text) >= tokens.count_tokens(text), text[:40]


def test_the_bound_of_messages_is_never_below_their_count():
    messages = [
        {"role": "user", "content": "1,2,3,4,5" * 40, "name": "alice"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": [1,2,3]}'}}]},
        {"role": "user", "content": [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": {}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "今天" * 50},
    ]
    for i in range(len(messages)):
        assert tokens.message_token_bound(messages[i:i + 1]) >= tokens.count_message_tokens(messages[i:i + 1])
    assert tokens.message_token_bound(messages) >= tokens.count_message_tokens(messages)


def _lines(texts):
    return [[text, None] for text in texts]  # the tool list's entries: a line, its count once made


def test_a_budget_check_agrees_with_the_exact_count_at_every_budget():
    rng = random.Random(3)
    for _ in range(60):
        texts = [_random_text(rng) for _ in range(rng.randint(0, 5))]
        exact = sum(tokens.count_tokens(t) for t in texts)
        for budget in (0, exact - 1, exact, exact + 1, 4 * exact, sum(map(tokens.token_upper_bound, texts))):
            assert prompts._fits(_lines(texts), budget) == (exact <= budget)


def test_a_text_clearly_within_its_budget_loads_no_encoding():
    assert prompts._fits(_lines(["hello there", "a short question"]), 2000)
    assert tokens._encodings == {}  # nothing was loaded
    assert not prompts._fits(_lines(["hello " * 300]), 200)  # the bound is over: counted
    assert tokens.OFFLINE_ENCODING in tokens._encodings


# ---- the same messages kept as with exact counts ---------------------------------------------------------------


def _exact_kept(messages, max_tokens):
    """What the history keeps when every message is counted exactly (the reference)."""
    if max_tokens <= 0:
        return []
    start, used = len(messages), 0
    for i in range(len(messages) - 1, -1, -1):
        cost = tokens.count_message_tokens([messages[i]])
        if used + cost > max_tokens:
            break
        used, start = used + cost, i
    while start < len(messages) and messages[start]["role"] == "assistant":
        start += 1
    return list(messages[start:])


def _history(rng: random.Random, turns: int) -> list[dict]:
    return [{"role": role, "content": _random_text(rng)} for _ in range(turns) for role in ("user", "assistant")]


def test_trimming_keeps_what_an_exact_count_keeps():
    rng = random.Random(5)
    for _ in range(40):
        history = _history(rng, rng.randint(0, 8))
        total = tokens.count_message_tokens(history) if history else 0
        for budget in (0, 10, total // 3, total // 2, total - 1, total, total + 50, 10 * total):
            assert trim_to_budget(history, budget) == _exact_kept(history, budget)


def test_the_memory_keeps_what_an_exact_count_keeps():
    rng = random.Random(9)
    for budget in (40, 150, 400, 5000):
        mem = ConversationMemory(max_tokens=budget)
        stored: list[dict] = []
        for _ in range(12):
            user, answer = _random_text(rng), _random_text(rng)
            mem.add_turn(user, answer)
            stored += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
            stored = _exact_kept(stored, budget * 2) or stored[-2:]
            assert mem.messages() == _exact_kept(stored, budget)
        assert mem.pop_turn() == stored[-2:]
        assert mem.messages() == _exact_kept(stored[:-2], budget)


def test_a_short_conversation_in_memory_counts_nothing():
    cached = len(memory._cache)
    mem = ConversationMemory(max_tokens=2000)
    mem.add_turn("hi", "Hello! How can I help?")
    assert len(mem.messages()) == 2
    assert tokens._encodings == {} and len(memory._cache) == cached  # nothing counted


# ---- the tool list: the same lines as with exact counts --------------------------------------------------------


def _tools(count: int, words: int) -> list[Tool]:
    return [Tool.from_function({"name": f"tool-{i}", "description": " ".join(["word"] * words) + f" number {i}",
                                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
                               lambda q: q) for i in range(count)]


@pytest.mark.parametrize("count,words,budget", [(5, 20, 3000), (30, 150, 3000), (30, 150, 800), (8, 400, 100)])
def test_the_tool_block_is_what_exact_counts_give(count, words, budget):
    tools = _tools(count, words)
    step = next((s for s in prompts._STEPS
                 if sum(tokens.count_tokens(prompts.tool_line(t, *s)) for t in tools) <= budget), prompts._STEPS[-1])
    assert prompts.tool_block(tools, budget) == "\n".join(prompts.tool_line(t, *step) for t in tools)


def test_a_tool_block_well_within_its_budget_loads_no_encoding():
    tools = _tools(5, 20)
    block = prompts.tool_block(tools, 3000)
    assert "tool-4" in block and tokens._encodings == {}


# ---- a process's first answer through the real client -----------------------------------------------------------


def test_a_first_short_question_does_not_import_tiktoken(chat_server, tmp_path):
    chat_server.replies = ["Thought: Do I need to use a tool? No\nAI: Hello!", "AI: again"]
    code = ("import sys\n"
            "from chatgpt_tool_hub.apps import AppFactory\n"
            f"app = AppFactory().create_app(llm_api_base_url={chat_server.url!r}, llm_api_key='k', "
            "model_name='gpt-4o-mini')\n"
            "assert app.ask('hi') == 'Hello!'\n"
            "assert app.ask('and now?') == 'again'\n"  # the first turn is in memory now
            "print(sorted(m for m in ('tiktoken', 'tiktoken_ext') if m in sys.modules))\n")
    here = str(Path(chatgpt_tool_hub.__file__).parents[1])  # this package, wherever the child starts
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert len(chat_server.bodies) == 2
    assert [m["content"] for m in chat_server.bodies[1]["messages"][1:]] == ["hi", "Hello!", "and now?"]


# ---- per app: one TLS context ---------------------------------------------------------------------------------


def test_the_llm_clients_of_many_apps_share_one_tls_context(chat_server, monkeypatch):
    httpcore = pytest.importorskip("httpcore2")
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.llm import http_pools

    made = []
    original = httpcore.default_ssl_context

    def counted(*args, **kwargs):
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(httpcore, "default_ssl_context", counted)
    monkeypatch.setattr(http_pools, "_TLS", {})
    chat_server.replies = ["AI: one", "AI: two", "AI: three", "AI: four"]
    factory = AppFactory()
    apps = [factory.create_app(llm_api_base_url=chat_server.url, llm_api_key="k", no_default=True) for _ in range(3)]
    assert [app.ask("hi") for app in apps] == ["one", "two", "three"]
    assert len(made) == 1
    del apps[0]  # a dropped app closes its own connections, not the others'
    gc.collect()
    assert apps[1].ask("hi") == "four"
