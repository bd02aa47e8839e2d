"""Image segmentation and depth estimation on tiny SegFormer / Depth Anything models, and their remote shapes."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.dense import DepthEstimationTool, ImageSegmentationTool
from chatgpt_tool_hub.experts.manager import ModelManager
from chatgpt_tool_hub.experts.tiny import LABELS
from expert_helpers import png_base64

pytest.importorskip("torch")
pytest.importorskip("transformers")

SEGMENT = re.compile(r"- (\w+): (<0\.1|\d+\.\d)% \((\w+)(, score (0\.\d\d|1\.00))?\)")


def chained(name: str, image_file: str, op: str) -> bool:
    uuid = image_file.split("/")[1][:8]
    return re.fullmatch(rf"image/[0-9a-f]{{8}}_{op}_{uuid}_{uuid}\.png", name) is not None


def test_segmentation_labels_areas_and_overlay(segformer_dir, image_file, workspace):
    from PIL import Image

    tool = ImageSegmentationTool.from_config(image_segmentation_model=segformer_dir, expert_device="cpu")
    lines = tool.run(image_file).splitlines()
    count = int(re.match(rf"Found (\d+) segment\(s\) in {image_file} ", lines[0]).group(1))
    assert count == len(lines) - 2 and count >= 1
    shares = []
    for line in lines[1:-1]:
        match = SEGMENT.fullmatch(line)
        assert match and match.group(1) in LABELS, line
        shares.append(0.0 if match.group(2) == "<0.1" else float(match.group(2)))
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(100, abs=0.5)  # semantic segmentation covers every pixel once
    name = re.fullmatch(r"Segmentation image: (\S+)", lines[-1]).group(1)
    assert chained(name, image_file, "segment")
    with Image.open(workspace / name) as painted, Image.open(workspace / image_file) as original:
        assert painted.size == original.size and painted.tobytes() != original.tobytes()


def test_segmentation_remote_base64_masks(fake_endpoint, image_file, workspace):
    from PIL import Image

    left = Image.new("L", (96, 64), 0)
    left.paste(255, (0, 0, 48, 64))
    corner = Image.new("L", (48, 32), 0)
    corner.paste(255, (0, 0, 24, 16))  # another size: resized to the image (a quarter of it)
    fake_endpoint.reply_json([
        {"score": 0.98, "label": "sky", "mask": png_base64(left)},
        {"score": None, "label": "ball", "mask": png_base64(corner)},
        {"score": 0.5, "label": "broken", "mask": "not base64 png!"},
        {"score": 0.5, "label": "nothing", "mask": png_base64(Image.new("L", (96, 64), 0))},
    ])
    tool = ImageSegmentationTool.from_config(image_segmentation_endpoint=fake_endpoint.url)
    lines = tool.run(image_file).splitlines()
    assert lines[1:3] == ["- sky: 50.0% (red, score 0.98)", "- ball: 25.0% (green)"]
    assert lines[0].startswith("Found 2 segment(s)") and len(lines) == 4
    name = lines[-1].split(": ")[1]
    with Image.open(workspace / name) as painted:
        assert painted.getpixel((5, 40))[0] > painted.getpixel((90, 40))[0]  # the left half is painted red
    assert fake_endpoint.requests[0]["headers"]["content-type"] == "image/png"


def test_segmentation_remote_nothing_found(fake_endpoint, image_file, workspace):
    fake_endpoint.reply_json([])
    tool = ImageSegmentationTool.from_config(image_segmentation_endpoint=fake_endpoint.url)
    assert tool.run(image_file) == f"No segments found in {image_file}."
    assert sorted(p.name for p in (workspace / "image").iterdir()) == [image_file.split("/")[1]]


def test_depth_map_and_statistics(depth_dir, image_file, workspace):
    from PIL import Image

    tool = DepthEstimationTool.from_config(depth_estimation_model=depth_dir, expert_device="cpu")
    lines = tool.run({"image": image_file}).splitlines()
    head = re.fullmatch(rf"Depth map of {image_file}: (\S+) \(96x64, grey-scale, brighter = larger value\)\.",
                        lines[0])
    assert head and chained(head.group(1), image_file, "depth")
    stats = re.fullmatch(r"Predicted depth \(model units\): min (\S+), max (\S+), mean (\S+)\.", lines[1])
    low, high, mean = (float(v) for v in stats.groups())
    assert low <= mean <= high
    assert re.fullmatch(r"Largest values around the [a-z ]+, smallest around the [a-z ]+ \(.*\)\.", lines[2])
    with Image.open(workspace / head.group(1)) as depth:
        assert depth.mode == "L" and depth.size == (96, 64)


def test_depth_remote_shapes(fake_endpoint, image_file, workspace):
    from PIL import Image

    gradient = Image.linear_gradient("L").resize((96, 64))  # dark at the top, bright at the bottom
    fake_endpoint.reply_json({"depth": png_base64(gradient), "predicted_depth": [[1.0, 2.0], [3.0, 6.0]]})
    fake_endpoint.reply_bytes(_png_bytes(gradient), "image/png")
    fake_endpoint.reply_json([{"predicted_depth": [[0.5, 0.5], [0.5, 4.5]]}])
    tool = DepthEstimationTool.from_config(depth_estimation_endpoint=fake_endpoint.url)
    first = tool.run(image_file).splitlines()
    assert first[1] == "Predicted depth (model units): min 1, max 6, mean 3."
    assert first[2].startswith("Largest values around the bottom ") and " smallest around the top " in first[2]
    second = tool.run(image_file).splitlines()
    assert re.fullmatch(r"Predicted depth \(grey levels 0-255\): min [0-9], max 2[45]\d, mean 12\d\.", second[1])
    third = tool.run(image_file).splitlines()  # values only: the map is drawn from them
    assert third[1] == "Predicted depth (model units): min 0.5, max 4.5, mean 1.5."
    assert "Largest values around the bottom right" in third[2]
    for lines in (first, second, third):
        name = re.search(r": (\S+) \(96x64", lines[0]).group(1)
        assert (workspace / name).is_file()


def _png_bytes(image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_depth_remote_garbage_is_an_observation(fake_endpoint, image_file):
    fake_endpoint.reply_json({"depth": 42})
    fake_endpoint.reply_json({"unexpected": True})
    tool = DepthEstimationTool.from_config(depth_estimation_endpoint=fake_endpoint.url)
    with pytest.raises(ToolExecutionError, match="depth-estimation failed: ValueError: the endpoint sent int"):
        tool.run(image_file)
    assert tool.run(image_file) == f"The depth model returned no depth map for {image_file}."


@pytest.mark.parametrize("cls", [ImageSegmentationTool, DepthEstimationTool])
def test_missing_image_is_an_observation(cls, workspace):
    tool = cls(model="./never-loaded", device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="file 'image/none.png' does not exist; use a file name"):
        tool.run("image/none.png")
    assert tool.manager.stats()["loads"] == 0
