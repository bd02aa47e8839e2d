"""Files handed to an app: copied the Visual ChatGPT way, described, announced."""

from __future__ import annotations

import re
import wave

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import UserError
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools import tool

from helpers import act, answer

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def picture(tmp_path):
    path = tmp_path / "holiday photo.jpg"
    Image.new("RGB", (2000, 1000), (200, 30, 30)).save(path)
    return path


@tool(name="image-captioning", description="Describe an image.")
def fake_captioner(image: str) -> str:
    return "a red rectangle"


def make_app(replies, tools=(), **kw):
    llm = ScriptedLLM(replies)
    app = AppFactory().create_app(tools_list=list(tools), llm=llm, no_default=True, **kw)
    return app, llm


def test_ask_with_an_image_copies_resizes_describes_and_announces(picture, tmp_path):
    workspace = tmp_path / "ws"
    app, llm = make_app([answer("It is red.")], tools=[fake_captioner], workspace_dir=str(workspace))
    assert app.ask("What colour is my photo?", files=[picture]) == "It is red."
    sent = llm.requests[0]
    announce, ack, question = sent[-3], sent[-2], sent[-1]
    name = re.search(r"image/[0-9a-f]+\.png", announce["content"]).group(0)
    assert "a red rectangle" in announce["content"] and "never imagine" in announce["content"]
    assert announce["content"].startswith("I provide an image named image/")
    assert ack == {"role": "assistant", "content": "Received."}
    assert question["content"] == "What colour is my photo?"
    with Image.open(workspace / name) as saved:
        assert saved.size == (512, 256)
    assert "never imagine its content" in sent[0]["content"]
    app2_history = app.history()
    assert any(name in m["content"] for m in app2_history)  # kept for later questions


def test_the_model_can_use_the_announced_name_with_a_tool(picture, tmp_path):
    seen = []

    @tool(name="image-size", description="Size of an image.")
    def image_size(image: str) -> str:
        with Image.open(tmp_path / "ws" / image) as im:
            seen.append(image)
            return f"{im.size[0]}x{im.size[1]}"

    def use_the_file(messages):
        name = re.search(r"image/[0-9a-f]+\.png", messages[-3]["content"]).group(0)
        return act("image-size", name)

    app, _ = make_app([use_the_file, answer("512x256")], tools=[image_size], workspace_dir=str(tmp_path / "ws"))
    result = app.run("how big?", files=[str(picture)])
    assert result.steps[0].observation == "512x256" and seen


def test_add_file_and_wav_audio(tmp_path):
    path = tmp_path / "voice.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 1600)
    app, llm = make_app([answer("heard")], workspace_dir=str(tmp_path / "ws"))
    name = app.add_file(path)
    assert re.fullmatch(r"audio/[0-9a-f]+\.wav", name) and (tmp_path / "ws" / name).is_file()
    app.ask("what did I send?")
    assert name in llm.requests[0][-3]["content"]


def test_files_with_chat_history_are_announced_for_that_run(picture, tmp_path):
    app, llm = make_app([answer("ok")], workspace_dir=str(tmp_path / "ws"))
    app.ask("look", [{"role": "user", "content": "look"}], files=[picture])
    assert "image/" in llm.requests[0][-3]["content"]
    assert app.history() == []


@pytest.mark.parametrize("bad", ["missing.png", "notes.txt"])
def test_bad_files_are_user_errors_before_any_llm_call(tmp_path, bad):
    (tmp_path / "notes.txt").write_text("hi")
    app, llm = make_app([answer("x")], workspace_dir=str(tmp_path / "ws"))
    with pytest.raises(UserError):
        app.ask("q", files=[tmp_path / bad])
    assert llm.requests == []


def test_chinese_announcement(picture, tmp_path):
    app, llm = make_app([answer("红色")], tools=[fake_captioner], workspace_dir=str(tmp_path / "ws"))
    app.ask("这张图片是什么颜色？", files=[picture])
    assert "我提供了一个图片" in llm.requests[0][-3]["content"] and llm.requests[0][-2]["content"] == "收到。"


def test_planner_app_takes_files_too(picture, tmp_path):
    llm = ScriptedLLM(["[]\nAnswer: a red picture"])
    app = AppFactory().create_app(app_type="planner", tools_list=[fake_captioner], llm=llm, no_default=True,
                                  workspace_dir=str(tmp_path / "ws"))
    app.ask("what is in my picture?", files=[picture])
    planning = " ".join(m["content"] for m in llm.requests[0])
    assert re.search(r"image/[0-9a-f]+\.png", planning)


def test_images_without_pillow_say_which_extra_to_install(picture, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)
    app, llm = make_app([answer("x")], workspace_dir=str(tmp_path / "ws"))
    with pytest.raises(UserError, match=r"chatgpt-tool-hub\[experts\]"):
        app.ask("q", files=[picture])
    assert llm.requests == []
