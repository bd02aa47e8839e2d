"""What small real models do to the engine, replayed: the same call again and again, raw call syntax as the
final reply, replies cut at the token limit, calls written as text in native mode."""

from __future__ import annotations

from chatgpt_tool_hub.engine.loop import Engine, EngineSettings
from chatgpt_tool_hub.events import ActionEvent, ObservationEvent
from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool

RUNS: list = []


@tool(name="multiply", description="Multiply two integers.")
def multiply(a: int, b: int) -> str:
    RUNS.append((a, b))
    return str(a * b)


def setup_function() -> None:
    RUNS.clear()


ACTION = "Thought: Do I need to use a tool? Yes\nAction: multiply\nAction Input: {\"a\": 37, \"b\": 41}"
NATIVE = EngineSettings(tool_calling="native", think_depth=5)


def _call() -> LLMResponse:
    return LLMResponse("", finish_reason="tool_calls", tool_calls=[ToolCall("", "multiply", {"a": 37, "b": 41})])


def test_the_same_call_again_is_answered_from_the_first_result_not_run_again():
    llm = ScriptedLLM([ACTION, ACTION, "Thought: Do I need to use a tool? No\nAI: 1517"])
    events = []
    result = Engine(llm, [multiply], EngineSettings(think_depth=5)).run("37*41?", callbacks=[events.append])
    assert result.output == "1517" and RUNS == [(37, 41)]
    assert len(result.steps) == 2 and result.steps[1].observation.endswith("1517")
    assert "already called" in result.steps[1].observation
    assert "already called" in llm.requests[2][-1]["content"]  # the model is told, with the result
    assert [type(e) for e in events if isinstance(e, (ActionEvent, ObservationEvent))] == [
        ActionEvent, ObservationEvent] * 2


def test_native_repeats_of_one_call_run_it_once_and_the_depth_stop_answers_from_the_observation():
    """A server whose template drops tool messages: the model calls multiply(37, 41) five times, then writes
    the call as raw template syntax. The tool ran once; the answer is what was observed, not the syntax."""
    raw = '<tool_call>\n{"name": "multiply", "arguments": {"a": 37, "b": 41}}\n</tool_call>'
    llm = ScriptedLLM([_call() for _ in range(5)] + [raw, raw])  # the last: after "give your final answer"
    result = Engine(llm, [multiply], NATIVE).run("What is 37 times 41?")
    assert RUNS == [(37, 41)]
    assert result.stopped_by == "think_depth" and "1517" in result.output
    assert "<tool_call>" not in result.output and llm.calls == 7


def test_a_call_written_out_in_a_native_reply_is_run():
    # the second: what llama-cpp-python's chatml-function-calling format left in a reply's content
    for written in ("multiply(a=37, b=41)", 'functions.multiply:\n{"a": 37, "b": 41}',
                    "functions.multiply:\n{ &#34;a&#34;: 37, &#34;b&#34;: 41 }"):
        RUNS.clear()
        llm = ScriptedLLM([written, "It is 1517."])
        result = Engine(llm, [multiply], NATIVE).run("37*41?")
        assert RUNS == [(37, 41)] and result.output == "It is 1517."


def test_an_answer_cut_at_the_token_limit_is_marked_as_cut():
    llm = ScriptedLLM([LLMResponse("Thought: Do I need to use a tool? No\nAI: The history of Rome begins with",
                                   finish_reason="length")])
    result = Engine(llm, [multiply]).run("Tell me about Rome")
    assert result.output.startswith("The history of Rome begins with …")
    assert "cut off at the model's output token limit" in result.output


def test_an_action_cut_inside_its_input_is_not_run_and_the_model_is_told():
    cut = LLMResponse('Thought: Do I need to use a tool? Yes\nAction: multiply\nAction Input: {"a": 37, "b"',
                      finish_reason="length")
    llm = ScriptedLLM([cut, ACTION, "Thought: Do I need to use a tool? No\nAI: 1517"])
    result = Engine(llm, [multiply]).run("37*41?")
    assert RUNS == [(37, 41)] and result.output == "1517"
    assert len(result.parse_failures) == 1 and "cut off" in llm.requests[1][-1]["content"]


def test_an_action_whose_input_was_whole_before_the_cut_runs():
    rambling = LLMResponse(ACTION + "\nThought: and then I will ramble on and on", finish_reason="length")
    llm = ScriptedLLM([rambling, "Thought: Do I need to use a tool? No\nAI: 1517"])
    assert Engine(llm, [multiply]).run("37*41?").output == "1517" and RUNS == [(37, 41)]
