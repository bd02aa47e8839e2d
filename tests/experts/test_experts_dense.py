"""Image segmentation and depth estimation on tiny SegFormer / Depth Anything models, and their remote shapes."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.dense import DepthEstimationTool, ImageSegmentationTool
from chatgpt_tool_hub.experts.tiny import LABELS
from chatgpt_tool_hub.runtime.models.manager import ModelManager

from expert_helpers import png_base64

pytest.importorskip("torch")
pytest.importorskip("transformers")

SEGMENT = re.compile(r"- (\w+): (<0\.1|\d+\.\d)% \((\w+)(, score (0\.\d\d|1\.00))?\)")


def chained(name: str, image_file: str, op: str) -> bool:
    uuid = image_file.split("/")[1][:8]
    return re.fullmatch(rf"image/[0-9a-f]{{8}}_{op}_{uuid}_{uuid}\.png", name) is not None


def test_segmentation_labels_areas_overlay_and_ade_map(segformer_dir, image_file, workspace):
    import numpy as np
    from PIL import Image

    from chatgpt_tool_hub.experts.dense import ade_colour

    tool = ImageSegmentationTool.from_config(image_segmentation_model=segformer_dir, expert_device="cpu")
    observation = tool.run(image_file)
    lines = observation.splitlines()
    count = int(re.match(rf"Found (\d+) segment\(s\) in {image_file} ", lines[0]).group(1))
    assert count == len(lines) - 3 and count >= 1
    shares, labels = [], []
    for line in lines[1:-2]:
        match = SEGMENT.fullmatch(line)
        assert match and match.group(1) in LABELS, line
        labels.append(match.group(1))
        shares.append(0.0 if match.group(2) == "<0.1" else float(match.group(2)))
    assert shares == sorted(shares, reverse=True)
    assert sum(shares) == pytest.approx(100, abs=0.5)  # semantic segmentation covers every pixel once
    name = re.fullmatch(r"Segmentation image: (\S+)", lines[-2]).group(1)
    assert chained(name, image_file, "segment")
    with Image.open(workspace / name) as painted, Image.open(workspace / image_file) as original:
        assert painted.size == original.size and painted.tobytes() != original.tobytes()
    seg = re.fullmatch(r"Segmentation map \(ADE20K colours on black, 96x64; the image input of segmentation-to-image"
                       r"(; not ADE20K classes, so segmentation-to-image may not know them: ([a-z, ]+))?\): (\S+)",
                       lines[-1])
    assert seg and chained(seg.group(3), image_file, "segmentation") and observation.value == seg.group(3)
    outside = {label for label in labels if label in ("cat", "dog", "bird")}  # the tiny labels ADE20K lacks
    assert set((seg.group(2) or "").split(", ")) - {""} == outside
    with Image.open(workspace / seg.group(3)) as seg_map:
        assert seg_map.mode == "RGB" and seg_map.size == (96, 64)
        colours = {tuple(c) for c in np.asarray(seg_map).reshape(-1, 3)}
    assert colours == {ade_colour(label)[0] for label in labels}  # every pixel in its class's ADE20K colour


def test_ade_colours_are_the_controlnet_palette():
    from chatgpt_tool_hub.experts.dense import ADE20K_CLASSES, ADE20K_PALETTE, ade_colour

    assert len(ADE20K_CLASSES) == len(ADE20K_PALETTE) == len(set(ADE20K_CLASSES)) == 150
    assert ade_colour("wall") == ((120, 120, 120), True)
    assert ade_colour("sky") == ((6, 230, 230), True) and ade_colour("Sky ") == ((6, 230, 230), True)
    assert ade_colour("bed ") == ((204, 5, 255), True)  # SegFormer's label keeps mmseg's trailing space
    assert ade_colour("person, individual") == ((150, 5, 61), True)  # the first name of a synonym list
    assert ade_colour("flag") == ((92, 0, 255), True)
    colour, known = ade_colour("spaceship")
    assert not known and colour in ADE20K_PALETTE and ade_colour("spaceship") == (colour, False)


def test_segmentation_remote_base64_masks(fake_endpoint, image_file, workspace):
    from PIL import Image

    left = Image.new("L", (96, 64), 0)
    left.paste(255, (0, 0, 48, 64))
    corner = Image.new("L", (48, 32), 0)
    corner.paste(255, (0, 0, 24, 16))  # another size: resized to the image (a quarter of it)
    fake_endpoint.reply_json([
        {"score": 0.98, "label": "sky", "mask": png_base64(left)},
        {"score": None, "label": "person", "mask": png_base64(corner)},
        {"score": 0.5, "label": "broken", "mask": "not base64 png!"},
        {"score": 0.5, "label": "nothing", "mask": png_base64(Image.new("L", (96, 64), 0))},
    ])
    tool = ImageSegmentationTool.from_config(image_segmentation_endpoint=fake_endpoint.url)
    lines = tool.run(image_file).splitlines()
    assert lines[1:3] == ["- sky: 50.0% (red, score 0.98)", "- person: 25.0% (green)"]
    assert lines[0].startswith("Found 2 segment(s)") and len(lines) == 5
    name = lines[-2].split(": ")[1]
    with Image.open(workspace / name) as painted:
        assert painted.getpixel((5, 40))[0] > painted.getpixel((90, 40))[0]  # the left half is painted red
    with Image.open(workspace / lines[-1].rsplit(": ", 1)[1]) as seg_map:
        assert seg_map.getpixel((40, 40)) == (6, 230, 230)  # sky, in ADE20K's sky colour
        assert seg_map.getpixel((10, 5)) == (150, 5, 61)  # the person (painted on top) in its ADE20K colour
        assert seg_map.getpixel((90, 40)) == (0, 0, 0)  # no segment: black
    assert fake_endpoint.requests[0]["headers"]["content-type"] == "image/png"


def test_segmentation_remote_nothing_found(fake_endpoint, image_file, workspace):
    fake_endpoint.reply_json([])
    tool = ImageSegmentationTool.from_config(image_segmentation_endpoint=fake_endpoint.url)
    assert tool.run(image_file) == f"No segments found in {image_file}."
    assert sorted(p.name for p in (workspace / "image").iterdir()) == [image_file.split("/")[1]]


DEPTH_HEAD = r"Depth map of {}: (\S+) \(96x64, 8-bit grey, near = bright; the image input of depth-to-image\)\."


def test_depth_map_and_statistics(depth_dir, image_file, workspace):
    import numpy as np
    from PIL import Image

    tool = DepthEstimationTool.from_config(depth_estimation_model=depth_dir, expert_device="cpu")
    observation = tool.run({"image": image_file})
    lines = observation.splitlines()
    head = re.fullmatch(DEPTH_HEAD.format(image_file), lines[0])
    assert head and chained(head.group(1), image_file, "depth") and observation.value == head.group(1)
    stats = re.fullmatch(r"Predicted depth \(model units, larger = closer\): min (\S+), max (\S+), mean (\S+)\.",
                         lines[1])
    low, high, mean = (float(v) for v in stats.groups())
    assert low <= mean <= high
    assert re.fullmatch(r"Closest around the [a-z ]+, farthest around the [a-z ]+\.", lines[2])
    with Image.open(workspace / head.group(1)) as depth:
        assert depth.mode == "L" and depth.size == (96, 64)
        grey = np.asarray(depth)
    assert grey.min() == 0 and grey.max() == 255  # the full 8-bit range: min-max scaled


def test_depth_map_is_near_bright_and_inverted_for_metric_models(fake_endpoint, image_file, workspace):
    import numpy as np
    from PIL import Image

    values = [[1.0, 2.0], [3.0, 6.0]]  # larger at the bottom right
    fake_endpoint.reply_json({"predicted_depth": values})
    fake_endpoint.reply_json({"predicted_depth": values})
    relative = DepthEstimationTool.from_config(depth_estimation_endpoint=fake_endpoint.url)
    metric = DepthEstimationTool.from_config(depth_estimation_endpoint=fake_endpoint.url, depth_estimation_metric="yes")
    near, far = relative.run(image_file), metric.run(image_file)
    assert near.splitlines()[1] == "Predicted depth (model units, larger = closer): min 1, max 6, mean 3."
    assert far.splitlines()[1] == "Predicted depth (model units, larger = farther): min 1, max 6, mean 3."
    assert near.splitlines()[2] == "Closest around the bottom right, farthest around the top left."
    assert far.splitlines()[2] == "Closest around the top left, farthest around the bottom right."
    with Image.open(workspace / near.value) as a, Image.open(workspace / far.value) as b:
        grey, inverted = np.asarray(a).astype(int), np.asarray(b).astype(int)
    assert grey[63, 95] == 255 and grey[0, 0] == 0 and np.abs(grey + inverted - 255).max() <= 1


def test_depth_metric_models_are_recognised_from_their_config():
    from types import SimpleNamespace

    from chatgpt_tool_hub.experts.dense import run_depth

    class Pipe:
        def __init__(self, model_type, kind=None):
            self.model = SimpleNamespace(config=SimpleNamespace(model_type=model_type, depth_estimation_type=kind))

        def __call__(self, picture):
            return {"predicted_depth": [[0.0]]}

    assert run_depth(Pipe("glpn"), None)["metric"] is True
    assert run_depth(Pipe("depth_anything", "metric"), None)["metric"] is True
    assert run_depth(Pipe("depth_anything", "relative"), None)["metric"] is False
    assert run_depth(Pipe("dpt"), None)["metric"] is False


def test_depth_remote_shapes(fake_endpoint, image_file, workspace):
    from PIL import Image

    gradient = Image.linear_gradient("L").resize((96, 64))  # dark at the top, bright at the bottom
    fake_endpoint.reply_json({"depth": png_base64(gradient), "predicted_depth": [[1.0, 2.0], [3.0, 6.0]]})
    fake_endpoint.reply_bytes(_png_bytes(gradient), "image/png")
    fake_endpoint.reply_json([{"predicted_depth": [[0.5, 0.5], [0.5, 4.5]]}])
    tool = DepthEstimationTool.from_config(depth_estimation_endpoint=fake_endpoint.url)
    first = tool.run(image_file).splitlines()
    assert first[1] == "Predicted depth (model units, larger = closer): min 1, max 6, mean 3."
    assert first[2].startswith("Closest around the bottom ") and " farthest around the top " in first[2]
    second = tool.run(image_file).splitlines()
    assert re.fullmatch(r"Predicted depth \(grey levels 0-255, brighter = closer\): min 0, max 255, mean 12\d\.",
                        second[1])
    third = tool.run(image_file).splitlines()  # values only: the map is drawn from them
    assert third[1] == "Predicted depth (model units, larger = closer): min 0.5, max 4.5, mean 1.5."
    assert "Closest around the bottom right" in third[2]
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
