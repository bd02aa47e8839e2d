"""Remote inference endpoints (Hugging Face inference API shapes) against a local HTTP fixture."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError
from chatgpt_tool_hub.experts.remote import RemoteBlob, RemoteEndpoint
from chatgpt_tool_hub.experts.vision import ImageCaptioningTool, ImageClassificationTool, ObjectDetectionTool
from chatgpt_tool_hub.runtime.models.manager import ModelManager

TOKEN = "hf_secret_token_123"


def test_captioning_remote(fake_endpoint, image_file, workspace):
    fake_endpoint.reply_json([{"generated_text": "a yellow ball on blue"}])
    tool = ImageCaptioningTool.from_config(image_captioning_endpoint=fake_endpoint.url, hf_token=TOKEN,
                                           image_captioning_model="./never-loaded")
    assert tool.run(image_file) == f"{image_file} shows: a yellow ball on blue"
    request = fake_endpoint.requests[0]
    assert request["path"] == "/models/test"
    assert request["headers"]["content-type"] == "image/png"
    assert request["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert request["body"] == (workspace / image_file).read_bytes()
    assert not tool.is_loaded()


def test_classification_remote(fake_endpoint, image_file):
    fake_endpoint.reply_json([{"label": "tabby cat", "score": 0.2}, {"label": "lynx", "score": 0.7},
                              {"label": "bad"}, {"label": "tiger", "score": 0.05}])
    tool = ImageClassificationTool.from_config(image_classification_endpoint=fake_endpoint.url,
                                               image_classification_top_k=2)
    assert tool.run(image_file) == f"Top labels for {image_file}:\n- lynx: 0.700\n- tabby cat: 0.200"
    assert "authorization" not in fake_endpoint.requests[0]["headers"]  # no token set


def test_detection_remote_draws_boxes(fake_endpoint, image_file, workspace):
    fake_endpoint.reply_json([
        {"score": 0.91, "label": "ball", "box": {"xmin": 20, "ymin": 10, "xmax": 70, "ymax": 55}},
        {"score": 0.3, "label": "sky", "box": {"xmin": 0, "ymin": 0, "xmax": 96, "ymax": 20}},
        {"score": 0.99, "label": "broken"},
    ])
    tool = ObjectDetectionTool.from_config(object_detection_endpoint=fake_endpoint.url)
    lines = tool.run(image_file).splitlines()
    assert lines[1:-1] == ["- ball 0.91 [20, 10, 70, 55]"]  # threshold 0.5, malformed entry skipped
    name = re.fullmatch(r"Annotated image: (\S+)", lines[-1]).group(1)
    assert "_detect_" in name and (workspace / name).is_file()


def test_server_error_is_an_observation(fake_endpoint, image_file):
    fake_endpoint.reply_json({"error": "CUDA out of memory on the server"}, status=500)
    tool = ImageCaptioningTool.from_config(image_captioning_endpoint=fake_endpoint.url, hf_token=TOKEN)
    with pytest.raises(ToolExecutionError) as info:
        tool.run(image_file)
    message = str(info.value)
    assert message == ("the remote endpoint (image_captioning_endpoint) failed with HTTP 500: "
                       "CUDA out of memory on the server")
    assert TOKEN not in message and TOKEN not in repr(tool.endpoint)


def test_loading_and_auth_errors(fake_endpoint, image_file):
    fake_endpoint.reply_json({"error": "Model is currently loading", "estimated_time": 20.0}, status=503)
    fake_endpoint.reply_json({"error": "Invalid token"}, status=401)
    fake_endpoint.reply_bytes(b"<html>oops</html>", "text/html")
    tool = ImageClassificationTool.from_config(image_classification_endpoint=fake_endpoint.url)
    with pytest.raises(ToolExecutionError, match=r"HTTP 503: Model is currently loading \(ready in about 20s"):
        tool.run(image_file)
    with pytest.raises(ToolExecutionError, match="HTTP 401: Invalid token; check hf_token"):
        tool.run(image_file)
    with pytest.raises(ToolExecutionError, match="not JSON"):
        tool.run(image_file)


def test_unreachable_endpoint(image_file):
    tool = ImageCaptioningTool.from_config(image_captioning_endpoint="http://127.0.0.1:9/models/x")
    with pytest.raises(ToolExecutionError, match=r"image_captioning_endpoint\) could not be reached"):
        tool.run(image_file)


def test_endpoint_json_and_blob_shapes(fake_endpoint):
    fake_endpoint.reply_json([{"label": "POSITIVE", "score": 0.9}])
    fake_endpoint.reply_bytes(b"RIFF....WAVE", "audio/wav")
    endpoint = RemoteEndpoint(fake_endpoint.url, token=TOKEN)
    assert endpoint.post_json("I love it", {"top_k": 1}) == [{"label": "POSITIVE", "score": 0.9}]
    sent = fake_endpoint.requests[0]
    assert json.loads(sent["body"]) == {"inputs": "I love it", "parameters": {"top_k": 1}}
    assert sent["headers"]["content-type"] == "application/json"
    assert endpoint.post_json("hello") == RemoteBlob("audio/wav", b"RIFF....WAVE")


def test_local_is_preferred_once_loaded(fake_endpoint, vit_dir, image_file):
    tool = ImageClassificationTool(model=vit_dir, device="cpu", endpoint=fake_endpoint.url, manager=ModelManager())
    tool.load()  # warm it up: from now on the endpoint is not used
    assert tool.run(image_file).startswith("Top labels for")
    assert fake_endpoint.requests == []
    tool.unload()  # evicted: back to the endpoint
    fake_endpoint.reply_json([{"label": "remote", "score": 1.0}])
    assert tool.run(image_file).endswith("- remote: 1.000")


REMOTE_ONLY = """
import sys
from chatgpt_tool_hub.runtime.filenames import ingest_image
from chatgpt_tool_hub.experts.vision import ImageCaptioningTool
tool = ImageCaptioningTool.from_config(image_captioning_endpoint=sys.argv[1])
print(tool.run(sys.argv[2]))
print([m for m in ("torch", "transformers") if m in sys.modules])
"""


def test_remote_only_never_imports_torch(fake_endpoint, image_file, isolated_env):
    fake_endpoint.reply_json([{"generated_text": "remote caption"}])
    out = subprocess.run([sys.executable, "-c", REMOTE_ONLY, fake_endpoint.url, image_file], capture_output=True,
                         text=True, timeout=60, cwd=isolated_env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{image_file} shows: remote caption", "[]"]
