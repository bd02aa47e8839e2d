"""The seeds' own examples, end to end on tiny models: Visual ChatGPT's chains through the ReAct app, and
HuggingGPT's requests through the planner. Each checks the chained file names, that the files exist and
open, and how many times the LLM was called. A scripted controller plays the LLM; the tools are real."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.experts.tiny import BUILDERS
from chatgpt_tool_hub.experts.tiny.diffusion import build_diffusion_suite
from chatgpt_tool_hub.experts.tiny.samples import fast_settings
from chatgpt_tool_hub.testing import ScriptedLLM

pytestmark = pytest.mark.slow
U = "[0-9a-f]{8}"
TOOLS = ("depth-estimation", "image-to-canny", "image-to-pose", "object-detection", "image-captioning",
         "text-to-speech", "text-to-video")
DIFFUSION = ("depth-to-image", "edit-image", "canny-to-image", "pose-to-image", "remove-object", "replace-object")


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    root = tmp_path_factory.mktemp("seeds")
    values = build_diffusion_suite(root / "diffusion", DIFFUSION)  # one shared tiny base, as in production
    for name in TOOLS:
        values[f"{name.replace('-', '_')}_model"] = BUILDERS[name](root / name)
    for name in (*TOOLS, *DIFFUSION):
        values.update(fast_settings(name))
    return {**values, "object_detection_threshold": 0.0, "expert_device": "cpu", "no_default": True,
            "planner_model_selection": "downloads"}


def picture(path: Path, size=(64, 48)) -> str:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (40, 160, 60))
    ImageDraw.Draw(image).ellipse((8, 8, 30, 30), fill=(220, 30, 30))
    image.save(path)
    return str(path)


def opens(path: Path) -> tuple:
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        return image.format, image.size


def act(tool: str, value) -> str:
    return f"Thought: Do I need to use a tool? Yes\nAction: {tool}\nAction Input: {json.dumps(value)}"


def uploaded(messages) -> str:
    """The name the app gave the image handed over (``image/{uuid}.png``), as announced to the model."""
    said = [m for m in messages if m["role"] != "system"]  # the system prompt's examples name files too
    return re.search(rf"image/{U}\.png", json.dumps(said)).group(0)


def made(messages, op: str) -> str:
    """The file of operation ``op`` named in the last observation."""
    last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return re.findall(rf"image/{U}_{op}_{U}_{U}\.png", last)[-1]


def visual_chatgpt(settings, workspace: Path, tools: list[str], script: list, question: str):
    llm = ScriptedLLM([*script, lambda m: "Thought: Do I need to use a tool? No\nAI: done"])
    app = AppFactory().create_app(tools_list=tools, llm=llm, workspace_dir=str(workspace), **settings)
    result = app.run(question, files=[picture(workspace.parent / f"{workspace.name}-upload.png")])
    assert result.output == "done" and all(s.status == "ok" for s in result.steps), result.steps
    org = re.search(rf"image/({U})\.png", json.dumps(llm.requests[0][1:])).group(1)
    return result, llm, org


def chain_of(result, ops: list[str], org: str) -> list[str]:
    """The output of each step, checked to be ``{uuid}_{op}_{prev}_{org}.png`` of the step before."""
    names, prev = [], org
    for step, op in zip(result.steps, ops, strict=False):
        match = re.search(rf"image/({U})_{op}_{prev}_{org}\.png", step.observation)
        assert match, (op, prev, step.observation)
        names.append(match.group(0))
        prev = match.group(1)
    return names


def test_visual_chatgpt_depth_then_depth_to_image_then_edit_image(settings, tmp_path):
    """"Generate a red flower conditioned on the predicted depth of this image, then make it look like a cartoon."""
    script = [lambda m: act("depth-estimation", {"image": uploaded(m)}),
              lambda m: act("depth-to-image", {"image": made(m, "depth"), "text": "a red flower"}),
              lambda m: act("edit-image", {"image": made(m, "depth2image"), "text": "make it look like a cartoon"})]
    result, llm, org = visual_chatgpt(settings, tmp_path, ["depth-estimation", "depth-to-image", "edit-image"],
                                      script, "generate a red flower conditioned on the predicted depth of this "
                                              "image, then make it look like a cartoon")
    for name in chain_of(result, ["depth", "depth2image", "pix2pix"], org):
        assert opens(tmp_path / name)[0] == "PNG"
    assert llm.calls == 4


def test_visual_chatgpt_remove_then_replace(settings, tmp_path):
    script = [lambda m: act("remove-object", {"image": uploaded(m), "object": "the ball"}),
              lambda m: act("replace-object", {"image": made(m, "remove-something"), "object": "the grass",
                                               "replacement": "sand"})]
    result, llm, org = visual_chatgpt(settings, tmp_path, ["remove-object", "replace-object"], script,
                                      "remove the ball, then replace the grass with sand")
    names = chain_of(result, ["remove-something", "replace-something"], org)
    for name in names:  # drawn at the working size (remove_object_size), in the picture's proportions
        kind, (width, height) = opens(tmp_path / name)
        assert kind == "PNG" and width * 48 == height * 64, (name, width, height)
    assert llm.calls == 3


def test_visual_chatgpt_canny_then_canny_to_image(settings, tmp_path):
    script = [lambda m: act("image-to-canny", {"image": uploaded(m)}),
              lambda m: act("canny-to-image", {"image": made(m, "edge"), "text": "a glass ball"})]
    result, llm, org = visual_chatgpt(settings, tmp_path, ["image-to-canny", "canny-to-image"], script,
                                      "draw a glass ball with the edges of this picture")
    edge, drawn = chain_of(result, ["edge", "canny2image"], org)
    assert opens(tmp_path / edge) == ("PNG", (64, 48)) and opens(tmp_path / drawn)[0] == "PNG"
    assert llm.calls == 3


# ---- HuggingGPT --------------------------------------------------------------------------------------


def planner(settings, workspace: Path, tools: list[str], plan: list[dict], monkeypatch):
    monkeypatch.chdir(workspace.parent)
    llm = ScriptedLLM([json.dumps(plan), "Here is what I found."])
    app = AppFactory().create_app(app_type="planner", tools_list=tools, llm=llm, workspace_dir=str(workspace),
                                  **settings)
    return app, llm


def test_hugginggpt_how_many_objects_in_example1(settings, tmp_path, monkeypatch):
    picture(tmp_path / "example1.jpg")
    plan = [{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "example1.jpg"}}]
    app, llm = planner(settings, tmp_path / "ws", ["object-detection"], plan, monkeypatch)
    result = app.run("How many objects are in the picture example1.jpg?")
    task = result.tasks[0]
    assert task.status == "ok" and re.search(r"Found \d+ object", task.output)
    assert re.fullmatch(rf"image/{U}_detect_{U}_{U}\.png", task.resource), task.resource
    assert opens(tmp_path / "ws" / task.resource)[0] == "PNG"
    assert llm.calls == 2 and result.output == "Here is what I found."  # plan + response: the model is fixed


def test_hugginggpt_three_images_in_parallel(settings, tmp_path, monkeypatch):
    for i in (1, 2, 3):
        picture(tmp_path / f"zebra{i}.jpg")
    plan = [{"task": "object-detection", "id": i, "dep": [-1], "args": {"image": f"zebra{i + 1}.jpg"}}
            for i in range(3)]
    app, llm = planner(settings, tmp_path / "ws", ["object-detection"], plan, monkeypatch)
    result = app.run("How many zebras are in zebra1.jpg, zebra2.jpg and zebra3.jpg altogether?")
    assert [t.status for t in result.tasks.values()] == ["ok"] * 3
    starts = sorted(t.started for t in result.tasks.values())
    ends = sorted(t.ended for t in result.tasks.values())
    assert starts[-1] < ends[0]  # dispatched together: all three started before the first one ended
    assert len({t.resource for t in result.tasks.values()}) == 3
    assert all(opens(tmp_path / "ws" / t.resource)[0] == "PNG" for t in result.tasks.values())
    assert llm.calls == 2


def test_hugginggpt_same_pose_then_describe_it_with_your_voice(settings, tmp_path, monkeypatch):
    """"A girl reading a book with the same pose as the boy in example.jpg, then describe it with your voice.\""""
    picture(tmp_path / "example.jpg")
    plan = [{"task": "openpose-control", "id": 0, "dep": [-1], "args": {"image": "example.jpg"}},
            {"task": "openpose-text-to-image", "id": 1, "dep": [0],
             "args": {"text": "a girl reading a book", "image": "<resource>-0"}},
            {"task": "image-to-text", "id": 2, "dep": [1], "args": {"image": "<resource>-1"}},
            {"task": "text-to-speech", "id": 3, "dep": [2], "args": {"text": "<resource>-2"}}]
    tools = ["image-to-pose", "pose-to-image", "image-captioning", "text-to-speech"]
    app, llm = planner(settings, tmp_path / "ws", tools, plan, monkeypatch)
    result = app.run("Generate an image of a girl reading a book with the same pose as the boy in example.jpg, "
                     "then describe the new image with your voice")
    pose, drawn, caption, speech = (result.tasks[i] for i in range(4))
    assert [t.status for t in (pose, drawn, caption, speech)] == ["ok"] * 4
    assert [t.tool for t in (pose, drawn, caption, speech)] == tools  # JARVIS and HF names resolved
    org = re.fullmatch(rf"image/({U})_pose_{U}_({U})\.png", pose.resource)
    assert org, pose.resource
    assert re.fullmatch(rf"image/{U}_pose2image_{pose.resource[6:14]}_{org.group(2)}\.png", drawn.resource)
    assert speech.args["text"] == caption.resource and "shows" not in caption.resource  # the bare caption
    assert re.fullmatch(rf"audio/{U}\.wav", speech.resource) and (tmp_path / "ws" / speech.resource).is_file()
    assert all(opens(tmp_path / "ws" / t.resource)[0] == "PNG" for t in (pose, drawn))
    assert llm.calls == 2


def test_hugginggpt_text_to_video(settings, tmp_path, monkeypatch):
    from chatgpt_tool_hub.runtime.video_io import video_info

    plan = [{"task": "text-to-video", "id": 0, "dep": [-1], "args": {"text": "a red ball rolling on the grass"}}]
    app, llm = planner(settings, tmp_path / "ws", ["text-to-video"], plan, monkeypatch)
    result = app.run("make a short video of a red ball rolling on the grass")
    task = result.tasks[0]
    assert task.status == "ok" and re.fullmatch(rf"video/{U}\.gif", task.resource), task.resource
    assert video_info(tmp_path / "ws" / task.resource)["frames"] == 2
    assert llm.calls == 2
