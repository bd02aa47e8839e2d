"""The web page's logic without a browser: events -> chat messages, and each tab as a user of the server.

``Transcript`` is fed the events real apps emit (``ScriptedLLM`` drives them) and
the planner's; ``WebUsers`` runs over a real server state (``create_server``),
as the page does, so the tabs use the server's ``UserApps``, slots and limits.
The page's mount, its login and ``tool-hub serve --web`` are in test_web_serve.py;
the page in a real browser in test_web_browser.py.
"""

from __future__ import annotations

import asyncio
import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.events import ActionEvent, AnswerEvent, ErrorEvent, ObservationEvent, ThoughtEvent, TokenEvent
from chatgpt_tool_hub.llm.base import LLMResponse, ToolCall
from chatgpt_tool_hub.planner.events import PlanEvent, TaskEndEvent, TaskStartEvent
from chatgpt_tool_hub.server import create_server
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.web.transcript import Transcript, fenced
from chatgpt_tool_hub.web.users import WebUsers

from helpers import act, answer, echo

# ---- events -> messages ------------------------------------------------------------------------


def snapshots(events, mode="react"):
    """Feed ``events``; the transcript's messages after each one (deep enough copies)."""
    transcript = Transcript(mode)
    seen = []
    for event in events:
        transcript.feed(event)
        seen.append([{**m, "metadata": dict(m["metadata"])} if "metadata" in m else dict(m)
                     for m in transcript.messages])
    return transcript, seen


def blocks(messages):
    return [m for m in messages if m.get("metadata", {}).get("title")]


def test_a_react_run_is_one_step_block_then_the_answer_streamed(tmp_path):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("It is 42, computed.")], chunk_size=1)
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))
    try:
        transcript, seen = snapshots(list(app.stream("what is 6*7?")))
    finally:
        app.close()
    messages = transcript.messages
    step, thought, final = messages
    assert step["metadata"]["title"] == "Step 1: python" and step["metadata"]["status"] == "done"
    assert "Do I need to use a tool? Yes" in step["content"]
    assert "**Action:** `python`" in step["content"] and "print(6 * 7)" in step["content"]
    assert re.search(r"\*\*Observation:\*\*\n```text\n42\n```", step["content"])
    assert thought["metadata"] == {"title": "Thought", "status": "done"}
    assert "metadata" not in final and final["content"] == "It is 42, computed."
    # while the first reply streamed, it was a pending Thinking block
    assert any(s and s[0]["metadata"].get("title") == "Thinking" and s[0]["metadata"]["status"] == "pending"
               for s in seen)
    # the answer streamed into the message word by word before the answer event
    partial = [s[-1]["content"] for s in seen[:-1] if s and "metadata" not in s[-1]]
    assert partial[:3] == ["It ", "It is ", "It is 42, "]
    assert transcript.observations == ["42"] and transcript.steps == 1


def test_a_reply_that_could_not_be_read_is_shown_whole_before_the_feedback(tmp_path):
    broken = "Thought: Do I need to use a tool? Yes\nAction: python\nActon Input: print(1)"
    llm = ScriptedLLM([broken, answer("Done.")], chunk_size=4)
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, workspace_dir=str(tmp_path))
    try:
        transcript, _ = snapshots(list(app.stream("print 1")))
    finally:
        app.close()
    text = "\n".join(m["content"] for m in blocks(transcript.messages))
    assert "Acton Input: print(1)" in text  # the unreadable action is shown as it was written
    assert transcript.messages[-1]["content"] == "Done."


def test_native_tool_calls_the_thought_goes_into_the_step_and_the_reply_becomes_the_answer(tmp_path):
    llm = ScriptedLLM([LLMResponse("let me compute", tool_calls=[ToolCall("c1", "python", {"input": "print(1)"})]),
                       "The program printed 1."])
    app = AppFactory().create_app(tools_list=["python"], llm=llm, no_default=True, tool_calling="native",
                                  workspace_dir=str(tmp_path))
    try:
        transcript, seen = snapshots(list(app.stream("x")), mode="native")
    finally:
        app.close()
    step, final = transcript.messages  # no Thinking block is left over for the reply that was the answer
    assert step["metadata"]["title"] == "Step 1: python"
    assert step["content"].startswith("let me compute") and "print(1)" in step["content"]
    assert final == {"role": "assistant", "content": "The program printed 1."}
    assert any(blocks(s) and blocks(s)[-1]["metadata"]["title"] == "Thinking" and
               "The program printed" in blocks(s)[-1]["content"] for s in seen)  # shown as it came


def test_planner_tasks_running_in_parallel_each_get_their_observation():
    events = [PlanEvent("2 tasks"), TaskStartEvent("python", "print(1)", task_id=0),
              TaskStartEvent("echo", "hi", task_id=1), TaskEndEvent("echo", "echo: hi", task_id=1),
              TaskEndEvent("python", "1", task_id=0), TokenEvent("Both "), TokenEvent("ran."),
              AnswerEvent("Both ran.")]
    transcript, seen = snapshots(events, mode="planner")
    plan, python, echo_, final = transcript.messages
    assert plan["metadata"]["title"] == "Plan" and plan["content"] == "2 tasks"
    assert python["metadata"]["title"] == "Step 1: python" and python["content"].endswith("1\n```")
    assert echo_["metadata"]["title"] == "Step 2: echo" and "echo: hi" in echo_["content"]
    assert "echo: hi" not in python["content"]
    assert final["content"] == "Both ran."
    assert seen[5][-1]["content"] == "Both "  # the response streamed as the answer


def test_nested_steps_go_into_the_step_that_runs_them_and_errors_are_blocks():
    events = [ThoughtEvent("use the subtree"), ActionEvent("research", "find x"),
              ActionEvent("wikipedia", "x", depth=1), ObservationEvent("wikipedia", "x is a letter", depth=1),
              ObservationEvent("research", "x is a letter"), ErrorEvent("no Action Input", "ParseError"),
              AnswerEvent("x is a letter.")]
    transcript, _ = snapshots(events)
    step, error, final = transcript.messages
    assert step["metadata"]["title"] == "Step 1: research"
    assert "**wikipedia** ← `x`" in step["content"] and "→ x is a letter" in step["content"]
    assert error["metadata"] == {"title": "The reply could not be read", "status": "done"}
    assert error["content"] == "no Action Input"
    assert final["content"] == "x is a letter."


def test_a_run_that_ends_without_an_answer_closes_its_blocks_and_says_why():
    transcript, _ = snapshots([TokenEvent("Thought: hm\nAction: python\n"), ActionEvent("python", "1")])
    transcript.finish("stopped")
    step, note = transcript.messages
    assert step["metadata"]["status"] == "done"
    assert note == {"role": "assistant", "content": "⚠️ stopped"}


def test_fences_are_longer_than_any_backticks_inside():
    assert fenced("a ``` b") == "````text\na ``` b\n````"
    assert fenced("plain") == "```text\nplain\n```"


# ---- tabs as users --------------------------------------------------------------------------------


@pytest.fixture
def web(tmp_path):
    states = []

    def make(llm, **settings):
        settings.setdefault("serve_workspace_root", str(tmp_path / "users"))
        settings.setdefault("no_default", True)
        settings.setdefault("tools_list", ["python"])
        state = create_server(llm=llm, **settings).state.tool_hub
        states.append(state)
        (tmp_path / "uploads").mkdir(exist_ok=True)
        return WebUsers(state, upload_root=tmp_path / "uploads", outbox=tmp_path / "uploads" / "shown")

    yield make
    for state in states:
        state.apps.close()
        state.executor.shutdown(wait=False)


async def ask(users, tab, text, files=(), model="tool-hub", **kw):
    return [copy.deepcopy(shown) async for shown in users.ask(tab, model, text, files, **kw)]


def test_each_tab_is_its_own_user_workspace_and_python_session(web):
    llm = ScriptedLLM([act("python", "x = 5\nprint(x)"), answer("x is 5."),
                       act("python", "print(x)"), answer("x is not defined here.")])
    users = web(llm)
    alice, bob = users.tab("hash-alice"), users.tab("hash-bob")
    assert users.tab("hash-alice") is alice and alice.user != bob.user

    async def main():
        await ask(users, alice, "set x")
        return await ask(users, bob, "print x")

    shown = asyncio.run(main())
    step = blocks(shown[-1])[0]
    assert "NameError" in step["content"]  # bob's python session has no x
    folders = {users.state.apps.workspace(t.user).name for t in (alice, bob)}
    assert len(folders) == 2 and not any("hash-" in f for f in folders)  # the session id is not in the path
    assert len(users.state.apps.users()) == 2


def test_a_question_streams_and_the_conversation_is_kept_per_tab(web):
    llm = ScriptedLLM([act("python", "print(6 * 7)"), answer("It is 42."), answer("You asked about 6*7.")],
                      chunk_size=1)
    users = web(llm)
    tab = users.tab("h1")

    async def main():
        first = await ask(users, tab, "what is 6*7?")
        second = await ask(users, tab, "what did I ask?")
        return first, second

    first, second = asyncio.run(main())
    assert first[0] == [{"role": "user", "content": "what is 6*7?"}]  # the question shows at once
    assert any(blocks(s) and blocks(s)[-1]["metadata"]["status"] == "pending" for s in first)
    assert first[-1][-1] == {"role": "assistant", "content": "It is 42."}
    assert second[-1][0] == first[-1][0] and second[-1][-1]["content"] == "You asked about 6*7."
    assert tab.transcript == second[-1]
    assert "what is 6*7?" in str(llm.requests[2])  # the app remembers the conversation (its session)


def test_tools_turned_off_and_on_act_on_the_tabs_own_app_only(web):
    llm = ScriptedLLM([answer("ok"), answer("ok again"), answer("ok once more")])
    users = web(llm, tools_list=["python", echo])
    tab, other = users.tab("t1"), users.tab("t2")

    async def main():
        view = await users.view(tab, "tool-hub")
        assert view.tools == ["python", "echo"] and view.enabled == ["python", "echo"] and view.toggles
        await users.view(other, "tool-hub")
        view, notes = await users.configure(tab, "tool-hub", tools=["echo"])
        assert view.tools == ["python", "echo"] and view.enabled == ["echo"] and notes == []
        await ask(users, tab, "hi", tools=["echo"])
        apps = users.state.apps
        mine = apps.sessions_of(tab.user)["victorinox"]
        old_python = tab.shelf["victorinox"]["python"]
        await ask(users, tab, "hi", tools=["echo", "python"])
        assert mine.tool_names == ["echo", "python"] and mine.tools[1] is not old_python  # built anew
        assert apps.sessions_of(other.user)["victorinox"].tool_names == ["python", "echo"]
        return (await users.view(tab, "tool-hub")).tools

    assert asyncio.run(main()) == ["python", "echo"]  # the list keeps its order
    prompt = llm.requests[0][0]["content"]
    assert "echo" in prompt and "python:" not in prompt  # the model was not offered python
    assert "python" in llm.requests[1][0]["content"]


def test_think_depth_applies_and_the_planner_has_none(web):
    llm = ScriptedLLM([act("python", "print(1)"), act("python", "print(2)"), answer("never")])
    users = web(llm)
    tab = users.tab("t")

    async def main():
        view, _ = await users.configure(tab, "tool-hub", depth=1)
        assert view.depth == 1
        shown = await ask(users, tab, "loop", depth=1)
        planner = await users.view(tab, "tool-hub-planner")
        return shown, planner

    shown, planner = asyncio.run(main())
    steps = [b for b in blocks(shown[-1]) if b["metadata"]["title"].startswith("Step")]
    assert len(steps) == 1 and shown[-1][-1]["content"] == "never"  # one tool call, then the depth stopped it
    assert planner.depth is None and planner.toggles and planner.tools == ["python"]


def test_reset_forgets_the_chat_the_memory_and_the_python_state(web):
    llm = ScriptedLLM([act("python", "y = 1\nprint(y)"), answer("set"), act("python", "print(y)"), answer("gone")])
    users = web(llm)
    tab = users.tab("t")

    async def main():
        await ask(users, tab, "set y")
        await users.reset(tab)
        assert tab.transcript == []
        return await ask(users, tab, "print y")

    shown = asyncio.run(main())
    assert "NameError" in blocks(shown[-1])[0]["content"]
    assert "set y" not in str(llm.requests[2])


def test_uploads_are_handed_over_and_files_the_tools_write_are_shown(web, tmp_path):
    from PIL import Image

    def code(messages):
        name = re.search(r"named (image/\S+\.png)", str(messages)).group(1)
        return act("python", f"from PIL import Image\nImage.open('{name}').convert('L').save('image/grey.png')\n"
                             f"print('wrote image/grey.png from {name}')")

    llm = ScriptedLLM([code, answer("Here it is: image/grey.png")])
    users = web(llm)
    tab = users.tab("t")
    upload = tmp_path / "uploads" / "cat.png"
    Image.new("RGB", (16, 16), (200, 10, 10)).save(upload)
    outside = tmp_path / "secret.png"
    Image.new("RGB", (4, 4)).save(outside)

    async def main():
        refused = await ask(users, tab, "look", [str(outside)])
        shown = await ask(users, tab, "make it grey", [str(upload)])
        return refused, shown

    refused, shown = asyncio.run(main())
    assert refused[-1][-1]["content"] == "⚠️ secret.png: only files uploaded through this page can be handed over"
    assert llm.calls == 2  # the refused question never reached the model
    final = shown[-1]
    assert {"role": "user", "content": {"path": str(upload)}} in final  # the upload shows in the chat
    made = users.state.apps.workspace(tab.user) / "image" / "grey.png"
    files = [m["content"]["path"] for m in final if isinstance(m["content"], dict) and m["role"] == "assistant"]
    assert len(files) == 1  # the handed image is not shown as made
    shown = Path(files[0])  # a copy in the page's file cache: the workspace itself is never served
    assert shown.name == "grey.png" and shown.parent.parent == tmp_path / "uploads" / "shown"
    assert shown.read_bytes() == made.read_bytes()


def wav(path, seconds=0.1):
    import wave

    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\0\0" * int(8000 * seconds))
    return path


def test_audio_in_and_audio_and_video_out(web, tmp_path):
    def code(messages):
        name = re.search(r"named (audio/\S+\.wav)", str(messages)).group(1)
        return act("python", f"import shutil\nshutil.copy('{name}', 'echo.wav')\n"
                             f"open('clip.mp4', 'wb').write(b'not really a video')\nprint('echo.wav clip.mp4')")

    llm = ScriptedLLM([code, answer("Done: echo.wav and clip.mp4")])
    users = web(llm)
    tab = users.tab("t")
    voice = wav(tmp_path / "uploads" / "voice.wav")
    final = asyncio.run(ask(users, tab, "echo my voice", [str(voice)]))[-1]
    shown = [Path(m["content"]["path"]).name for m in final
             if isinstance(m["content"], dict) and m["role"] == "assistant"]
    assert shown == ["echo.wav", "clip.mp4"]
    assert "an audio named audio/" in str(llm.requests[0])


def test_the_planner_app_answers_with_its_plan_and_task_blocks(web):
    import json

    plan = json.dumps([{"task": "python", "id": 0, "dep": [-1], "args": {"text": "print(2 ** 5)"}}])
    users = web(ScriptedLLM([plan, "The program printed 32."]))
    final = asyncio.run(ask(users, users.tab("t"), "run print(2 ** 5)", model="tool-hub-planner"))[-1]
    titles = [b["metadata"]["title"] for b in blocks(final)]
    assert titles[0] == "Plan" and "Step 1: python" in titles
    step = next(b for b in blocks(final) if b["metadata"]["title"] == "Step 1: python")
    assert "32" in step["content"] and step["metadata"]["status"] == "done"
    assert final[-1] == {"role": "assistant", "content": "The program printed 32."}


def test_a_full_server_says_so_in_the_chat(web):
    llm = ScriptedLLM([answer("never")])
    users = web(llm, serve_max_concurrent_runs=1)
    assert users.state.slots.take()
    shown = asyncio.run(ask(users, users.tab("t"), "hi"))
    assert "serve_max_concurrent_runs" in shown[-1][-1]["content"] and llm.calls == 0
    users.state.slots.give()


def test_the_request_timeout_stops_a_run_from_the_page(web):
    llm = ScriptedLLM([act("python", "import time\ntime.sleep(30)"), answer("never")])
    users = web(llm, serve_request_timeout_s=1)
    tab = users.tab("t")
    shown = asyncio.run(ask(users, tab, "sleep"))
    assert "serve_request_timeout_s" in shown[-1][-1]["content"]
    python = users.state.apps.sessions_of(tab.user)["victorinox"].tools[0]
    assert python.worker_pids() == {}  # the sleeping worker was killed


def test_stopping_a_run_kills_its_tool_and_keeps_what_it_showed(web):
    from helpers import wait_gone

    llm = ScriptedLLM([act("python", "import time\ntime.sleep(30)"), answer("never")])
    users = web(llm)
    tab = users.tab("t")

    async def main():
        seen = []

        async def consume():
            async for shown in users.ask(tab, "tool-hub", "sleep"):
                seen.append(copy.deepcopy(shown))

        task = asyncio.ensure_future(consume())
        app = None
        while app is None or not app.tools[0].worker_pids():  # the python call is running
            await asyncio.sleep(0.02)
            app = users.state.apps.sessions_of(tab.user).get("victorinox")
        pid = next(iter(app.tools[0].worker_pids().values()))
        task.cancel()  # what the page's Stop does
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    pid = asyncio.run(main())
    assert wait_gone(pid, 10.0)
    assert tab.transcript[-1] == {"role": "assistant", "content": "⚠️ stopped"}
    assert blocks(tab.transcript)[0]["metadata"]["title"] == "Step 1: python"
    assert users.state.slots.used == 0  # its run slot was given back


def test_a_failing_run_is_a_message_never_a_traceback(web):
    users = web(ScriptedLLM([]))
    shown = asyncio.run(ask(users, users.tab("t"), "hi"))
    text = shown[-1][-1]["content"]
    assert text.startswith("⚠️ ") and "ran out of replies" in text and "Traceback" not in text


def test_closing_a_tab_ends_its_python_session(web):
    users = web(ScriptedLLM([act("python", "print(1)"), answer("one")]))
    tab = users.tab("t")

    async def main():
        await ask(users, tab, "one")
        python = users.state.apps.sessions_of(tab.user)["victorinox"].tools[0]
        assert python.worker_pids()
        await users.close_tab("t")
        return python

    python = asyncio.run(main())
    assert python.worker_pids() == {} and users.tabs() == []
    assert users.state.apps.sessions_of(tab.user) == {}  # its apps are closed now, not at the next prune


def test_the_package_imports_without_gradio():
    code = ("import sys, chatgpt_tool_hub.web, chatgpt_tool_hub.web.users, chatgpt_tool_hub.web.transcript\n"
            "print('gradio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
