"""Your own tool next to the python tool, and what a run returns.

Run it from the repository root (no key, no network):

    python examples/custom_tool.py

A function with two parameters becomes a tool with @tool; its JSON schema
comes from the signature and the docstring. A ScriptedLLM plays the model: its
first call sends plain text where the tool needs a JSON object, so the
validation error comes back as an observation and the "model" corrects itself;
then it converts a temperature with the new tool and does arithmetic with the
real python tool. The script prints the schema, every RunResult step and the
token usage.
"""

from __future__ import annotations

import json
import tempfile

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool


@tool(name="convert-temperature")
def convert_temperature(value: float, to: str = "C") -> float:
    """Convert a temperature between Celsius and Fahrenheit.

    Args:
        value: the temperature to convert
        to: the unit to convert to, "C" or "F"
    """
    if to.upper() == "C":
        return round((value - 32) * 5 / 9, 2)
    if to.upper() == "F":
        return round(value * 9 / 5 + 32, 2)
    raise ValueError(f"unknown unit {to!r}; use 'C' or 'F'")


def last_observation(messages: list[dict]) -> str:
    return messages[-1]["content"].removeprefix("Observation:").strip()


def script() -> ScriptedLLM:
    return ScriptedLLM([
        # plain text, but the tool takes a JSON object: the error becomes an observation
        "Thought: Do I need to use a tool? Yes\nAction: convert-temperature\nAction Input: 98.6 F",
        'Thought: I must send a JSON object.\nAction: convert-temperature\nAction Input: {"value": 98.6, "to": "C"}',
        lambda messages: ("Thought: Now the difference to 36.6 °C.\nAction: python\n"
                          f"Action Input: round({last_observation(messages)} - 36.6, 1)"),
        lambda messages: ("Thought: Do I need to use a tool? No\n"
                          f"AI: 98.6 °F is 37.0 °C, {last_observation(messages)} °C above 36.6 °C."),
    ])


def main() -> None:
    print("tool:", convert_temperature.name, "-", convert_temperature.description)
    print("schema:", json.dumps(convert_temperature.parameters, ensure_ascii=False))

    llm = script()
    with tempfile.TemporaryDirectory(prefix="custom-tool-") as workspace:
        app = AppFactory().create_app(tools_list=["python", convert_temperature], llm=llm,
                                      no_default=True, workspace_dir=workspace)
        result = app.run("My thermometer says 98.6 °F. What is that in °C, and how far above 36.6 °C is it?")
        app.close()

    for number, step in enumerate(result.steps, 1):
        print(f"\nstep {number}: {step.tool} status={step.status}")
        print(f"  thought: {step.thought}")
        print(f"  input: {step.tool_input!r}")
        print(f"  -> {step.observation}")

    print(f"\nanswer: {result.output}")
    print(f"stopped by: {result.stopped_by}")
    print(f"LLM calls: {result.usage.llm_calls}")
    for number, usage in enumerate(result.usage.calls, 1):
        print(f"  call {number}: {usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens")
    total = result.usage.total
    print(f"total: {total.total_tokens} tokens{' (estimated offline)' if total.estimated else ''}")
    print("\nthe tool as the model saw it in the system prompt:")
    print(next(line for line in llm.requests[0][0]["content"].splitlines() if line.startswith("> convert")))


if __name__ == "__main__":
    main()
