"""OpenAICompatibleLLM end to end through the real openai package against ChatServer."""

from __future__ import annotations

import email.utils
import logging
import subprocess
import sys
import threading
import time

import pytest

from chatgpt_tool_hub.errors import ConfigError, LLMAuthError, LLMConnectionError, LLMError
from chatgpt_tool_hub.llm import LLMResponse, StreamChunk, Usage, collect_stream
from chatgpt_tool_hub.llm import openai_client as oc
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM, parse_retry_after
from chatgpt_tool_hub.llm.stops import StopCutter, cut_at_stop

from chat_server import ChatServer  # tests/ is on sys.path (rootdir conftest); the fixture comes from conftest.py

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello"}]
SECRET = "sk-test-5ecr3t-DO-NOT-LEAK-0123456789"


@pytest.fixture
def sleeps(monkeypatch):
    """Record every backoff sleep (and really sleep, it is tiny)."""
    recorded: list[float] = []

    def fake_sleep(seconds: float) -> None:
        recorded.append(seconds)
        time.sleep(seconds)

    monkeypatch.setattr(oc, "_sleep", fake_sleep)
    return recorded


def make(server: ChatServer, **kw) -> OpenAICompatibleLLM:
    kw.setdefault("api_key", SECRET)
    kw.setdefault("base_url", server.url)
    kw.setdefault("timeout", 2)
    kw.setdefault("max_retries", 2)
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("backoff_max", 0.05)
    return OpenAICompatibleLLM(kw.pop("model_name", "test-model"), **kw)


# --- plain completion ------------------------------------------------------------------


def test_complete_returns_text_and_server_usage(chat_server):
    chat_server.replies = ["Hello there"]
    resp = make(chat_server).complete(MSGS)
    assert isinstance(resp, LLMResponse)
    assert resp.text == "Hello there"
    assert resp.finish_reason == "stop"
    assert resp.model == "test-model"
    assert resp.usage.estimated is False
    assert resp.usage.completion_tokens == 2 and resp.usage.prompt_tokens > 0
    body = chat_server.requests[0]["json"]
    assert body["messages"] == MSGS and body["model"] == "test-model" and body["temperature"] == 0.0
    assert "stop" not in body
    assert chat_server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert chat_server.requests[0]["path"] == "/v1/chat/completions"


def test_callable_reply_and_temperature(chat_server):
    chat_server.replies = [lambda body: f"you said {body['messages'][-1]['content']}"]
    resp = make(chat_server, temperature=0.7).complete(MSGS)
    assert resp.text == "you said Say hello"
    assert chat_server.bodies[0]["temperature"] == 0.7


def test_stop_sequences_are_sent_and_applied(chat_server):
    chat_server.replies = ["Thought: go\nObservation: invented"]
    resp = make(chat_server).complete(MSGS, stop=["\nObservation:", "", "\nObservation:"])
    assert chat_server.bodies[0]["stop"] == ["\nObservation:"]  # blanks and duplicates dropped
    assert resp.text == "Thought: go"


def test_more_than_four_stops_sends_four_and_cuts_the_rest_locally(chat_server):
    chat_server.replies = ["alpha beta GAMMA delta"]
    resp = make(chat_server).complete(MSGS, stop=["s1", "s2", "s3", "s4", "GAMMA"])
    assert chat_server.bodies[0]["stop"] == ["s1", "s2", "s3", "s4"]
    assert resp.text == "alpha beta "
    assert resp.finish_reason == "stop"


def test_missing_usage_is_estimated(chat_server):
    chat_server.faults.append(("no_usage",))
    chat_server.replies = ["some words here"]
    resp = make(chat_server).complete(MSGS)
    assert resp.text == "some words here"
    assert resp.usage.estimated is True
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0


def test_openai_module_not_imported_at_import_time():
    code = ("import sys, chatgpt_tool_hub.llm.openai_client as m; "
            "m.OpenAICompatibleLLM('x', api_key='k', base_url='http://127.0.0.1:9/v1'); "
            "print('openai' in sys.modules, 'tiktoken' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False False"


# --- streaming --------------------------------------------------------------------------


def test_stream_yields_deltas_then_final_usage(chat_server):
    chat_server.replies = ["one two three"]
    chunks = list(make(chat_server).stream(MSGS))
    assert all(isinstance(c, StreamChunk) for c in chunks)
    assert "".join(c.text for c in chunks) == "one two three"
    assert len([c for c in chunks if c.text]) >= 3
    assert all(c.finish_reason is None and c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == "stop"
    assert last.usage == Usage(prompt_tokens=last.usage.prompt_tokens, completion_tokens=3, estimated=False)
    body = chat_server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_stream_without_usage_estimates(chat_server):
    chat_server.faults.append(("no_usage",))
    chat_server.replies = ["one two three"]
    resp = collect_stream(make(chat_server).stream(MSGS))
    assert resp.text == "one two three"
    assert resp.usage.estimated is True and resp.usage.completion_tokens > 0


def test_stream_stop_cut_across_chunks(chat_server):
    chat_server.replies = ["Action: search\nAction Input: x\nObservation: made up"]
    resp = collect_stream(make(chat_server).stream(MSGS, stop=["s1", "s2", "s3", "s4", "\nObservation:"]))
    assert resp.text == "Action: search\nAction Input: x"
    assert resp.finish_reason == "stop"


def test_stream_retries_before_first_chunk(chat_server, sleeps):
    chat_server.faults.extend([("status", 503), ("disconnect",)])
    chat_server.replies = ["fine"]
    resp = collect_stream(make(chat_server).stream(MSGS))
    assert resp.text == "fine"
    assert len(chat_server.requests) == 3
    # the 503 waits a backoff; the disconnect came on the connection kept alive after the 503, which the
    # HTTP transport sends again at once on a new one (tests/test_llm_stale_connections.py)
    assert len(sleeps) == 1


def test_stream_broken_after_first_chunk_is_not_retried(chat_server):
    chat_server.faults.append(("stream_cut",))
    chat_server.replies = ["first second third"]
    got: list[str] = []
    with pytest.raises(LLMConnectionError, match="not retried"):
        for chunk in make(chat_server).stream(MSGS):
            got.append(chunk.text)
    assert len(chat_server.requests) == 1
    assert "first" in "".join(got)


def test_stream_empty_and_garbage_end_quietly(chat_server):
    llm = make(chat_server)
    chat_server.faults.append(("no_choices",))
    assert collect_stream(llm.stream(MSGS)).text == ""
    chat_server.faults.append(("garbage",))
    resp = collect_stream(llm.stream(MSGS))
    assert resp.text == "" and resp.finish_reason in ("empty", "error")


# --- retries ------------------------------------------------------------------------------


def test_429_retry_after_then_success(chat_server, sleeps):
    chat_server.faults.append(("status", 429, {"Retry-After": "0.2"}))
    chat_server.replies = ["after the wait"]
    started = time.monotonic()
    resp = make(chat_server, backoff_max=1.0).complete(MSGS)
    assert resp.text == "after the wait"
    assert len(chat_server.requests) == 2
    assert sleeps == [pytest.approx(0.2)]
    assert time.monotonic() - started >= 0.2


def test_retry_after_ms_and_cap(chat_server, sleeps):
    chat_server.faults.append(("status", 429, {"retry-after-ms": "30"}))
    chat_server.faults.append(("status", 429, {"Retry-After": "3600"}))
    resp = make(chat_server, backoff_max=0.05).complete(MSGS)
    assert resp.text == "OK"
    assert sleeps == [pytest.approx(0.03), pytest.approx(0.05)]  # the hour is capped by backoff_max


def test_500_then_success_with_jittered_backoff(chat_server, sleeps):
    chat_server.faults.append(("status", 500))
    resp = make(chat_server, backoff_base=0.02).complete(MSGS)
    assert resp.text == "OK"
    assert len(chat_server.requests) == 2
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 0.02


def test_timeouts_exhaust_retries(chat_server, sleeps):
    chat_server.faults.extend([("sleep", 1.0)] * 3)
    llm = make(chat_server, timeout=0.3, max_retries=2)
    with pytest.raises(LLMConnectionError) as info:
        llm.complete(MSGS)
    assert len(chat_server.requests) == 3
    assert "3 attempts" in str(info.value) and "timeout" in str(info.value)
    assert "LLM_API_BASE_URL" in str(info.value)
    assert len(sleeps) == 2  # each attempt timed out (the server would have answered after 1 s)


def test_exhausted_5xx_names_last_status(chat_server, sleeps):
    chat_server.faults.extend([("status", 502)] * 2)
    with pytest.raises(LLMConnectionError, match=r"2 attempts.*HTTP 502"):
        make(chat_server, max_retries=1).complete(MSGS)
    assert len(chat_server.requests) == 2


def test_connection_refused_is_connection_error(sleeps):
    with ChatServer() as server:
        url = server.url
    llm = OpenAICompatibleLLM("m", api_key=SECRET, base_url=url, timeout=1, max_retries=1, backoff_base=0.01)
    with pytest.raises(LLMConnectionError, match="2 attempts"):
        llm.complete(MSGS)


def test_backoff_grows_and_is_capped():
    llm = OpenAICompatibleLLM("m", api_key=None, base_url="http://127.0.0.1:9/v1", backoff_base=1, backoff_max=3)
    for attempt in range(6):
        assert 0 <= llm._backoff(attempt, None) <= min(3, 2 ** attempt)
    assert llm._backoff(0, 10) == 3
    assert llm._backoff(0, 0.5) == 0.5


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": future}) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after({"retry-after": past}) == 0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


# --- errors that are not retried ----------------------------------------------------------


def test_401_fails_at_once_naming_the_key_setting(chat_server, sleeps):
    chat_server.faults.append(("status", 401))
    with pytest.raises(LLMAuthError, match="LLM_API_KEY"):
        make(chat_server).complete(MSGS)
    assert len(chat_server.requests) == 1 and sleeps == []


def test_403_names_the_key_setting(chat_server):
    chat_server.faults.append(("status", 403))
    with pytest.raises(LLMAuthError, match="llm_api_key"):
        make(chat_server).complete(MSGS)


def test_404_names_model_and_base_url(chat_server):
    chat_server.faults.append(("status", 404, {}, "The model `nope` does not exist"))
    with pytest.raises(LLMAuthError) as info:
        make(chat_server, model_name="nope").complete(MSGS)
    text = str(info.value)
    assert "MODEL_NAME" in text and "LLM_API_BASE_URL" in text and "does not exist" in text
    assert len(chat_server.requests) == 1


def test_wrong_path_is_404(chat_server):
    llm = make(chat_server, base_url=chat_server.root + "/wrong")
    with pytest.raises(LLMAuthError, match="MODEL_NAME"):
        llm.complete(MSGS)


def test_400_is_llm_error_with_server_message(chat_server):
    chat_server.faults.append(("status", 400, {}, "This model's maximum context length is 8 tokens"))
    with pytest.raises(LLMError, match="maximum context length") as info:
        make(chat_server).complete(MSGS)
    assert not isinstance(info.value, (LLMAuthError, LLMConnectionError))
    assert len(chat_server.requests) == 1


def test_400_on_stream_options_drops_it_and_remembers(chat_server):
    chat_server.faults.append(("status", 400, {}, "Unrecognized request argument supplied: 'stream_options'"))
    chat_server.replies = ["streamed anyway", "again"]
    llm = make(chat_server)
    resp = collect_stream(llm.stream(MSGS))
    assert resp.text == "streamed anyway" and resp.usage.estimated is True
    assert "stream_options" in chat_server.bodies[0] and "stream_options" not in chat_server.bodies[1]
    collect_stream(llm.stream(MSGS))
    assert "stream_options" not in chat_server.bodies[2]


def test_400_on_unsupported_temperature_drops_it(chat_server):
    chat_server.faults.append(("status", 400, {}, "Unsupported value: 'temperature' does not support 0 with "
                                                  "this model. Only the default (1) value is supported."))
    assert make(chat_server).complete(MSGS).text == "OK"
    assert "temperature" in chat_server.bodies[0] and "temperature" not in chat_server.bodies[1]


def test_400_naming_a_param_without_saying_unsupported_is_an_error(chat_server):
    chat_server.faults.append(("status", 400, {}, "'temperature' must be between 0 and 2"))
    with pytest.raises(LLMError, match="between 0 and 2"):
        make(chat_server, temperature=5).complete(MSGS)
    assert len(chat_server.requests) == 1


# --- malformed 200s -------------------------------------------------------------------------


@pytest.mark.parametrize("fault,reasons", [
    ("no_choices", {"empty"}),
    ("null_content", {"empty"}),
    ("garbage", {"error"}),
])
def test_malformed_200_gives_empty_text(chat_server, fault, reasons):
    chat_server.faults.append((fault,))
    resp = make(chat_server).complete(MSGS)
    assert resp.text == ""
    assert resp.finish_reason in reasons
    assert len(chat_server.requests) == 1


# --- keys, URLs, Azure, proxy -----------------------------------------------------------------


def test_local_server_needs_no_key(chat_server):
    llm = OpenAICompatibleLLM("llama3", api_key="", base_url=chat_server.url, timeout=2)
    assert llm.complete(MSGS).text == "OK"
    assert chat_server.requests[0]["headers"]["authorization"] == f"Bearer {oc.NO_KEY_PLACEHOLDER}"


def test_openai_url_without_key_is_config_error():
    llm = OpenAICompatibleLLM("gpt-4o-mini", api_key=None)
    with pytest.raises(ConfigError, match="LLM_API_KEY") as info:
        llm.complete(MSGS)
    assert info.value.key == "llm_api_key"


def test_server_key_check(chat_server):
    chat_server.api_key = "right-key"
    assert make(chat_server, api_key="right-key").complete(MSGS).text == "OK"
    with pytest.raises(LLMAuthError):
        make(chat_server, api_key="wrong-key").complete(MSGS)


def test_azure_deployment_path(chat_server):
    chat_server.replies = ["from azure", "streamed azure"]
    llm = OpenAICompatibleLLM("gpt-4o", api_key=SECRET, base_url=chat_server.root, deployment_id="my-dep",
                              azure_api_version="2024-10-21", timeout=2)
    assert llm.complete(MSGS).text == "from azure"
    req = chat_server.requests[0]
    assert req["path"] == "/openai/deployments/my-dep/chat/completions"
    assert req["query"]["api-version"] == "2024-10-21"
    assert req["headers"]["api-key"] == SECRET
    assert collect_stream(llm.stream(MSGS)).text == "streamed azure"
    assert chat_server.requests[1]["path"] == "/openai/deployments/my-dep/chat/completions"


def test_azure_404_mentions_deployment(chat_server):
    chat_server.faults.append(("status", 404))
    llm = OpenAICompatibleLLM("gpt-4o", api_key=SECRET, base_url=chat_server.root, deployment_id="dep", timeout=2)
    with pytest.raises(LLMAuthError, match="deployment"):
        llm.complete(MSGS)


def test_blank_settings_count_as_unset(chat_server):
    llm = OpenAICompatibleLLM("m", api_key="", base_url=chat_server.url, proxy="", deployment_id="", timeout=2)
    assert llm.proxy is None and llm.deployment_id is None and not llm.is_azure
    assert llm.complete(MSGS).text == "OK"


def test_proxy_builds_an_httpx2_client():
    import httpx2

    llm = OpenAICompatibleLLM("m", api_key=SECRET, base_url="http://127.0.0.1:9/v1",
                              proxy="http://127.0.0.1:3128")
    client = llm._get_client()
    assert isinstance(client._client, httpx2.Client)
    assert llm._get_client() is client  # built once


def test_proxy_is_really_used(chat_server, sleeps):
    with ChatServer() as dead:
        dead_url = dead.root  # nothing listens there any more
    llm = make(chat_server, proxy=dead_url, max_retries=0)
    with pytest.raises(LLMConnectionError, match="1 attempt"):
        llm.complete(MSGS)
    assert chat_server.requests == []  # the request went to the (dead) proxy, not straight to the server


def test_client_built_once_across_threads(chat_server):
    llm = make(chat_server)
    clients = []
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        clients.append(llm._get_client())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in clients}) == 1


def test_concurrent_completions(chat_server):
    llm = make(chat_server)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(llm.complete(MSGS).text)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["OK"] * 6


# --- secrets -----------------------------------------------------------------------------------


def test_api_key_never_leaks(chat_server, caplog, sleeps):
    loggers = ["", "openai", "openai._base_client", "httpx2", "httpcore2", "httpx", "httpcore", "chatgpt_tool_hub"]
    previous = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    try:
        llm = make(chat_server, max_retries=1)
        texts += [repr(llm), str(llm), repr(vars(llm))]
        chat_server.faults.extend([
            ("status", 401, {}, f"Incorrect API key provided: {SECRET}"),
            ("status", 404, {}, f"no model for key {SECRET}"),
            ("status", 400, {}, f"bad request from {SECRET}"),
            ("status", 500, {}, f"boom {SECRET}"), ("status", 500, {}, f"boom {SECRET}"),
            ("sleep", 1.0), ("sleep", 1.0),
        ])
        for _ in range(3):
            with pytest.raises(LLMError) as info:
                llm.complete(MSGS)
            texts += [str(info.value), repr(info.value), str(info.value.__cause__), repr(info.value.__cause__)]
        with pytest.raises(LLMConnectionError) as info:
            llm.complete(MSGS)
        texts += [str(info.value), repr(info.value), str(info.value.__cause__)]
        llm.timeout = 0.3
        llm._client = None
        with pytest.raises(LLMConnectionError) as info:
            list(llm.stream(MSGS))
        texts += [str(info.value), repr(info.value)]
        chat_server.replies = ["fine"]
        assert llm.complete(MSGS).text == "fine"
        texts.append(repr(llm))
    finally:
        for name, level in previous.items():
            logging.getLogger(name).setLevel(level)
    assert any("chatgpt_tool_hub.llm" == r.name for r in caplog.records)  # logging was really on
    assert any(r.name.startswith(("openai", "httpx2", "httpcore2")) for r in caplog.records)
    assert SECRET not in caplog.text
    for record in caplog.records:
        assert SECRET not in record.getMessage()
    for text in texts:
        assert SECRET not in text
    assert "***" in "".join(texts)  # the server's echo was scrubbed, not dropped


def test_cannot_pickle():
    import pickle

    llm = OpenAICompatibleLLM("m", api_key=SECRET, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(TypeError):
        pickle.dumps(llm)


# --- stop helpers -------------------------------------------------------------------------------


def test_cut_at_stop_earliest_wins():
    assert cut_at_stop("a STOP b END", ["END", "STOP"]) == ("a ", True)
    assert cut_at_stop("abc", None) == ("abc", False)
    assert cut_at_stop("abc", "b") == ("a", True)


@pytest.mark.parametrize("pieces", [["hello wor", "ld\nObs", "ervation: x"], list("hello world\nObservation: x")])
def test_stop_cutter_over_pieces(pieces):
    cutter = StopCutter(["\nObservation:"])
    out = "".join(cutter.feed(p) for p in pieces) + cutter.flush()
    assert out == "hello world" and cutter.stopped


def test_stop_cutter_flushes_held_tail():
    cutter = StopCutter(["XYZ"])
    out = "".join(cutter.feed(p) for p in ["ab", "cX", "Y"]) + cutter.flush()
    assert out == "abcXY" and not cutter.stopped


def test_a_key_deep_in_the_exception_chain_drops_the_chain():
    from chatgpt_tool_hub.llm.openai_client import _chain_mentions

    try:
        try:
            raise ValueError("Illegal header value b'Bearer sk-deep-secret'")
        except ValueError as inner:
            raise RuntimeError("transport failed") from inner
    except RuntimeError as outer:
        assert _chain_mentions(outer, "sk-deep-secret")
        assert not _chain_mentions(outer, "sk-other")


def test_text_with_lone_surrogates_is_sent_repaired_not_refused(chat_server):
    """A question or an observation decoded with surrogateescape holds lone surrogates; the body is UTF-8."""
    chat_server.replies = ["fine", "fine"]
    llm = make(chat_server, llm_server="vllm")  # a server that takes lists of text parts
    resp = llm.complete([{"role": "user", "content": "\x00\ud800 hi \ud83d\ude00"}])
    assert resp.text == "fine"
    assert chat_server.bodies[0]["messages"][0]["content"] == "\x00\ufffd hi \U0001f600"  # a pair is its emoji
    parts = [{"type": "text", "text": "see \udcff"}]
    assert llm.complete([{"role": "user", "content": parts}]).text == "fine"
    assert chat_server.bodies[1]["messages"][0]["content"][0]["text"] == "see \ufffd"
    assert parts[0]["text"] == "see \udcff"  # the caller's messages are left as they were
