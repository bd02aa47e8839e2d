"""Checked by mypy (tests/test_typing.py): the public API's types are what a user's editor shows."""

from typing_extensions import assert_type

from chatgpt_tool_hub import App, AppFactory, PlannerApp, RunResult, ScriptedLLM, Tool, tool
from chatgpt_tool_hub.engine.parser import Action, Finish, parse_output
from chatgpt_tool_hub.events import Event
from chatgpt_tool_hub.planner import PlanResult

factory = AppFactory()
app = factory.create_app(llm=ScriptedLLM(["AI: hi"]), no_default=True)
assert_type(app, App)
planner = factory.create_app("planner", llm=ScriptedLLM(["[]"]), no_default=True)
assert_type(planner, PlannerApp)
either = factory.create_app(str("victorinox"), llm=ScriptedLLM(["AI: hi"]))
assert_type(either, App | PlannerApp)

assert_type(app.ask("q"), str)
assert_type(app.run("q"), RunResult)
assert_type(planner.run("q"), PlanResult)
for event in app.stream("q"):
    assert_type(event, Event)
    if event.kind == "action":
        print(event.tool)  # narrowed to ActionEvent by its kind


@tool(name="echo", description="Echo.")
def echo(text: str) -> str:
    return text


as_tool: Tool = echo  # a FunctionTool is a Tool
assert_type(as_tool.run("x"), str)
parsed = parse_output("AI: x")
assert_type(parsed, Action | Finish)
