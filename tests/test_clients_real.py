"""The real client software users put in front of ``tool-hub serve``: LangChain's ``ChatOpenAI``, the OpenAI
Agents SDK, Simon Willison's ``llm`` CLI and the LiteLLM SDK, each configured as its own docs say, with their own
tools.

These need the ``clients`` extra (``pip install -e ".[clients]"``) and run with ``-m clients``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest
from test_server_support import live  # noqa: F401 - the fixture

from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

pytestmark = pytest.mark.clients
QUESTION = "What is 6 * 7, and the weather in Paris?"


def weather_call(name: str = "get_weather", city: str = "Paris") -> str:
    return f"Thought: Do I need to use a tool? Yes\nAction: {name}\nAction Input: {json.dumps({'city': city})}"


def test_langchain_bind_tools_round_trip_with_the_servers_own_tools(live):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    llm = ScriptedLLM([act("python", "print(6 * 7)"), weather_call(), answer("42; it is sunny in Paris.")])
    server = live(llm=llm, tools_list=["python"])
    model = ChatOpenAI(model="tool-hub", base_url=server.url, api_key=server.token, max_retries=0)
    bound = model.bind_tools([get_weather])
    first = bound.invoke([HumanMessage(QUESTION)])
    [call] = first.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"}
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    final = bound.invoke([HumanMessage(QUESTION), first, result])
    assert final.content == "42; it is sunny in Paris." and not final.tool_calls
    assert "Observation: sunny in Paris" in "\n".join(str(m["content"]) for m in llm.requests[-1])


def test_langchain_streams_a_tool_call(live):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    server = live(llm=ScriptedLLM([weather_call(city="Rome")], chunk_size=4))
    model = ChatOpenAI(model="tool-hub", base_url=server.url, api_key=server.token, max_retries=0, streaming=True)
    merged = None
    for piece in model.bind_tools([get_weather]).stream(QUESTION):
        merged = piece if merged is None else merged + piece
    assert merged is not None and merged.tool_calls[0]["args"] == {"city": "Rome"}


def test_langchain_with_structured_output(live):
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Answer(BaseModel):
        product: int
        city: str

    server = live(llm=ScriptedLLM([answer('{"product": 42, "city": "Paris"}')]))
    model = ChatOpenAI(model="tool-hub", base_url=server.url, api_key=server.token, max_retries=0)
    assert model.with_structured_output(Answer).invoke(QUESTION) == Answer(product=42, city="Paris")


def test_langchain_with_structured_output_by_function_calling(live):
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Answer(BaseModel):
        product: int

    server = live(llm=ScriptedLLM([answer("It is 42."), weather_call("Answer", "x").replace(
        '{"city": "x"}', '{"product": 42}')]))
    model = ChatOpenAI(model="tool-hub", base_url=server.url, api_key=server.token, max_retries=0)
    structured = model.with_structured_output(Answer, method="function_calling")
    assert structured.invoke(QUESTION) == Answer(product=42)  # tool_choice names the function: asked again


def test_the_agents_sdk_runs_its_function_tool_through_the_server(live):
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"rainy in {city}"

    llm = ScriptedLLM([LLMResponse("", tool_calls=[ToolCall("call_a1", "get_weather", {"city": "Rome"})]),
                       "Rome is rainy."])
    server = live(llm=llm, tool_calling="native")
    client = AsyncOpenAI(base_url=server.url, api_key=server.token, max_retries=0)
    agent = Agent(name="weather", instructions="Answer briefly.", tools=[get_weather],
                  model=OpenAIChatCompletionsModel(model="tool-hub", openai_client=client))
    result = asyncio.run(Runner.run(agent, "Weather in Rome?"))
    assert result.final_output == "Rome is rainy." and seen == ["Rome"]
    assert llm.requests[-1][-1] == {"role": "tool", "tool_call_id": "call_a1", "content": "rainy in Rome"}


def test_the_llm_cli_with_a_tool(live, tmp_path):
    llm = ScriptedLLM([weather_call("get_weather", "Oslo"), answer("Oslo: snow.")])
    server = live(llm=llm)
    home = tmp_path / "llm"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(textwrap.dedent(f"""\
        - model_id: tool-hub
          model_name: tool-hub
          api_base: {server.url}
          api_key_name: toolhub
          supports_tools: true
        """))
    (home / "keys.json").write_text(json.dumps({"toolhub": server.token}))
    functions = "def get_weather(city: str) -> str:\n    'The weather in a city.'\n    return 'snow in ' + city\n"
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    done = subprocess.run([sys.executable, "-m", "llm", "-m", "tool-hub", "--functions", functions, "--no-stream",
                           "-n", "Weather in Oslo?"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Oslo: snow." in done.stdout
    assert "Observation: snow in Oslo" in "\n".join(str(m["content"]) for m in llm.requests[-1])


@pytest.fixture
def agents_default_client(live):
    """The Agents SDK's default model path (the Responses API) pointed at a live server; its defaults are
    put back afterwards."""
    from agents import set_default_openai_api, set_default_openai_client, set_tracing_disabled
    from agents.models import _openai_shared
    from openai import AsyncOpenAI

    kept = (_openai_shared.get_default_openai_client(), _openai_shared.get_use_responses_by_default())
    set_tracing_disabled(True)

    def start(llm: ScriptedLLM, **settings) -> None:
        server = live(llm=llm, **settings)
        set_default_openai_client(AsyncOpenAI(base_url=server.url, api_key=server.token, max_retries=0),
                                  use_for_tracing=False)
        set_default_openai_api("responses")

    yield start
    if kept[0] is not None:
        _openai_shared.set_default_openai_client(kept[0])
    else:
        _openai_shared._default_openai_client = None
    _openai_shared.set_use_responses_by_default(kept[1])


def _weather_agent(seen: list[str]):
    from agents import Agent, function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"rainy in {city}"

    return Agent(name="weather", instructions="Answer briefly.", tools=[get_weather], model="tool-hub")


def test_the_agents_sdk_on_its_default_responses_path_runs_its_function_tool(agents_default_client):
    from agents import Runner

    llm = ScriptedLLM([act("python", "print(6 * 7)"), weather_call(city="Rome"), answer("42; Rome is rainy.")])
    agents_default_client(llm, tools_list=["python"])
    seen: list[str] = []
    result = asyncio.run(Runner.run(_weather_agent(seen), QUESTION))
    assert result.final_output == "42; Rome is rainy." and seen == ["Rome"]
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert "Observation: 42" in sent and "Observation: rainy in Rome" in sent


def test_the_agents_sdk_streams_a_function_tool_round_trip_over_the_responses_api(agents_default_client):
    from agents import Runner

    llm = ScriptedLLM([LLMResponse("", tool_calls=[ToolCall("call_s1", "get_weather", {"city": "Oslo"})]),
                       "Oslo is rainy."], chunk_size=3)
    agents_default_client(llm, tool_calling="native")
    seen: list[str] = []

    async def run() -> tuple[object, list[str]]:
        streamed = Runner.run_streamed(_weather_agent(seen), "Weather in Oslo?")
        kinds = [getattr(event, "data", event).type if event.type == "raw_response_event" else event.type
                 async for event in streamed.stream_events()]
        return streamed.final_output, kinds

    final, kinds = asyncio.run(run())
    assert final == "Oslo is rainy." and seen == ["Oslo"]
    assert "response.function_call_arguments.done" in kinds and "response.output_text.delta" in kinds
    assert llm.requests[-1][-1] == {"role": "tool", "tool_call_id": "call_s1", "content": "rainy in Oslo"}


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
def litellm_offline(monkeypatch):
    """LiteLLM with its cost map and other catalogs read from its own package: any host name other than the
    local server's that anything tries to resolve fails the test."""
    import socket

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    looked_up: list[str] = []
    resolve = socket.getaddrinfo

    def local_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            looked_up.append(str(host))
            raise OSError(f"{host}: only 127.0.0.1 is reachable in these tests")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
    import litellm

    yield litellm
    assert looked_up == []


def test_litellm_completion_round_trip_with_a_client_tool(live, litellm_offline):
    litellm = litellm_offline
    llm = ScriptedLLM([act("python", "print(6 * 7)"), weather_call(), answer("42; it is sunny in Paris.")])
    server = live(llm=llm, tools_list=["python"])
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    first = litellm.completion(model="openai/tool-hub", api_base=server.url, api_key=server.token,
                               messages=messages, tools=[WEATHER_TOOL], num_retries=0)
    assert first.choices[0].finish_reason == "tool_calls"
    assert "Action: python" in first.choices[0].message.reasoning_content  # the server's own step, shown
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny in Paris"}]
    final = litellm.completion(model="openai/tool-hub", api_base=server.url, api_key=server.token,
                               messages=messages, tools=[WEATHER_TOOL], num_retries=0)
    assert final.choices[0].message.content == "42; it is sunny in Paris." and not final.choices[0].message.tool_calls
    sent = "\n".join(str(m["content"]) for m in llm.requests[-1])
    assert "Observation: 42" in sent and "Observation: sunny in Paris" in sent


def test_litellm_streams_a_tool_call_and_the_answer(live, litellm_offline):
    litellm = litellm_offline
    llm = ScriptedLLM([weather_call(city="Rome"), answer("Rome is sunny today.")], chunk_size=4)
    server = live(llm=llm)
    messages: list[dict] = [{"role": "user", "content": "Weather in Rome?"}]

    def streamed() -> tuple[object, int]:
        chunks = list(litellm.completion(model="openai/tool-hub", api_base=server.url, api_key=server.token,
                                         messages=messages, tools=[WEATHER_TOOL], stream=True, num_retries=0))
        return litellm.stream_chunk_builder(chunks, messages=messages), len(chunks)

    first, _ = streamed()
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Rome"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny in Rome"}]
    final, count = streamed()
    assert final.choices[0].message.content == "Rome is sunny today." and count > 2  # in pieces, not one chunk
    assert "Observation: sunny in Rome" in "\n".join(str(m["content"]) for m in llm.requests[-1])


def test_litellm_structured_output_with_a_pydantic_response_format(live, litellm_offline):
    from pydantic import BaseModel

    class Answer(BaseModel):
        product: int
        city: str

    llm = ScriptedLLM([answer('{"product": "many"}'), answer('{"product": 42, "city": "Paris"}')])
    server = live(llm=llm)
    reply = litellm_offline.completion(model="openai/tool-hub", api_base=server.url, api_key=server.token,
                                       messages=[{"role": "user", "content": QUESTION}], response_format=Answer,
                                       num_retries=0)
    assert Answer.model_validate_json(reply.choices[0].message.content) == Answer(product=42, city="Paris")
    assert "does not follow the schema" in llm.requests[1][-1]["content"]  # the schema reached the server


def test_litellm_passes_the_servers_error_on(live, litellm_offline):
    litellm = litellm_offline
    server = live(llm=ScriptedLLM([answer("never")]))
    with pytest.raises(litellm.AuthenticationError) as raised:
        litellm.completion(model="openai/tool-hub", api_base=server.url, api_key="wrong-key",
                           messages=[{"role": "user", "content": "hi"}], num_retries=0)
    assert raised.value.status_code == 401 and "local token" in str(raised.value)  # the fix, passed on
