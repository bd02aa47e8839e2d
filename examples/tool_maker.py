"""The LLM writes a tool: tool-maker turns a Python function into a tool of the session, run in the sandbox.

Run it from the repository root (no key, no network):

    python examples/tool_maker.py

A ScriptedLLM plays the model in session "alice": it makes a unit-conversion
tool (a name, a description, a JSON schema and the source of a function),
calls it twice, lists the session's tools and removes one. The function runs
in a worker process of the session (the python tool's sandbox), never in this
process: the script prints both process ids. Session "bob" asks for the same
tool and is refused. tool-maker is dangerous (it defines code), so the app's
approver is asked before every call; here it prints the action and allows it.
"""

from __future__ import annotations

import json
import os
import tempfile

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM

SOURCE = '''
import os

FACTORS = {("km", "mi"): 0.621371, ("mi", "km"): 1.609344, ("kg", "lb"): 2.204623, ("lb", "kg"): 0.453592}


def unit_convert(value, source, target):
    """Convert between km/mi and kg/lb."""
    if (source, target) not in FACTORS:
        raise ValueError(f"cannot convert {source} to {target}; known: {sorted(FACTORS)}")
    print(f"converted in process {os.getpid()}")
    return round(value * FACTORS[(source, target)], 3)
'''

MAKE = {"action": "make", "name": "unit-convert", "description": "Convert a value between km/mi and kg/lb.",
        "parameters": {"type": "object", "required": ["value", "source", "target"],
                       "properties": {"value": {"type": "number"},
                                      "source": {"type": "string", "enum": ["km", "mi", "kg", "lb"]},
                                      "target": {"type": "string", "enum": ["km", "mi", "kg", "lb"]}}},
        "source": SOURCE}
DOUBLE = {"action": "make", "name": "double", "description": "Twice a number.",
       "parameters": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
       "source": "def double(x):\n    return 2 * x\n"}


def act(arguments: dict) -> str:
    return f"Action: tool-maker\nAction Input: {json.dumps(arguments)}"


def call(name: str, **arguments) -> str:
    return act({"action": "call", "name": name, "arguments": arguments})


def approve(tool: str, tool_input) -> bool:
    print(f"  (approver: {tool} {tool_input.get('action') if isinstance(tool_input, dict) else tool_input}: yes)")
    return True


def main() -> None:
    llm = ScriptedLLM([
        act(MAKE), call("unit-convert", value=42.195, source="km", target="mi"),
        call("unit-convert", value=1, source="km", target="kg"), act(DOUBLE), act({"action": "list"}),
        act({"action": "remove", "name": "double"}), "AI: A marathon is 26.219 miles.",
        call("unit-convert", value=5, source="km", target="mi"), "AI: I have no such tool.",
    ])
    app = AppFactory().create_app(tools_list=["tool-maker"], llm=llm, no_default=True, approve=approve,
                                  workspace_dir=tempfile.mkdtemp(prefix="tool-hub-maker-"), think_depth=6)
    print(f"this process: {os.getpid()}")
    result = app.run("Make a unit converter and tell me how long a marathon is in miles", session_id="alice")
    for step in result.steps:
        print(f"--- {step.tool} ({step.status})\n{step.observation}")
    print("answer:", result.output)
    maker = app.tools[0]
    print("alice's tools now:", [tool.name for tool in maker.tools_for("alice")])
    other = app.run("Convert 5 km to miles", session_id="bob")
    print(f"--- bob: {other.steps[0].observation}")
    app.close()


if __name__ == "__main__":
    main()
