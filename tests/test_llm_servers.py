"""Every common OpenAI-compatible server, through replicas of the quirks each one documents: the server is
told apart once (setting, URL or GET /models), and the request takes the form that server accepts."""

from __future__ import annotations

import asyncio
import json

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.engine.loop import Engine, EngineSettings
from chatgpt_tool_hub.errors import ConfigError, LLMConnectionError
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from chatgpt_tool_hub.llm.servers import PROFILES, classify, constraint_params, guess_from_url, profile_named
from chatgpt_tool_hub.tools import tool
from tests.chat_server import ChatServer, chat_server  # noqa: F401 - the fixture

CALLS: list = []


@tool(name="multiply", description="Multiply two integers.")
def multiply(a: int, b: int) -> str:
    CALLS.append((a, b))
    return str(a * b)


@pytest.fixture(autouse=True)
def _fresh():
    CALLS.clear()


def make(chat: ChatServer, **kw) -> OpenAICompatibleLLM:
    kw.setdefault("max_retries", 0)
    return OpenAICompatibleLLM("m", api_key=None, base_url=chat.url, timeout=5, **kw)


# what each server's GET /models looks like (the fields that tell them apart)
MODEL_LISTS = {
    "llama.cpp": ({"object": "list", "models": [{"name": "m"}],
                   "data": [{"id": "m", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx_train": 8192}}]},
                  {}),
    "llama-cpp-python": ({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "me",
                                                      "permissions": []}]}, {}),
    "vllm": ({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm", "root": "m",
                                          "max_model_len": 4096}]}, {}),
    "ollama": ({"object": "list", "data": [{"id": "llama3.1:latest", "object": "model", "owned_by": "library"}]},
               {}),
    "lmstudio": ({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "organization_owner"}]},
                 {}),
    "tgi": ({"object": "list", "data": [{"id": "org/m", "object": "model", "owned_by": "org/m"}]},
            {"x-compute-type": "gpu+optimized"}),
    "litellm": ({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "openai"}]},
                {"x-litellm-version": "1.50.0"}),
    "generic": ({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}, {}),
}


@pytest.mark.parametrize("name", sorted(MODEL_LISTS))
def test_each_server_is_told_apart_by_its_model_list(name):
    body, headers = MODEL_LISTS[name]
    assert classify(body, headers).name == name


def test_the_url_tells_openai_azure_and_the_default_ports_without_asking():
    assert guess_from_url(None).name == "openai"
    assert guess_from_url("https://api.openai.com/v1").name == "openai"
    assert guess_from_url("https://x.openai.azure.com").name == "azure"
    assert guess_from_url("http://127.0.0.1:11434/v1").name == "ollama"
    assert guess_from_url("http://localhost:1234/v1").name == "lmstudio"
    assert guess_from_url("http://127.0.0.1:4000").name == "litellm"
    assert guess_from_url("http://127.0.0.1:8080/v1") is None  # llama.cpp, TGI... the server is asked
    assert guess_from_url("http://127.0.0.1:8080", azure=True).name == "azure"


def test_a_named_server_is_taken_as_named_and_an_unknown_name_says_which_exist():
    assert profile_named("llama-server").name == "llama.cpp"
    assert profile_named("LM-Studio").name == "lmstudio"
    assert profile_named("auto") is None
    with pytest.raises(ConfigError) as info:
        profile_named("koboldcpp")
    assert info.value.key == "llm_server" and "vllm" in str(info.value)


def test_the_server_is_asked_once_per_client_and_copies_share_the_answer(chat_server):
    chat_server.models, chat_server.models_headers = MODEL_LISTS["vllm"]
    llm = make(chat_server)
    assert llm.profile_now().name == "generic"  # not known yet, and nothing asked
    assert chat_server.model_list_requests == 0
    assert llm.server_profile().name == "vllm"
    copy = llm.with_options(temperature=0.5)
    assert copy.server_profile().name == "vllm" and llm.constrains_replies()
    assert chat_server.model_list_requests == 1


def test_a_server_that_cannot_say_is_generic_and_its_requests_fail_nothing():
    llm = OpenAICompatibleLLM("m", api_key=None, base_url="http://127.0.0.1:9/v1", timeout=1, max_retries=0)
    assert llm.server_profile().name == "generic"
    assert not llm.constrains_replies()


# --- llama-cpp-python: the assistant tool-call turn -------------------------------------------------


def _llama_cpp_python(server: ChatServer) -> None:
    """llama-cpp-python's server: its chat templates concatenate ``content`` (HTTP 500 on a null), it refuses
    content given as a list of parts, and its response_format is json_object with a schema."""
    server.models, server.models_headers = MODEL_LISTS["llama-cpp-python"]

    def check(body):
        for message in body.get("messages", []):
            if "content" in message and message["content"] is None:
                return 500, 'can only concatenate str (not "NoneType") to str'
            if isinstance(message.get("content"), list):
                return 422, "messages.content: Input should be a valid string"
        response_format = body.get("response_format")
        if response_format is not None and response_format.get("type") != "json_object":
            return 422, "response_format.type: Input should be 'text' or 'json_object'"
        return None

    server.check = check


def test_native_tool_calls_go_back_to_llama_cpp_python_without_a_500(chat_server):
    _llama_cpp_python(chat_server)
    chat_server.replies = [{"tool_calls": [{"name": "multiply", "arguments": {"a": 37, "b": 41}}], "content": None},
                           "37 times 41 is 1517."]
    result = Engine(make(chat_server), [multiply], EngineSettings(tool_calling="native")).run("37*41?")
    assert result.output == "37 times 41 is 1517." and CALLS == [(37, 41)]
    turn = chat_server.bodies[1]["messages"][-2]
    assert turn["role"] == "assistant" and turn["content"] == "" and turn["tool_calls"]


def test_openai_keeps_its_own_null_content_and_text_part_lists(chat_server):
    llm = make(chat_server, llm_server="openai")
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c", "content": "r"}]
    llm.complete(messages)
    assert chat_server.bodies[0]["messages"] == messages


def test_text_parts_go_as_one_string_to_a_server_that_refuses_lists(chat_server):
    _llama_cpp_python(chat_server)
    llm = make(chat_server, llm_server="llama-cpp-python")
    parts = [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]
    assert llm.complete([{"role": "user", "content": parts}]).text == "OK"
    assert chat_server.bodies[0]["messages"][0]["content"] == "one two"


# --- the server's reason is kept --------------------------------------------------------------------


@pytest.mark.parametrize("plain", [False, True])
def test_a_5xx_error_carries_the_servers_own_message(chat_server, plain):
    chat_server.check = lambda body: (500, "Conversation roles must alternate user/assistant/user/assistant")
    chat_server.plain_errors = plain
    with pytest.raises(LLMConnectionError) as info:
        make(chat_server, max_retries=1, backoff_base=0.0).complete([{"role": "user", "content": "q"}])
    text = str(info.value)
    assert "Conversation roles must alternate" in text and "HTTP 500" in text
    assert "proxy" not in text.lower()  # the URL and proxy are not the cause: the server answered
    assert "llm_server" in text


# --- constrained decoding ---------------------------------------------------------------------------

DIALECTS = {  # how each server takes a JSON schema for the reply
    "llama.cpp": lambda rf: rf["type"] == "json_object" and "anyOf" in rf["schema"],
    "llama-cpp-python": lambda rf: rf["type"] == "json_object" and "anyOf" in rf["schema"],
    "vllm": lambda rf: rf["type"] == "json_schema" and "anyOf" in rf["json_schema"]["schema"],
    "ollama": lambda rf: rf["type"] == "json_schema" and "anyOf" in rf["json_schema"]["schema"],
    "lmstudio": lambda rf: rf["type"] == "json_schema" and "anyOf" in rf["json_schema"]["schema"],
    "tgi": lambda rf: rf["type"] == "json_object" and "anyOf" in rf["value"],
}


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_local_servers_constrain_each_reply_to_an_action_in_their_own_dialect(chat_server, name):
    chat_server.models, chat_server.models_headers = MODEL_LISTS[name]
    chat_server.check = lambda body: None if DIALECTS[name](body.get("response_format") or {"type": "-"}) else (
        400, f"unexpected response_format {body.get('response_format')!r}")
    chat_server.replies = [
        json.dumps({"thought": "multiply", "action": "multiply", "action_input": {"a": 37, "b": 41}}),
        json.dumps({"thought": "done", "action": "Final Answer", "action_input": "1517"}),
    ]
    result = Engine(make(chat_server), [multiply]).run("What is 37 times 41?")
    assert result.output == "1517" and result.stopped_by == "answer" and CALLS == [(37, 41)]
    system = chat_server.bodies[0]["messages"][0]["content"]
    assert "one JSON object" in system and "Action Input:" not in system
    schema = chat_server.bodies[0]["response_format"]
    options = (schema.get("schema") or schema.get("value") or schema["json_schema"]["schema"])["anyOf"]
    assert [o["properties"]["action"]["const"] for o in options] == ["multiply", "Final Answer"]
    assert options[0]["properties"]["action_input"]["required"] == ["a", "b"]


@pytest.mark.parametrize("name", ["openai", "litellm", "generic"])
def test_auto_leaves_other_servers_unconstrained(chat_server, name):
    llm = make(chat_server, llm_server=name)
    chat_server.replies = ["Thought: Do I need to use a tool? No\nAI: hi"]
    assert Engine(llm, [multiply]).run("hi").output == "hi"
    assert "response_format" not in chat_server.bodies[0]
    assert "Action Input" in chat_server.bodies[0]["messages"][0]["content"]


def test_constrained_decoding_on_and_off_override_auto(chat_server):
    chat_server.replies = [json.dumps({"thought": "t", "action": "Final Answer", "action_input": "hi"}),
                           "Thought: Do I need to use a tool? No\nAI: hi"]
    assert Engine(make(chat_server, constrained_decoding="on"), [multiply]).run("hi").output == "hi"
    assert chat_server.bodies[0]["response_format"]["type"] == "json_schema"  # generic: OpenAI's spelling
    assert Engine(make(chat_server, llm_server="vllm", constrained_decoding="off"), [multiply]).run("hi").output == "hi"
    assert "response_format" not in chat_server.bodies[1]
    with pytest.raises(ConfigError):
        make(chat_server, constrained_decoding="maybe")


def test_a_server_that_refuses_the_constraint_is_asked_again_without_it(chat_server):
    llm = make(chat_server, llm_server="vllm")
    chat_server.faults.append(("status", 400, {}, "Unsupported parameter: 'response_format'"))
    assert llm.with_options(response_schema={"type": "object"}).complete([{"role": "user", "content": "q"}]).text == "OK"
    assert "response_format" in chat_server.bodies[0] and "response_format" not in chat_server.bodies[1]
    assert not llm.constrains_replies()  # and it is not asked for again


def test_the_last_call_at_the_depth_limit_may_only_answer(chat_server):
    chat_server.models = MODEL_LISTS["llama.cpp"][0]
    action = json.dumps({"thought": "again", "action": "multiply", "action_input": {"a": 2, "b": 3}})
    chat_server.replies = [action, json.dumps({"thought": "t", "action": "Final Answer", "action_input": "6"})]
    result = Engine(make(chat_server), [multiply], EngineSettings(think_depth=0)).run("2*3?")
    assert result.output == "6" and result.stopped_by == "think_depth"
    final = chat_server.bodies[-1]["response_format"]["schema"]
    assert final["properties"]["action"] == {"const": "Final Answer"}


def test_the_async_path_asks_the_server_without_blocking_and_constrains_too(chat_server):
    chat_server.models = MODEL_LISTS["llama.cpp"][0]
    chat_server.replies = [json.dumps({"thought": "t", "action": "Final Answer", "action_input": "hi"})]
    app = AppFactory().create_app(tools_list=[multiply], llm_api_base_url=chat_server.url, model_name="m",
                                  no_default=True)
    assert asyncio.run(app.aask("hi")) == "hi"
    assert chat_server.bodies[0]["response_format"]["type"] == "json_object"


def test_the_settings_reach_the_client_from_create_app(chat_server):
    chat_server.replies = ["Thought: Do I need to use a tool? No\nAI: hi"]
    app = AppFactory().create_app(tools_list=[multiply], llm_api_base_url=chat_server.url, model_name="m",
                                  no_default=True, llm_server="tgi", constrained_decoding="off")
    assert app.ask("hi") == "hi"
    assert "response_format" not in chat_server.bodies[0] and "stream_options" not in chat_server.bodies[0]
    assert chat_server.model_list_requests == 0


def test_constraint_params_spell_the_schema_for_each_dialect():
    schema = {"type": "object"}
    assert constraint_params(schema, PROFILES["llama.cpp"]) == {
        "response_format": {"type": "json_object", "schema": schema}}
    assert constraint_params(schema, PROFILES["tgi"]) == {"response_format": {"type": "json_object", "value": schema}}
    assert constraint_params(schema, PROFILES["vllm"])["response_format"]["json_schema"]["schema"] == schema


def test_streams_from_llama_cpp_python_do_not_ask_for_usage_chunks(chat_server):
    """llama-cpp-python's server ends a stream after its first (role) chunk when ``stream_options`` is set:
    the reply would be empty. Its usage is counted here instead."""
    chat_server.models = MODEL_LISTS["llama-cpp-python"][0]
    chat_server.replies = ["streamed"]
    llm = make(chat_server)  # auto: the server is asked what it is before the first request
    chunks = list(llm.stream([{"role": "user", "content": "q"}]))
    assert "".join(c.text for c in chunks) == "streamed" and chunks[-1].usage.estimated
    assert "stream_options" not in chat_server.bodies[0]


def test_llama_cpp_servers_get_a_token_limit_unless_one_is_set(chat_server):
    """llama.cpp's servers write until the context is full when no limit is sent: a small model that repeats
    itself holds the request for minutes."""
    chat_server.models = MODEL_LISTS["llama.cpp"][0]
    make(chat_server).complete([{"role": "user", "content": "q"}])
    assert chat_server.bodies[0]["max_tokens"] == 1024
    make(chat_server, llm_server="vllm").complete([{"role": "user", "content": "q"}])
    assert "max_tokens" not in chat_server.bodies[1]
    app = AppFactory().create_app(tools_list=[multiply], llm_api_base_url=chat_server.url, model_name="m",
                                  no_default=True, llm_max_tokens=200, constrained_decoding="off")
    app.ask("hi")
    assert chat_server.bodies[2]["max_tokens"] == 200


def test_a_validation_error_answered_as_500_drops_the_parameter_it_names(chat_server):
    """llama-cpp-python answers a request its schema refuses with HTTP 500 and pydantic's message."""
    def check(body):
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return 500, ("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                         "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")
        return None

    chat_server.check = check
    chat_server.replies = ["Thought: Do I need to use a tool? No\nAI: fine"]
    llm = make(chat_server, llm_server="generic", constrained_decoding="on", max_retries=0)
    assert Engine(llm, [multiply]).run("hi").output == "fine"
    assert "response_format" in chat_server.bodies[0] and "response_format" not in chat_server.bodies[1]


def test_a_server_that_did_not_answer_is_asked_again_and_one_without_a_model_list_is_not(chat_server):
    llm = OpenAICompatibleLLM("m", api_key=None, base_url="http://127.0.0.1:9/v1", timeout=1, max_retries=0)
    assert llm.server_profile().name == "generic" and llm._server["profile"] is None  # refused: ask again later
    chat_server.models = {"error": "no such route"}  # an answer, though not a model list: settled
    answered = make(chat_server)
    assert answered.server_profile().name == "generic" and answered._server["profile"] is not None


def test_the_reply_schema_has_no_length_bounds_that_blow_up_a_grammar():
    """llama.cpp writes maxLength n as n nested optional characters: decoding crawls and its server can crash."""
    from chatgpt_tool_hub.engine.constrained import reply_schema

    @tool(name="search", parameters={"type": "object", "properties": {
        "q": {"type": "string", "maxLength": 300, "minLength": 1, "pattern": "^.+$"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 50}},
        "required": ["q"]})
    def search(q: str, tags: list | None = None) -> str:
        return q

    text = json.dumps(reply_schema([search, multiply]))
    assert "maxLength" not in text and "maxItems" not in text and "pattern" not in text
    assert '"required": ["q"]' in text
