"""The engine end to end over real tiny models (SmolLM2 135M, Gemma 3 270M) behind llama-cpp-python's
OpenAI-compatible server: text mode, native tool calls (with the GGUF's own chat template and with
``chatml-function-calling``), streaming and not.

A 135M model answers anything, so these tests assert only what the engine guarantees with any model: a run
neither raises nor hangs, makes a bounded number of LLM calls, ends in a readable answer or a clear stop
reason, sends every parse failure back to the model, and sends only requests the server accepts (no HTTP
5xx). Every request goes through a counting proxy (``tests/realmodels.py``) that records it, caps
``max_tokens`` to keep generation short, and can answer one request itself so that a test does not depend
on what the model happens to say.

Run with ``pytest -m realmodel tests/test_real_server.py``; the server's interpreter comes from
``TOOL_HUB_LLAMA_PYTHON`` (tests skip, saying so, when there is none).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.events import AnswerEvent, ErrorEvent
from chatgpt_tool_hub.tools import tool

from realmodels import CHATML_FC, TEMPLATE, CountingProxy, LlamaServers, has_setting, server_kwargs

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(600)]  # a loaded 2-core machine, Gemma: minutes

# TOOL_HUB_REAL_MODELS=smollm2 runs just that one (CI does: the 270M model is three times slower on 2 cores)
MODELS = tuple(m.strip() for m in os.environ.get("TOOL_HUB_REAL_MODELS", "smollm2,gemma3").split(",")
               if m.strip() in ("smollm2", "gemma3"))
THINK_DEPTH = 3
MAX_PARSE_RETRIES = 2
MAX_LLM_CALLS = THINK_DEPTH + MAX_PARSE_RETRIES + 2
STOP_REASONS = {"answer", "think_depth", "parse_error", "budget"}
QUESTION = "What is 37 times 41? Use the multiply tool."
# a reply the parser rejects: an action without its input
MALFORMED = "Thought: Do I need to use a tool? Yes\nAction: multiply"


@tool(name="multiply", description="Multiply two numbers: a times b.")
def multiply(a: float, b: float) -> str:
    """Multiply a by b.

    Args:
        a: the first number
        b: the second number
    """
    product = float(a) * float(b)
    return str(int(product)) if product.is_integer() else str(product)


@tool(name="project-codename", description="Look up the secret code name of a project.")
def project_codename(project: str) -> str:
    """The code name of a project.

    Args:
        project: the project's name
    """
    return f"The code name of project {project} is BLUE-HERON-7."


# ---- fixtures and helpers ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def llama_servers(tmp_path_factory) -> Iterator[LlamaServers]:
    """One llama-cpp-python server per (model, chat format) for the whole session, killed at its end."""
    servers = LlamaServers(tmp_path_factory.mktemp("llama-servers"))
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture
def proxy_for(llama_servers):
    """``proxy_for(model, chat_format)``: a fresh counting proxy in front of that model's server."""
    proxies: list[CountingProxy] = []

    def make(model: str, chat_format: str = TEMPLATE) -> CountingProxy:
        proxy = CountingProxy(llama_servers.get(model, chat_format).root)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def make_app(proxy: CountingProxy, tool_calling: str, **settings: Any) -> Any:
    return AppFactory().create_app(
        tools_list=[multiply, project_codename], no_default=True, llm_api_base_url=proxy.url, model_name="x",
        tool_calling=tool_calling, think_depth=THINK_DEPTH, max_parse_retries=MAX_PARSE_RETRIES,
        request_timeout=240, max_retries=1, temperature=0, **settings)


def ask(app: Any, question: str, stream: bool) -> tuple[str, str, list[str], bool]:
    """Run ``question``: (output, stopped_by, the feedback of each parse failure, whether the last one ended
    the run, so was never sent back)."""
    if not stream:
        result = app.run(question)
        feedback = [f.feedback for f in result.parse_failures]
        return result.output, result.stopped_by, feedback, result.stopped_by == "parse_error"
    events = list(app.stream(question))
    answers = [e for e in events if isinstance(e, AnswerEvent) and e.depth == 0]
    assert answers, f"the stream ended without an answer event: {[e.kind for e in events]}"
    feedback = [e.message for e in events if isinstance(e, ErrorEvent) and e.error_type == "OutputParserError"]
    return answers[-1].text, answers[-1].stopped_by, feedback, answers[-1].stopped_by == "parse_error"


def readable(text: str) -> bool:
    """Non-empty, and no control characters besides line breaks and tabs."""
    return bool(text.strip()) and all(ch.isprintable() or ch in "\n\r\t" for ch in text)


def fed_back(proxy: CountingProxy, feedback: str) -> bool:
    """Whether a later request sent ``feedback`` to the model as a message."""
    return any(feedback in str(m.get("content") or "") for e in proxy.chats for m in e.messages
               if m.get("role") in ("user", "system", "tool"))


def check_run(proxy: CountingProxy, output: str, stopped_by: str, feedback: list[str], last_kept: bool) -> None:
    """What the engine guarantees with any model."""
    errors = [(e.status, e.error[:300]) for e in proxy.chats if e.status >= 500]
    assert not errors, f"the server refused a request: {errors}"
    assert 1 <= proxy.calls <= MAX_LLM_CALLS, f"{proxy.calls} LLM calls"
    assert stopped_by in STOP_REASONS, stopped_by
    if stopped_by == "answer":
        assert readable(output), repr(output)
    sent_back = feedback[:-1] if last_kept else feedback
    missing = [f for f in sent_back if not fed_back(proxy, f)]
    assert not missing, f"parse failures not sent back to the model: {missing}"


# ---- text mode -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_text_mode(proxy_for, model, stream):
    proxy = proxy_for(model, TEMPLATE)
    app = make_app(proxy, "text")
    try:
        check_run(proxy, *ask(app, QUESTION, stream))
    finally:
        app.close()


@pytest.mark.parametrize("constrained", ["off", "on"])
@pytest.mark.parametrize("model", MODELS)
def test_text_mode_constrained_decoding(proxy_for, model, constrained):
    if not has_setting("constrained_decoding"):
        pytest.skip("this engine has no constrained_decoding setting")
    proxy = proxy_for(model, TEMPLATE)
    app = make_app(proxy, "text", **server_kwargs(constrained_decoding=constrained))
    try:
        check_run(proxy, *ask(app, "What is the code name of project Falcon?", stream=False))
    finally:
        app.close()
    formats = [e.body.get("response_format") for e in proxy.chats]
    if constrained == "on":
        assert formats[0], "constrained_decoding=on sent no response_format"
    else:
        assert not any(formats), formats


def test_a_parse_failure_goes_back_to_the_real_model(proxy_for):
    """The first reply (made up by the proxy) breaks the protocol; the next request, to the real server,
    carries the parser's feedback, and the run still ends well."""
    proxy = proxy_for("smollm2", TEMPLATE)
    proxy.injections.append(lambda body: {"content": MALFORMED})
    app = make_app(proxy, "text", **server_kwargs(constrained_decoding="off"))
    try:
        result = app.run(QUESTION)
    finally:
        app.close()
    assert result.parse_failures and result.parse_failures[0].llm_output.strip() == MALFORMED
    feedback = result.parse_failures[0].feedback
    second = proxy.chats[1]
    assert not second.injected and second.status == 200
    assert any(m.get("role") == "user" and feedback in str(m.get("content")) for m in second.messages)
    check_run(proxy, result.output, result.stopped_by, [f.feedback for f in result.parse_failures],
              result.stopped_by == "parse_error")


# ---- native tool calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("chat_format", [TEMPLATE, CHATML_FC])
@pytest.mark.parametrize("model", MODELS)
def test_native_mode(proxy_for, model, chat_format, stream):
    proxy = proxy_for(model, chat_format)
    app = make_app(proxy, "native")
    try:
        check_run(proxy, *ask(app, QUESTION, stream))
    finally:
        app.close()
    assert proxy.chats[0].body.get("tools"), "native mode sent no tools"


@pytest.mark.parametrize("llm_server", ["auto", "llama-cpp-python"])
@pytest.mark.parametrize("model", MODELS)
def test_a_tool_call_turn_goes_back_to_the_real_server(proxy_for, model, llm_server):
    """An assistant turn that holds a tool call (and no text) goes back to llama-cpp-python's
    ``chatml-function-calling`` server without an HTTP 500. The first reply is a tool call made up by the
    proxy, so that the test does not depend on the tiny model choosing to call a tool."""
    if llm_server != "auto" and not has_setting("llm_server"):
        pytest.skip("this engine has no llm_server setting")
    proxy = proxy_for(model, CHATML_FC)
    proxy.injections.append(lambda body: {"tool_calls": [{"name": "multiply", "arguments": {"a": 37, "b": 41}}]})
    app = make_app(proxy, "native", **server_kwargs(llm_server=llm_server))
    try:
        result = app.run(QUESTION)
    except Exception as err:  # noqa: BLE001 - say what the server answered
        refused = [(e.status, e.error[:500]) for e in proxy.chats if e.status >= 400]
        pytest.fail(f"the run raised {type(err).__name__}: {err}; the server answered {refused}")
    finally:
        app.close()
    assert [(s.tool, s.observation) for s in result.steps[:1]] == [("multiply", "1517")]
    turn = next(m for m in proxy.chats[1].messages if m.get("role") == "assistant")
    assert turn.get("tool_calls"), turn
    second = proxy.chats[1]
    assert second.status == 200, f"the server answered {second.status}: {second.error[:500]}"
    check_run(proxy, result.output, result.stopped_by, [f.feedback for f in result.parse_failures],
              result.stopped_by == "parse_error")
