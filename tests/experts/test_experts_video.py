"""video-classification on a tiny random VideoMAE, on a GIF and an MP4 written with experts.video_io."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.video import VideoClassificationTool
from chatgpt_tool_hub.runtime.models.manager import ModelManager
from chatgpt_tool_hub.runtime.video_io import write_video

pytest.importorskip("torch")
pytest.importorskip("transformers")

ACTIONS = {"dancing", "cooking", "running", "swimming"}


@pytest.fixture(scope="session")
def videomae_dir(tmp_path_factory) -> str:
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    return BUILDERS["video-classification"](tmp_path_factory.mktemp("tiny-videomae"))


def clip(workspace, name: str, count: int = 10) -> str:
    from PIL import Image, ImageDraw

    frames = []
    for i in range(count):
        frame = Image.new("RGB", (64, 48), (20, 20, 80))
        ImageDraw.Draw(frame).ellipse([4 * i, 10, 4 * i + 16, 26], fill=(250, 200, 0))  # a ball rolling right
        frames.append(frame)
    (workspace / "video").mkdir(exist_ok=True)
    write_video(frames, workspace / "video" / name, fps=8)
    return f"video/{name}"


def labels_of(observation: str, video: str, frames: int) -> list[tuple[str, float]]:
    lines = observation.splitlines()
    assert lines[0] == f"Top labels for {video} ({frames} frames read):"
    found = [re.fullmatch(r"- (\w+): (0\.\d{3}|1\.000)", line).groups() for line in lines[1:]]
    labels = [(label, float(score)) for label, score in found]
    assert {label for label, _ in labels} <= ACTIONS and [s for _, s in labels] == sorted((s for _, s in labels),
                                                                                          reverse=True)
    assert observation.value == labels[0][0]
    return labels


def test_gif_clip(videomae_dir, workspace):
    video = clip(workspace, "ball.gif")
    tool = VideoClassificationTool.from_config(video_classification_model=videomae_dir)
    labels = labels_of(tool.run(video), video, 4)  # the model takes 4 frames: 4 of the 10, evenly spread
    assert len(labels) == 4 and sum(s for _, s in labels) == pytest.approx(1, abs=0.01)
    two = VideoClassificationTool.from_config(video_classification_model=videomae_dir, video_classification_top_k=2)
    assert len(labels_of(two.run({"video": video}), video, 4)) == 2


def test_mp4_clip_gives_the_same_labels_as_the_gif(videomae_dir, workspace):
    pytest.importorskip("av")
    tool = VideoClassificationTool(model=videomae_dir, device="cpu", manager=ModelManager(), workspace_dir=workspace)
    gif, mp4 = clip(workspace, "ball.gif"), clip(workspace, "ball.mp4")
    assert [label for label, _ in labels_of(tool.run(mp4), mp4, 4)] == \
        [label for label, _ in labels_of(tool.run(gif), gif, 4)]  # the same clip, lossy or not
    assert tool.manager.stats()["loads"] == 1


def test_a_short_clip_repeats_frames(videomae_dir, workspace):
    video = clip(workspace, "short.gif", count=2)
    tool = VideoClassificationTool.from_config(video_classification_model=videomae_dir)
    assert tool.run(video).splitlines()[0] == f"Top labels for {video} (2 frames read):"


def test_bad_input(videomae_dir, workspace):
    (workspace / "notes.gif").write_text("not a video")
    tool = VideoClassificationTool(model=videomae_dir, device="cpu", manager=ModelManager(), workspace_dir=workspace)
    with pytest.raises(ToolInputError, match="file 'video/none.mp4' does not exist"):
        tool.run("video/none.mp4")
    with pytest.raises(ToolInputError, match="'notes.gif' is not a video this tool can read"):
        tool.run("notes.gif")


def test_missing_model_names_the_setting(workspace, tmp_path):
    video = clip(workspace, "ball.gif")
    tool = VideoClassificationTool.from_config(video_classification_model=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set video_classification_model"):
        tool.run(video)


def test_remote_answer(fake_endpoint, workspace):
    video = clip(workspace, "ball.gif")
    fake_endpoint.reply_json([{"label": "juggling balls", "score": 0.7}, {"label": "bowling", "score": 0.2}])
    tool = VideoClassificationTool.from_config(video_classification_endpoint=fake_endpoint.url)
    observation = tool.run(video)
    assert observation.splitlines() == [f"Top labels for {video}:", "- juggling balls: 0.700", "- bowling: 0.200"]
    assert observation.value == "juggling balls"
    assert fake_endpoint.requests[0]["headers"]["content-type"] == "image/gif"
