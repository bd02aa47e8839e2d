"""Native tool calling (tool_calling="native"): ScriptedLLM and the real openai client against ChatServer."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.engine import native
from chatgpt_tool_hub.engine.loop import STOP_SEQUENCES, Engine, EngineSettings
from chatgpt_tool_hub.errors import ConfigError, UserError
from chatgpt_tool_hub.events import ActionEvent, ObservationEvent, ThoughtEvent
from chatgpt_tool_hub.llm.base import (
    BaseLLM,
    LLMResponse,
    StreamChunk,
    ToolCall,
    as_response,
    call_llm,
    collect_stream,
    stream_llm,
)
from chatgpt_tool_hub.llm.openai_client import OpenAICompatibleLLM
from chatgpt_tool_hub.llm.tokens import count_message_tokens
from chatgpt_tool_hub.run.budget import Budget
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool

from helpers import CountingTool, act, answer, echo, run_events

NATIVE = EngineSettings(tool_calling="native", prompt_language="en")


@tool(name="add", description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


def call(name: str, arguments, call_id: str = "call_1", text: str = "") -> LLMResponse:
    """A scripted reply with one native tool call."""
    return LLMResponse(text, tool_calls=[ToolCall(call_id, name, arguments)])


def calls(*items: tuple[str, object], text: str = "") -> LLMResponse:
    return LLMResponse(text, tool_calls=[ToolCall(f"call_{i}", n, a) for i, (n, a) in enumerate(items)])


def make_llm(server, **kw) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("test-model", api_key="k", base_url=server.url, timeout=5, max_retries=0, **kw)


@pytest.fixture(autouse=True)
def _no_tool_calling_env(monkeypatch):
    monkeypatch.delenv("TOOL_CALLING", raising=False)


# ---- the loop with ScriptedLLM -------------------------------------------------------------------------


def test_tool_call_observation_goes_back_as_a_tool_message_then_final_text():
    llm = ScriptedLLM([call("add", {"a": 2, "b": 3}, "call_abc"), "2 + 3 = 5."])
    result = Engine(llm, [add], NATIVE).run("What is 2 + 3?")
    assert result.output == "2 + 3 = 5." and result.stopped_by == "answer"
    step = result.steps[0]
    assert (step.tool, step.tool_input, step.observation, step.status, step.tool_call_id) == (
        "add", {"a": 2, "b": 3}, "5", "ok", "call_abc")
    assert step.llm_output == 'add({"a": 2, "b": 3})'
    # the tools were sent as function schemas on every step
    assert llm.tools[0] == [add.openai_schema()] and llm.tools[1] == [add.openai_schema()]
    second = llm.requests[1]
    assert second[-2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]}
    assert second[-1] == {"role": "tool", "tool_call_id": "call_abc", "content": "5"}
    assert llm.stops[0] == STOP_SEQUENCES


def test_native_system_prompt_has_the_rules_but_not_the_text_format():
    llm = ScriptedLLM(["hello"])
    Engine(llm, [add], NATIVE).run("hi")
    system = llm.requests[0][0]["content"]
    assert system.startswith("You are LLM-OS")
    assert "Action Input" not in system and "Thought:" not in system
    assert "not an instruction" in system and "do not invent tool results, file names" in system
    assert "language the user writes in" in system
    # rules about things no tool here meets stay out of a small model's context
    assert "use a tool on it" not in system and "untrusted content" not in system


def test_rules_about_files_and_untrusted_content_come_with_the_tools_that_need_them():
    from chatgpt_tool_hub.tools import tool

    @tool(name="caption", description="Describe an image file.")
    def caption(path: str) -> str:
        return "a cat"

    @tool(name="fetch", description="Fetch a web page.")
    def fetch(url: str) -> str:
        return "page"

    fetch.reads_untrusted = True

    for mode in (NATIVE, EngineSettings()):
        llm = ScriptedLLM(["AI: hello" if mode is not NATIVE else "hello"])
        Engine(llm, [caption, fetch], mode).run("hi")
        system = llm.requests[0][0]["content"]
        assert "use a tool on it" in system and "<<untrusted content from" in system


def test_chinese_native_prompt():
    llm = ScriptedLLM(["你好"])
    Engine(llm, [add], EngineSettings(tool_calling="native")).run("你好吗")
    system = llm.requests[0][0]["content"]
    assert system.startswith("你是 LLM-OS") and "Action Input" not in system and "工具" in system


def test_text_mode_is_unchanged_and_sends_no_tools():
    llm = ScriptedLLM([act("add", '{"a": 1, "b": 1}'), answer("2")])
    result = Engine(llm, [add]).run("1 + 1?")
    assert result.output == "2" and result.steps[0].tool_call_id is None
    assert llm.tools == [None, None]
    assert "Action Input" in llm.requests[0][0]["content"]
    assert llm.requests[1][-1] == {"role": "user", "content": "Observation: 2"}


def test_native_mode_without_tools_is_the_text_protocol():
    llm = ScriptedLLM([answer("hi")])
    engine = Engine(llm, [], NATIVE)
    assert engine.native is False
    assert engine.run("hi").output == "hi" and llm.tools == [None]


def test_bad_tool_calling_value_is_a_user_error():
    with pytest.raises(UserError, match="tool_calling"):
        Engine(ScriptedLLM([]), [add], EngineSettings(tool_calling="json"))


# ---- tool inputs ------------------------------------------------------------------------------------------


def test_string_tool_gets_the_text_under_input():
    counter = CountingTool()
    llm = ScriptedLLM([call("counter", {"input": "one two"}), call("counter", '{"text": "three"}', "c2"),
                       call("counter", "not json at all", "c3"), "done"])
    events, result = run_events(Engine(llm, [counter], NATIVE), "count")
    assert counter.calls == ["one two", "three", "not json at all"]
    assert [e.tool_input for e in events if isinstance(e, ActionEvent)] == counter.calls
    schema = llm.tools[0][0]["function"]
    assert schema["parameters"]["properties"] == {"input": {"type": "string", "description": "the tool input"}}


def test_json_tool_validation_errors_are_observations_the_model_can_fix():
    llm = ScriptedLLM([call("add", {"a": "two", "b": 3}), call("add", {"a": 2}, "c2"), call("add", "{oops", "c3"),
                       call("add", '{"a": 2, "b": 3}', "c4"), "5"])
    result = Engine(llm, [add], EngineSettings(tool_calling="native", think_depth=4)).run("2 + 3")
    statuses = [s.status for s in result.steps]
    assert statuses == ["error", "error", "error", "ok"]
    assert result.steps[0].observation.startswith("Error: Invalid input for tool 'add'")
    assert "'b' is a required property" in result.steps[1].observation
    assert "arguments are not valid JSON" in result.steps[2].observation and "was not run" in result.steps[2].observation
    assert result.steps[3].observation == "5" and result.output == "5"
    tool_messages = [m for m in llm.requests[-1] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1", "c2", "c3", "c4"]


def test_single_parameter_json_tool_and_empty_arguments():
    llm = ScriptedLLM([call("echo", {"text": "hi"}), call("echo", "", "c2"), "ok"])
    result = Engine(llm, [echo], NATIVE).run("echo hi")
    assert result.steps[0].observation == "echo: hi"
    assert result.steps[1].status == "error" and "'text' is a required property" in result.steps[1].observation


def test_unknown_tool_name_is_an_observation_and_not_charged():
    budget = Budget(max_llm_calls=10, max_tool_calls=1)
    llm = ScriptedLLM([call("subtract", {"a": 1}), call("ADD", {"a": 1, "b": 1}, "c2"), "2"])
    result = Engine(llm, [add], NATIVE, budget=budget).run("1 + 1")
    assert [s.status for s in result.steps] == ["unknown_tool", "ok"]
    observation = result.steps[0].observation
    assert observation.startswith('"subtract" is not a valid tool. Valid tools are: add.')
    assert "plain text" in observation and '"AI:"' not in observation
    assert budget.tool_calls == 1 and result.output == "2"


def test_a_call_without_a_name_is_answered_and_null_arguments_are_no_arguments():
    from chatgpt_tool_hub.llm.openai_parts import _tool_calls_from, _ToolCallDeltas

    message = {"tool_calls": [{"id": "a", "function": {"name": "", "arguments": "{\"a\": 1}"}},
                              {"id": "b", "function": {"name": "add", "arguments": "{}"}}, "junk"]}
    assert [c.name for c in _tool_calls_from(message)] == ["", "add"]  # never dropped in silence
    deltas = _ToolCallDeltas()
    deltas.feed([{"index": 0, "id": "x", "function": {"arguments": "{\"a\": 1}"}}])
    assert [(c.name, c.arguments) for c in deltas.calls()] == [("", '{"a": 1}')]

    @tool(name="now", description="the time")
    def now() -> str:
        return "noon"

    llm = ScriptedLLM([calls(("", {"a": 1}), ("now", "null")), "done"])
    result = Engine(llm, [now], NATIVE).run("time?")
    assert [s.status for s in result.steps] == ["unknown_tool", "ok"] and result.steps[1].observation == "noon"
    assert [m for m in llm.requests[1] if m["role"] == "tool"][0]["content"].startswith('"" is not a valid tool')


def test_tool_names_that_are_not_valid_function_names_are_mapped_back():
    @tool(name="shout it", description="Upper-case a text.")
    def shout(text: str) -> str:
        return text.upper()

    llm = ScriptedLLM([call("shout_it", {"text": "hey"}), "HEY"])
    result = Engine(llm, [shout], NATIVE).run("shout hey")
    assert llm.tools[0][0]["function"]["name"] == "shout_it"
    assert (result.steps[0].tool, result.steps[0].observation) == ("shout it", "HEY")


def test_tool_schemas_keep_names_unique():
    first = CountingTool()
    first.name = "a.b"
    second = CountingTool()
    second.name = "a b"
    schemas, names = native.tool_schemas([first, second])
    assert [s["function"]["name"] for s in schemas] == ["a_b", "a_b_2"]
    assert names == {"a_b": "a.b", "a_b_2": "a b"}


def test_calls_without_ids_get_unique_ids_that_match_their_tool_messages():
    llm = ScriptedLLM([calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}), text="Adding."), "2 and 4"])
    llm.replies[0].tool_calls[0].id = ""
    llm.replies[0].tool_calls[1].id = ""
    events, result = run_events(Engine(llm, [add], NATIVE), "sums")
    assistant, *tools = llm.requests[1][-3:]
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(ids)) == 2 and all(ids)
    assert [m["tool_call_id"] for m in tools] == ids == [s.tool_call_id for s in result.steps]
    assert assistant["content"] == "Adding."
    assert [e.text for e in events if isinstance(e, ThoughtEvent)] == ["Adding."]


def test_observations_are_redacted_and_truncated_in_tool_messages():
    secret = "sk-very-secret-value"
    leaky = CountingTool(output=f"key={secret} " + "x" * 500)
    llm = ScriptedLLM([call("counter", {"input": "go"}), "done"])
    engine = Engine(llm, [leaky], EngineSettings(tool_calling="native", observation_max_chars=100),
                    secrets=[secret])
    result = engine.run("leak it")
    content = llm.requests[1][-1]["content"]
    assert secret not in content and "key=***" in content and "characters omitted" in content
    assert content == result.steps[0].observation


# ---- several calls and think depth ---------------------------------------------------------------------


def test_all_calls_of_a_reply_run_in_order():
    counter = CountingTool()
    llm = ScriptedLLM([calls(("counter", {"input": "a"}), ("counter", {"input": "b"})), "done"])
    result = Engine(llm, [counter], NATIVE).run("twice")
    assert counter.calls == ["a", "b"]
    assert [s.observation for s in result.steps] == ["count=1", "count=2"]
    roles = [m["role"] for m in llm.requests[1]]
    assert roles[-3:] == ["assistant", "tool", "tool"]


def test_think_depth_counts_each_call_and_answers_calls_past_it():
    counter = CountingTool()
    llm = ScriptedLLM([calls(("counter", {"input": "a"}), ("counter", {"input": "b"}), ("counter", {"input": "c"})),
                       "I counted once."])
    result = Engine(llm, [counter], EngineSettings(tool_calling="native", think_depth=1)).run("count")
    assert counter.calls == ["a"]
    assert result.stopped_by == "think_depth" and result.output == "I counted once."
    final = llm.requests[-1]
    tool_messages = [m for m in final if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0", "call_1", "call_2"]
    assert tool_messages[1]["content"] == "Not run: the limit of 1 tool calls for this question is reached."
    assert final[-1]["role"] == "user" and "maximum of 1 tool calls" in final[-1]["content"]
    assert "Thought:" not in final[-1]["content"]
    assert llm.tools[-1] is None  # the final call is made without tools
    assert result.usage.llm_calls == 2


def test_think_depth_across_replies_and_fallback_when_the_final_reply_is_unusable():
    counter = CountingTool(output="42")
    llm = ScriptedLLM([call("counter", {"input": "a"}), call("counter", {"input": "b"}, "c2"),
                       call("counter", {"input": "c"}, "c3"), LLMResponse("")])
    result = Engine(llm, [counter], EngineSettings(tool_calling="native", think_depth=2)).run("count")
    assert counter.calls == ["a", "b"] and result.stopped_by == "think_depth"
    assert result.output.startswith("I reached the limit of 2 tool calls") and result.output.endswith("42")


def test_think_depth_zero_answers_without_running_anything():
    counter = CountingTool()
    llm = ScriptedLLM([call("counter", {"input": "a"}), "No tools, sorry."])
    result = Engine(llm, [counter], EngineSettings(tool_calling="native", think_depth=0)).run("count")
    assert counter.calls == [] and result.output == "No tools, sorry." and result.stopped_by == "think_depth"


# ---- replies without tool calls -----------------------------------------------------------------------


def test_a_model_that_answers_in_the_text_protocol_still_works():
    llm = ScriptedLLM([act("add", '{"a": 4, "b": 5}'), answer("It is 9.")])
    events, result = run_events(Engine(llm, [add], NATIVE), "4 + 5?")
    assert result.output == "It is 9." and result.steps[0].observation == "9"
    assert result.steps[0].tool_call_id is None
    assert llm.requests[1][-1] == {"role": "user", "content": "Observation: 9"}
    assert llm.tools[1] == [add.openai_schema()]


def test_plain_text_is_the_answer_even_with_markers_inside():
    text = "Here is the plan.\nAI: an acronym for artificial intelligence.\nAction: none"
    llm = ScriptedLLM([text])
    assert Engine(llm, [add], NATIVE).run("what is AI?").output == text


@pytest.mark.parametrize("text,expected", [
    ("Thought: x\nAction: add\nAction Input: {}", True),
    ("**Action:** add\n**Action Input:** {}", True),
    ("AI: hello", True),
    ("Final Answer: 3", True),
    ('{"action": "add", "action_input": {}}', True),
    ("I will use a tool.\nAction: add\nAction Input: 1", True),
    ("<think>hmm</think>\nThought: Do I need to use a tool? No\nAI: hi", True),
    ("The answer is 3.", False),
    ("Paris.\nAI: is a field of computer science.", False),
    ("", False),
])
def test_looks_like_text_protocol(text, expected):
    assert native.looks_like_text_protocol(text) is expected


def test_think_blocks_are_dropped_from_plain_answers():
    llm = ScriptedLLM(["<think>the user wants a number</think>\nSeven."])
    assert Engine(llm, [add], NATIVE).run("a number").output == "Seven."


def test_empty_reply_gets_native_feedback_then_recovers():
    llm = ScriptedLLM([LLMResponse(""), "Fine."])
    events, result = run_events(Engine(llm, [add], NATIVE), "hi")
    assert result.output == "Fine." and len(result.parse_failures) == 1
    feedback = llm.requests[1][-1]["content"]
    assert feedback.startswith("Your reply was empty.") and "plain text" in feedback and "Thought:" not in feedback


def test_empty_replies_past_max_parse_retries_end_the_run():
    llm = ScriptedLLM([""] * 3)
    result = Engine(llm, [add], EngineSettings(tool_calling="native", max_parse_retries=2)).run("hi")
    assert result.stopped_by == "parse_error" and result.output == "The model returned an empty reply."


# ---- approval, budget, streaming, events ---------------------------------------------------------------


def test_dangerous_tools_ask_the_approver_with_the_call_input():
    counter = CountingTool(dangerous=True)
    asked = []

    def approve(name, tool_input):
        asked.append((name, tool_input))
        return tool_input == "yes"

    llm = ScriptedLLM([call("counter", {"input": "no"}), call("counter", {"input": "yes"}, "c2"), "done"])
    result = Engine(llm, [counter], NATIVE, approve=approve).run("go")
    assert asked == [("counter", "no"), ("counter", "yes")] and counter.calls == ["yes"]
    assert [s.status for s in result.steps] == ["denied", "ok"]
    denied = [m for m in llm.requests[2] if m.get("tool_call_id") == "call_1"][0]["content"]
    assert denied.startswith('The user did not approve running "counter"')


def test_budget_stops_native_runs_too():
    counter = CountingTool()
    llm = ScriptedLLM([calls(("counter", {"input": "a"}), ("counter", {"input": "b"}))])
    result = Engine(llm, [counter], EngineSettings(tool_calling="native", think_depth=5),
                    budget=Budget(max_llm_calls=5, max_tool_calls=1)).run("go")
    assert result.stopped_by == "budget" and counter.calls == ["a"]


def test_streaming_with_scripted_tool_calls():
    llm = ScriptedLLM([call("add", {"a": 1, "b": 2}, text="Let me add."), "The sum is 3."])
    events, result = run_events(Engine(llm, [add], NATIVE), "1 + 2", stream=True)
    assert result.output == "The sum is 3."
    tokens = "".join(e.text for e in events if e.kind == "token")
    assert tokens == "Let me add.The sum is 3."
    assert llm.tools[0] == [add.openai_schema()]


def _event_summary(events):
    out = []
    for e in events:
        if e.kind == "action":
            out.append(("action", e.tool, e.tool_input))
        elif e.kind == "observation":
            out.append(("observation", e.tool, e.observation))
        elif e.kind == "answer":
            out.append(("answer", e.text, e.stopped_by))
    return out


def test_app_stream_events_are_the_same_as_in_text_mode():
    text_llm = ScriptedLLM([act("add", '{"a": 6, "b": 7}'), answer("13")])
    native_llm = ScriptedLLM([call("add", {"a": 6, "b": 7}), "13"])
    factory = AppFactory()
    text_app = factory.create_app(tools_list=[add], llm=text_llm, no_default=True)
    native_app = factory.create_app(tools_list=[add], llm=native_llm, no_default=True, tool_calling="native")
    assert native_app.settings.tool_calling == "native" and text_app.settings.tool_calling == "text"
    text_events = _event_summary(text_app.stream("6 + 7?"))
    native_events = _event_summary(native_app.stream("6 + 7?"))
    assert native_events == text_events == [("action", "add", {"a": 6, "b": 7}), ("observation", "add", "13"),
                                            ("answer", "13", "answer")]


def test_memory_keeps_only_question_and_answer():
    llm = ScriptedLLM([call("add", {"a": 1, "b": 1}), "2", "yes"])
    app = AppFactory().create_app(tools_list=[add], llm=llm, no_default=True, tool_calling="native")
    app.ask("1 + 1?")
    app.ask("sure?")
    roles = [m["role"] for m in llm.requests[-1]]
    assert roles == ["system", "user", "assistant", "user"]


# ---- configuration ---------------------------------------------------------------------------------------


def test_setting_from_environment_and_bad_values(monkeypatch):
    monkeypatch.setenv("TOOL_CALLING", "Native")
    app = AppFactory().create_app(tools_list=[add], llm=ScriptedLLM([]), no_default=True)
    assert app.settings.tool_calling == "native" and app.config["tool_calling"] == "native"
    with pytest.raises(ConfigError) as err:
        AppFactory().create_app(tools_list=[add], llm=ScriptedLLM([]), no_default=True, tool_calling="json")
    assert err.value.key == "tool_calling"


def test_default_is_text():
    app = AppFactory().create_app(tools_list=[add], llm=ScriptedLLM([]), no_default=True)
    assert app.settings.tool_calling == "text"


# ---- LLM objects without tools support --------------------------------------------------------------------


class _OldLLM:
    def complete(self, messages, *, stop=None):
        return "AI: never"


class _OlderLLM:
    def complete(self, messages):
        return "AI: never"


class _OldStreamer(BaseLLM):
    def complete(self, messages, *, stop=None):
        return LLMResponse("AI: never")

    def stream(self, messages, *, stop=None):
        yield StreamChunk("AI: never")


@pytest.mark.parametrize("llm", [_OldLLM(), _OlderLLM(), _OldStreamer()], ids=["no-tools", "no-stop", "stream"])
@pytest.mark.parametrize("stream", [False, True])
def test_llm_without_tools_support_is_a_clear_user_error(llm, stream):
    engine = Engine(llm, [add], NATIVE)
    with pytest.raises(UserError) as err:
        run_events(engine, "hi", stream=stream)
    assert "does not support native tool calls" in str(err.value)
    assert 'tool_calling="text"' in str(err.value)


def test_same_llm_objects_still_work_in_text_mode():
    for llm in (_OldLLM(), _OlderLLM(), _OldStreamer()):
        assert Engine(llm, [add]).run("hi").output == "never"


def test_a_stream_without_tools_falls_back_to_complete_with_tools():
    class HalfLLM(BaseLLM):
        def complete(self, messages, *, stop=None, tools=None):
            return call("add", {"a": 1, "b": 1}) if messages[-1]["role"] == "user" else LLMResponse("2")

        def stream(self, messages, *, stop=None):
            raise AssertionError("not used with tools")

    events, result = run_events(Engine(HalfLLM(), [add], NATIVE), "1 + 1", stream=True)
    assert result.output == "2" and result.steps[0].observation == "2"


def test_loose_llm_objects_can_return_openai_style_dicts():
    class DictLLM:
        def __init__(self):
            self.replies = [{"id": "x1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}]

        def complete(self, messages, *, stop=None, tools=None):
            if self.replies:
                return LLMResponse("", tool_calls=[self.replies.pop()])
            return "3"

    result = Engine(DictLLM(), [add], NATIVE).run("1 + 2")
    assert result.output == "3" and result.steps[0].tool_call_id == "x1"


def test_llm_base_helpers_carry_tool_calls():
    tc = ToolCall("i", "add", {"a": 1})
    assert tc.to_message() == {"id": "i", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    chunks = [StreamChunk("a"), StreamChunk("b", "tool_calls", None, [tc])]
    assert collect_stream(iter(chunks)).tool_calls == [tc]
    llm = ScriptedLLM([call("add", {"a": 1})])
    assert call_llm(llm, [{"role": "user", "content": "q"}], None, [{"x": 1}]).tool_calls[0].name == "add"
    assert llm.tools == [[{"x": 1}]]
    llm = ScriptedLLM([call("add", {"a": 1}, text="so")])
    chunks = list(stream_llm(llm, [{"role": "user", "content": "q"}], None, [{"x": 1}]))
    assert chunks[-1].tool_calls[0].arguments == {"a": 1} and "".join(c.text for c in chunks) == "so"

    class Raw:
        text = "t"
        tool_calls = [{"name": "add", "arguments": {"a": 1}, "id": "z"}]

    assert as_response(Raw()).tool_calls == [ToolCall("z", "add", {"a": 1})]


def test_scripted_llm_returns_responses_as_they_are_and_records_tools():
    reply = call("add", '{"a": 1}')
    llm = ScriptedLLM(reply)
    out = llm.complete([{"role": "user", "content": "q"}], tools=[{"t": 1}])
    assert out == reply and out is not reply and llm.tools == [[{"t": 1}]]
    llm = ScriptedLLM(lambda messages: LLMResponse("x", tool_calls=[ToolCall("1", "add", "{}")]))
    chunks = list(llm.stream([{"role": "user", "content": "q"}]))
    assert chunks[-1].tool_calls[0].name == "add" and llm.tools == [None]


def test_token_counting_copes_with_native_messages():
    messages = [
        {"role": "user", "content": "2 + 3?"},
        native.assistant_message("", [ToolCall("call_1", "add", {"a": 2, "b": 3})]),
        native.tool_message("call_1", "5"),
    ]
    plain = count_message_tokens(messages[:1])
    assert count_message_tokens(messages) > plain + 6


# ---- the real openai client against the local chat server ------------------------------------------------


def _tool_call_reply(name, arguments, call_id=None, content=None):
    item = {"name": name, "arguments": arguments}
    if call_id:
        item["id"] = call_id
    return {"tool_calls": [item], "content": content}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_end_to_end(chat_server, stream):
    counter = CountingTool()
    chat_server.replies = [
        {"tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}, "id": "call_x"},
                        {"name": "counter", "arguments": {"input": "tick"}}], "content": "Working on it."},
        _tool_call_reply("nope", {}),
        "The answer is 42.",
    ]
    llm = make_llm(chat_server)
    app = AppFactory().create_app(tools_list=[add, counter], llm=llm, no_default=True, tool_calling="native")
    if stream:
        events = list(app.stream("What is 20 + 22?"))
        output = events[-1].text
        assert "".join(e.text for e in events if e.kind == "token") == "Working on it.The answer is 42."
    else:
        output = app.ask("What is 20 + 22?")
    assert output == "The answer is 42."
    assert counter.calls == ["tick"]
    body = chat_server.bodies[0]
    assert [t["function"]["name"] for t in body["tools"]] == ["add", "counter"]
    assert body["tool_choice"] == "auto" and body.get("stream", False) is stream
    assert chat_server.tools[1] == body["tools"]
    messages = chat_server.bodies[1]["messages"]
    assert messages[-3] == {"role": "assistant", "content": "Working on it.", "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "add", "arguments": '{"a": 20, "b": 22}'}},
        {"id": "call_1", "type": "function", "function": {"name": "counter", "arguments": '{"input": "tick"}'}}]}
    assert messages[-2] == {"role": "tool", "tool_call_id": "call_x", "content": "42"}
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "count=1"}
    unknown = chat_server.bodies[2]["messages"][-1]
    assert unknown["role"] == "tool" and unknown["content"].startswith('"nope" is not a valid tool')


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_returns_tool_calls(chat_server, stream):
    chat_server.replies = [{"tool_calls": [{"name": "add", "arguments": '{"a": 1, "b": 2}', "id": "c9"},
                                           {"name": "echo", "arguments": {"text": "a long text to split up"}}],
                            "content": None}]
    llm = make_llm(chat_server)
    tools = [add.openai_schema(), echo.openai_schema()]
    msgs = [{"role": "user", "content": "go"}]
    response = collect_stream(llm.stream(msgs, tools=tools)) if stream else llm.complete(msgs, tools=tools)
    assert response.tool_calls == [ToolCall("c9", "add", '{"a": 1, "b": 2}'),
                                   ToolCall("call_1", "echo", '{"text": "a long text to split up"}')]
    assert response.text == "" and response.finish_reason == "tool_calls"
    assert response.usage.completion_tokens > 0


def test_openai_client_passes_native_messages_through(chat_server):
    chat_server.replies = ["ok"]
    msgs = [{"role": "user", "content": "q"},
            native.assistant_message("", [ToolCall("c1", "add", {"a": 1, "b": 1})]),
            native.tool_message("c1", "2")]
    assert make_llm(chat_server, llm_server="openai").complete(msgs).text == "ok"
    assert chat_server.bodies[0]["messages"] == msgs  # OpenAI's own form: a call turn without text is null
    assert "tools" not in chat_server.bodies[0] and "tool_choice" not in chat_server.bodies[0]


def test_openai_client_drops_an_unsupported_tool_choice(chat_server):
    chat_server.faults.append(("status", 400, {}, "Unsupported parameter: 'tool_choice'"))
    chat_server.replies = ["ok"]
    llm = make_llm(chat_server)
    assert llm.complete([{"role": "user", "content": "q"}], tools=[add.openai_schema()]).text == "ok"
    assert "tool_choice" in chat_server.bodies[0] and "tool_choice" not in chat_server.bodies[1]
    assert "tools" in chat_server.bodies[1]


def test_openai_client_text_mode_sends_no_tools(chat_server):
    chat_server.replies = [act("add", '{"a": 1, "b": 1}'), answer("2")]
    app = AppFactory().create_app(tools_list=[add], llm=make_llm(chat_server), no_default=True)
    assert app.ask("1 + 1") == "2"
    assert chat_server.tools == [None, None]


def test_openai_client_stream_with_text_protocol_reply_in_native_mode(chat_server):
    chat_server.replies = [act("add", '{"a": 2, "b": 2}'), answer("4")]
    app = AppFactory().create_app(tools_list=[add], llm=make_llm(chat_server), no_default=True,
                                  tool_calling="native")
    events = list(app.stream("2 + 2"))
    assert events[-1].text == "4"
    assert [e.observation for e in events if isinstance(e, ObservationEvent)] == ["4"]
    assert chat_server.bodies[1]["messages"][-1] == {"role": "user", "content": "Observation: 4"}
    assert json.dumps(chat_server.tools[0]) == json.dumps(chat_server.tools[1])


def test_arguments_with_a_number_too_long_to_read_are_malformed_not_a_crash():
    from chatgpt_tool_hub.tools.base import MalformedArguments

    arguments = '{"a": ' + "1" * 5000 + ', "b": 3}'  # json.loads: int() refuses more than 4300 digits
    given = native.tool_input(ToolCall("c1", "add", arguments), add)
    assert isinstance(given, MalformedArguments)
    assert given.problem.startswith("the call's arguments are not valid JSON (Exceeds the limit")
