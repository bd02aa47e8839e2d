"""tool-maker: a function the LLM writes becomes a tool of its session, run in the sandbox worker."""

from __future__ import annotations

import json
import os

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import main_tool_register
from chatgpt_tool_hub.tools.base import ToolContext

from helpers import act, answer

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the python tool keeps workers per session on POSIX")

BMI = {"action": "make", "name": "bmi", "description": "Body-mass index from weight and height.",
       "parameters": {"type": "object", "properties": {"kg": {"type": "number"}, "m": {"type": "number"}},
                      "required": ["kg", "m"]},
       "source": "def bmi(kg, m):\n    print('computing')\n    return round(kg / m ** 2, 1)\n"}
PID = {"action": "make", "name": "whereami", "description": "The process id and folder the code runs in.",
       "source": "import os\n\ndef whereami():\n    return {'pid': os.getpid(), 'cwd': os.getcwd()}\n"}


def call(name, **arguments):
    return json.dumps({"action": "call", "name": name, "arguments": arguments})


@pytest.fixture
def maker(isolated_env):
    tool = main_tool_register.build("tool-maker", workspace_dir="workspace", python_timeout=20)
    yield tool
    tool.close()


def alice():
    return ToolContext(session_id="alice")


def test_it_is_registered_dangerous_and_not_a_default():
    entry = {e.name: e for e in main_tool_register.entries()}["tool-maker"]
    assert not entry.default
    tool = main_tool_register.build("tool-maker")
    assert tool.dangerous is True
    tool.close()


def test_make_call_list_remove_in_an_app_with_approval(isolated_env):
    approvals = []

    def approve(name, tool_input):
        arguments = tool_input if isinstance(tool_input, dict) else json.loads(tool_input)
        approvals.append((name, arguments["action"]))
        return True

    llm = ScriptedLLM([act("tool-maker", json.dumps(BMI)), act("tool-maker", call("bmi", kg=70, m=1.75)),
                       act("tool-maker", '{"action": "list"}'), act("tool-maker", '{"action": "remove", "name": "bmi"}'),
                       answer("Your BMI is 22.9.")])
    app = AppFactory().create_app(tools_list=["tool-maker"], llm=llm, no_default=True, workspace_dir="workspace",
                                  approve=approve, think_depth=5)
    result = app.run("Make a BMI tool and use it for 70 kg, 1.75 m", session_id="alice")
    made, used, listed, removed = (step.observation for step in result.steps)
    assert made.startswith("Made the tool 'bmi' for this session: Body-mass index from weight and height.")
    assert '"arguments": {"kg": 1.0, "m": 1.0}' in made
    assert used == "computing\n22.9"                        # what it printed, then its return value as JSON
    assert "- bmi: Body-mass index" in listed and "kg: number, required" in listed
    assert removed == "Removed the tool 'bmi' from this session."
    assert approvals == [("tool-maker", "make"), ("tool-maker", "call"), ("tool-maker", "list"),
                         ("tool-maker", "remove")]           # asked before every call
    assert app.tools[0].tools_for("alice") == []
    app.close()


def test_a_refused_approval_makes_nothing(isolated_env):
    llm = ScriptedLLM([act("tool-maker", json.dumps(BMI)), answer("I was not allowed to.")])
    app = AppFactory().create_app(tools_list=["tool-maker"], llm=llm, no_default=True, workspace_dir="workspace",
                                  approve=lambda name, tool_input: False)
    result = app.run("Make a BMI tool")
    assert result.steps[0].status == "denied" and app.tools[0].tools_for("default") == []
    app.close()


def test_the_function_runs_in_the_sessions_sandbox_worker_not_in_the_app(maker, isolated_env):
    maker.run(PID, alice())
    out = maker.run({"action": "call", "name": "whereami"}, alice())
    where = json.loads(out)
    assert where["pid"] != os.getpid()                                          # another process
    assert os.path.realpath(where["cwd"]) == os.path.realpath(isolated_env / "workspace")
    assert set(maker.python.worker_pids()) == {"alice"}                          # the session's worker
    again = json.loads(maker.run({"action": "call", "name": "whereami"}, alice()))
    assert again["pid"] == where["pid"]                                          # kept between calls
    maker.python.reset("alice")                                                  # the worker is gone ...
    fresh = json.loads(maker.run({"action": "call", "name": "whereami"}, alice()))
    assert fresh["pid"] != where["pid"]                                          # ... the tool still works


def test_another_session_can_neither_call_nor_list_it(maker):
    maker.run(BMI, alice())
    bob = ToolContext(session_id="bob")
    with pytest.raises(ToolInputError, match=r"no tool named 'bmi' was made in this session .* has: \(none\)"):
        maker.run({"action": "call", "name": "bmi", "arguments": {"kg": 1, "m": 1}}, bob)
    assert maker.run({"action": "list"}, bob).startswith("No tools were made in this session")
    with pytest.raises(ToolInputError, match="no tool named 'bmi'"):
        maker.run({"action": "remove", "name": "bmi"}, bob)
    made = maker.tools_for("alice")[0]
    with pytest.raises(ToolInputError, match="belongs to another session"):
        made.run({"kg": 70, "m": 1.75}, bob)                  # the tool object itself checks the session
    assert made.run({"kg": 70, "m": 1.75}, alice()) == "computing\n22.9"
    assert maker.tools_for("bob") == []


def test_in_an_app_another_session_is_refused(isolated_env):
    llm = ScriptedLLM([act("tool-maker", json.dumps(BMI)), answer("made"),
                       act("tool-maker", call("bmi", kg=70, m=1.75)), answer("not here")])
    app = AppFactory().create_app(tools_list=["tool-maker"], llm=llm, no_default=True, workspace_dir="workspace",
                                  approve=lambda name, tool_input: True)
    app.run("make it", session_id="alice")
    other = app.run("use it", session_id="bob")
    assert "no tool named 'bmi' was made in this session" in other.steps[0].observation
    app.reset("alice")                                        # forgetting a session forgets its tools
    assert app.tools[0].tools_for("alice") == []
    app.close()


def test_removed_tools_are_gone(maker):
    maker.run(BMI, alice())
    maker.run({"action": "remove", "name": "bmi"}, alice())
    with pytest.raises(ToolInputError, match="this session has: \\(none\\)"):
        maker.run({"action": "call", "name": "bmi", "arguments": {"kg": 1, "m": 1}}, alice())


def test_arguments_are_validated_against_the_tools_schema(maker):
    maker.run(BMI, alice())
    with pytest.raises(ToolInputError, match="'m' is a required property"):
        maker.run({"action": "call", "name": "bmi", "arguments": {"kg": 70}}, alice())
    with pytest.raises(ToolInputError, match="height"):
        maker.run({"action": "call", "name": "bmi", "arguments": {"kg": 70, "m": 1.8, "height": 2}}, alice())
    coerced = maker.run({"action": "call", "name": "bmi", "arguments": {"kg": "70", "m": 1.75}}, alice())
    assert coerced.startswith("computing\n22.9") and "[input adjusted" in coerced


@pytest.mark.parametrize("change,message", [
    ({"name": "Bad Name"}, "is not allowed"),
    ({"source": "def bmi(kg, m)\n    return 1"}, "not valid Python"),
    ({"source": "def one(): pass\ndef two(): pass"}, "must define a function named bmi"),
    ({"source": ""}, "needs the Python \"source\""),
    ({"parameters": {"type": "object", "properties": {"kg": {"type": "array", "minItems": -1}}}},
     "not a valid JSON schema"),
    ({"source": "import no_such_module_anywhere\ndef bmi(kg, m): return 0"}, "failed when it was defined"),
])
def test_bad_definitions_are_refused_with_the_reason(maker, change, message):
    with pytest.raises(ToolInputError, match=message):
        maker.run({**BMI, **change}, alice())
    assert maker.tools_for("alice") == []


def test_limits_on_source_size_and_tool_count(isolated_env):
    maker = main_tool_register.build("tool-maker", workspace_dir="workspace", tool_maker_max_tools=1,
                                     tool_maker_max_source_chars=200)
    try:
        with pytest.raises(ToolInputError, match="tool_maker_max_source_chars"):
            maker.run({**BMI, "source": "def bmi(kg, m):\n    return 0\n" + "#" * 300}, alice())
        maker.run(BMI, alice())
        with pytest.raises(ToolInputError, match="tool_maker_max_tools"):
            maker.run({**BMI, "name": "bmi2"}, alice())
        assert maker.run(BMI, alice()).startswith("Replaced the tool 'bmi'")   # replacing is fine
    finally:
        maker.close()


def test_a_failing_function_shows_its_own_traceback_and_odd_results_their_repr(maker):
    maker.run({"action": "make", "name": "boom", "source": "def boom():\n    return 1 / 0\n"}, alice())
    with pytest.raises(ToolExecutionError) as err:
        maker.run({"action": "call", "name": "boom"}, alice())
    text = str(err.value)
    assert "ZeroDivisionError: division by zero" in text and 'File "<tool boom>", line 2, in boom' in text
    assert "__tool_hub_made" not in text                     # the wrapper's frames are left out
    maker.run({"action": "make", "name": "odd", "source": "def odd():\n    return {1, 2}\n"}, alice())
    assert maker.run({"action": "call", "name": "odd"}, alice()) == "{1, 2}"


def test_made_tools_can_work_with_workspace_files(maker, isolated_env):
    maker.run({"action": "make", "name": "count-lines", "parameters": {"path": {"type": "string"}},
               "source": "def count_lines(path):\n    with open(path) as f:\n        return sum(1 for _ in f)\n"},
              alice())
    (isolated_env / "workspace" / "data.txt").write_text("a\nb\nc\n")
    assert maker.run({"action": "call", "name": "count-lines", "arguments": {"path": "data.txt"}}, alice()) == "3"


def test_the_example_runs_offline(tmp_path):
    from test_examples import EXAMPLES, ok, run_python

    out = ok(run_python(EXAMPLES / "tool_maker.py", tmp_path))
    this = int(out.split("this process: ")[1].split()[0])
    worker = int(out.split("converted in process ")[1].split()[0])
    assert worker != this                                     # the function ran in the sandbox worker
    assert "\n26.219\n" in out and "ValueError: cannot convert km to kg" in out
    assert "Removed the tool 'double' from this session." in out
    assert "alice's tools now: ['unit-convert']" in out
    assert "bob: Error: no tool named 'unit-convert' was made in this session" in out
    assert out.count("(approver: tool-maker") == 7


def test_a_made_tool_is_offered_by_name_in_the_sessions_next_questions(isolated_env):
    asked = []
    llm = ScriptedLLM([act("tool-maker", json.dumps(BMI)), answer("made it"),
                       act("bmi", '{"kg": 70, "m": 1.75}'), answer("22.9"),
                       act("bmi", '{"kg": 70, "m": 1.75}'), answer("no such tool")])
    app = AppFactory().create_app(tools_list=["tool-maker"], llm=llm, no_default=True, workspace_dir="workspace",
                                  approve=lambda name, tool_input: asked.append(name) or True, think_depth=3)
    try:
        app.run("make a BMI tool", session_id="alice")
        used = app.run("BMI of 70 kg, 1.75 m?", session_id="alice")
        assert used.steps[0].observation == "computing\n22.9"
        made_line = "bmi: Body-mass index from weight and height."
        assert made_line in llm.requests[2][0]["content"] and made_line not in llm.requests[0][0]["content"]
        other = app.run("BMI of 70 kg, 1.75 m?", session_id="bob")  # bob never made it
        assert other.steps[0].status != "ok" and made_line not in llm.requests[4][0]["content"]
        assert asked == ["tool-maker", "bmi"]  # the made tool asks the approver too
    finally:
        app.close()
