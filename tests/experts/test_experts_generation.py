"""Text-to-image with diffusers: a tiny random Stable Diffusion pipeline, the missing extra, remote images."""

from __future__ import annotations

import json
import re
import sys

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError, UserError
from chatgpt_tool_hub.experts.generation import TextToImageTool
from chatgpt_tool_hub.runtime.models.manager import ModelManager

from expert_helpers import png_base64

pytest.importorskip("torch")
pytest.importorskip("transformers")

DREW = re.compile(r"Drew (image/[0-9a-f]{8}\.png) \((\d+)x(\d+)\) from the description\.")


def test_generates_a_small_image(diffusion_dir, workspace):
    from PIL import Image

    tool = TextToImageTool.from_config(text_to_image_model=diffusion_dir, expert_device="cpu", text_to_image_steps=2,
                                       text_to_image_width=32, text_to_image_height=36, text_to_image_seed=7)
    match = DREW.fullmatch(tool.run("a red cat on the grass"))
    assert match and match.group(2, 3) == ("32", "32")  # 36 is rounded down to a multiple of 8
    with Image.open(workspace / match.group(1)) as image:
        assert image.size == (32, 32) and image.mode == "RGB"
    pipe = tool.load()
    assert type(pipe).__name__ == "StableDiffusionPipeline" and tool.manager.stats()["resident_mb"] > 0
    again = DREW.fullmatch(tool.run("a red cat on the grass"))  # the same seed: the same picture
    assert (workspace / again.group(1)).read_bytes() == (workspace / match.group(1)).read_bytes()


def test_settings_follow_the_model():
    turbo = TextToImageTool(model="stabilityai/sd-turbo", device="cpu", manager=ModelManager())
    assert turbo.generation_settings() == {"num_inference_steps": 1, "guidance_scale": 0.0, "width": 512,
                                           "height": 512}
    classic = TextToImageTool(model="runwayml/stable-diffusion-v1-5", device="cpu", manager=ModelManager(),
                              options={"negative_prompt": "blurry", "width": 700})
    assert classic.generation_settings() == {"num_inference_steps": 25, "guidance_scale": 7.5, "width": 696,
                                             "height": 512, "negative_prompt": "blurry"}


def test_missing_diffusers_names_the_extra(monkeypatch, workspace):
    monkeypatch.setitem(sys.modules, "diffusers", None)
    tool = TextToImageTool(model="./anything", device="cpu", manager=ModelManager())
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[diffusion\]"'):
        tool.run("a cat")


def test_empty_prompt_and_missing_model(workspace):
    pytest.importorskip("diffusers")
    tool = TextToImageTool.from_config(text_to_image_model="chatgpt-tool-hub-tests/no-such-model",
                                       expert_device="cpu")
    with pytest.raises(ToolInputError, match="needs a description"):
        tool.run({"text": ""})
    with pytest.raises(ToolExecutionError, match="not found locally and the hub is unreachable .*"
                                                 "set text_to_image_model to a local path"):
        tool.run("a cat")


def test_remote_image_bytes_and_json(fake_endpoint, workspace):
    from PIL import Image

    picture = Image.new("RGB", (40, 24), "purple")
    import io

    buffer = io.BytesIO()
    picture.save(buffer, "JPEG")
    fake_endpoint.reply_bytes(buffer.getvalue(), "image/jpeg")
    fake_endpoint.reply_json([{"image": png_base64(picture)}])
    fake_endpoint.reply_json({"error_free": True})
    tool = TextToImageTool.from_config(text_to_image_endpoint=fake_endpoint.url)
    for _ in range(2):
        match = DREW.fullmatch(tool.run("a purple square"))
        assert match and match.group(2, 3) == ("40", "24")
        with Image.open(workspace / match.group(1)) as saved:
            assert saved.format == "PNG"
    body = json.loads(fake_endpoint.requests[0]["body"])  # the default model (SD 1.5): 25 steps, guidance 7.5
    assert body == {"inputs": "a purple square", "parameters": {"num_inference_steps": 25, "guidance_scale": 7.5,
                                                                "width": 512, "height": 512}}
    assert tool.run("a purple square") == "The model returned no image."
