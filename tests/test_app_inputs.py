"""What an app takes with a question: one path is one file; the split app core keeps its sessions and runs apart."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory, PlannerApp
from chatgpt_tool_hub.apps.app import App
from chatgpt_tool_hub.apps.history import as_files
from chatgpt_tool_hub.apps.sessions import Sessions
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import answer


def _wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 1600)
    return path


@pytest.mark.parametrize("as_given", [str, Path], ids=["str", "PathLike"])
def test_one_path_is_one_file_not_a_list_of_characters(tmp_path, as_given):
    path = _wav(tmp_path / "voice.wav")
    llm = ScriptedLLM([answer("heard")])
    app = AppFactory().create_app(tools_list=[], llm=llm, no_default=True, workspace_dir=str(tmp_path / "ws"))
    assert app.ask("what did I send?", files=as_given(path)) == "heard"
    announcements = [m["content"] for m in llm.requests[0] if "audio/" in str(m["content"])]
    assert len(announcements) == 1 and re.search(r"audio/[0-9a-f]+\.wav", announcements[0])
    app.close()


@pytest.mark.parametrize("app_type", ["victorinox", "planner"])
def test_every_app_hands_one_path_to_its_announcer_as_one_source(app_type):
    seen = []

    def announcer(source, language, tools):
        seen.append(source)
        return [{"role": "user", "content": f"I provide {source}"}, {"role": "assistant", "content": "Received."}], "x"

    llm = ScriptedLLM([answer("ok")] if app_type == "victorinox" else ["[]", "ok"])
    cls = App if app_type == "victorinox" else PlannerApp
    app = cls(llm, [], file_announcer=announcer)
    app.ask("look at it", files="photo.png")
    assert seen == ["photo.png"]
    app.close()


def test_as_files_takes_paths_objects_and_collections():
    assert as_files("a.png") == ("a.png",) and as_files(b"a.png") == (b"a.png",)
    assert as_files(Path("a.png")) == (Path("a.png"),)
    assert as_files(["a.png", "b.wav"]) == ("a.png", "b.wav") and as_files(("a.png",)) == ("a.png",)
    assert as_files(None) == () and as_files(()) == () and as_files("") == ()
    image = object()  # a PIL image: one object, not iterable
    assert as_files(image) == (image,)


def test_sessions_evict_idle_and_excess_but_never_a_busy_one():
    now = [0.0]
    sessions = Sessions(lambda: now[0])
    sessions.memory("a", 100)
    now[0] += 10
    sessions.enter("b")  # a run in flight
    now[0] += 10
    sessions.memory("c", 100)
    assert sessions.ids() == ["a", "b", "c"]
    assert sessions.prune(max_sessions=2, ttl_s=0) == ["a"]  # the least recently used
    assert sessions.prune(max_sessions=1, ttl_s=0) == ["c"]  # "b" is older but busy
    now[0] += 100
    assert sessions.prune(max_sessions=0, ttl_s=50) == [] and sessions.ids() == ["b"]  # idle, but busy
    sessions.leave("b")  # the run ends: "b" counts as used now
    now[0] += 30
    assert sessions.prune(max_sessions=0, ttl_s=50) == []
    now[0] += 30
    assert sessions.prune(max_sessions=0, ttl_s=50) == ["b"] and sessions.ids() == []
