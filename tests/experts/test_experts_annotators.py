"""Annotator tools (condition maps for ControlNet): canny, lines, HED, scribble, normals, on drawn pictures and
tiny random models; their numpy operations on inputs with known answers."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.annotators import (
    ImageToCannyTool,
    ImageToHedTool,
    ImageToLineTool,
    ImageToNormalTool,
    ImageToScribbleTool,
)
from chatgpt_tool_hub.runtime.models.manager import ModelManager

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")

OBSERVATION = re.compile(r"(?P<what>[\w -]+) of (?P<source>\S+): (?P<name>\S+) \((?P<w>\d+)x(?P<h>\d+), "
                         r"(?P<details>.*); the image input of (?P<consumer>[\w-]+)\)\.")


def chained(name: str, source: str, op: str) -> bool:
    uuid = source.split("/")[1][:8]
    return re.fullmatch(rf"image/[0-9a-f]{{8}}_{op}_{uuid}_{uuid}\.png", name) is not None


def parsed(observation: str, source: str, op: str, consumer: str) -> re.Match:
    match = OBSERVATION.fullmatch(observation)
    assert match, observation
    assert match["source"] == source and match["consumer"] == consumer
    assert chained(match["name"], source, op), match["name"]
    assert observation.value == match["name"]  # the bare result a plan hands on: the written map
    return match


def opened(workspace, name: str):
    from PIL import Image

    with Image.open(workspace / name) as image:
        image.load()
        return image.copy()


def ingest(picture, workspace) -> str:
    from chatgpt_tool_hub.runtime.filenames import ingest_image

    return ingest_image(picture, workspace)


@pytest.fixture
def square_file(workspace) -> str:
    """A 96x64 black picture with a white square over columns 30-59, rows 20-49."""
    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (96, 64), "black")
    ImageDraw.Draw(picture).rectangle([30, 20, 59, 49], fill="white")
    return ingest(picture, workspace)


@pytest.fixture(scope="session")
def hed_dir(tmp_path_factory) -> str:
    pytest.importorskip("torch")
    from chatgpt_tool_hub.experts.tiny.annotators import build_hed

    return build_hed(tmp_path_factory.mktemp("tiny-hed"))


# ---- canny -------------------------------------------------------------------------------


def test_canny_edges_lie_on_the_border_of_a_white_square(square_file, workspace):
    tool = ImageToCannyTool.from_config()
    observation = tool.run(square_file)
    match = parsed(observation, square_file, "edge", "canny-to-image")
    assert match["what"] == "Edge map" and (match["w"], match["h"]) == ("96", "64")
    edges = opened(workspace, match["name"])
    assert edges.mode == "L" and edges.size == (96, 64)
    pixels = np.asarray(edges)
    assert set(np.unique(pixels)) == {0, 255}  # white on black
    ys, xs = np.nonzero(pixels)
    ring = ((xs >= 29) & (xs <= 60) & (ys >= 19) & (ys <= 50)) & ~((xs >= 31) & (xs <= 58) & (ys >= 21) & (ys <= 48))
    assert ring.all()  # every edge pixel is within one pixel of the square's border
    assert not pixels[22:48, 32:58].any()  # nothing in the flat inside
    for side in (pixels[19:51, 29:31], pixels[19:51, 59:61], pixels[19:21, 29:61], pixels[49:51, 29:61]):
        assert side.any(axis=0).sum() + side.any(axis=1).sum() >= 30  # each side is traced along its length
    share = float(re.search(r"(\d+\.\d)% of the pixels", match["details"]).group(1))
    assert share == pytest.approx(100 * (pixels > 0).mean(), abs=0.05)


def test_canny_thresholds_are_options(workspace):
    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (64, 48), (0, 0, 0))
    ImageDraw.Draw(picture).rectangle([16, 12, 47, 35], fill=(20, 20, 20))  # a Sobel magnitude of 80 at its border
    faint = ingest(picture, workspace)
    default = ImageToCannyTool.from_config().run(faint)
    assert "0.0% of the pixels" in default and not np.asarray(opened(workspace, default.value)).any()
    low = ImageToCannyTool.from_config(image_to_canny_low_threshold=30, image_to_canny_high_threshold="60")
    assert np.asarray(opened(workspace, low.run(faint).value)).any()
    swapped = ImageToCannyTool.from_config(image_to_canny_low_threshold=60, image_to_canny_high_threshold=30)
    assert np.array_equal(np.asarray(opened(workspace, swapped.run(faint).value)),
                          np.asarray(opened(workspace, low.run(faint).value)))


def test_canny_hysteresis_keeps_weak_edges_joined_to_strong_ones():
    from chatgpt_tool_hub.experts.annotators_ops import canny

    image = np.zeros((40, 80), dtype=np.uint8)
    image[:, 10:] = 30  # a weak step (magnitude 120) down the whole height at x = 10
    image[20:, 40:] = 255  # a strong step at x = 40 in the lower half
    image[5:15, 60:] = 60  # an isolated weak step (magnitude 120 from 30 to 60) at x = 60, top rows only
    edges = canny(image, 100, 200)
    assert edges[25:38, 39:41].any(axis=1).all()  # the strong edge
    assert not edges[6:14, 59:61].any()  # weak and touching no strong edge: dropped
    weak_column = edges[:, 9:11].any(axis=1)
    assert not weak_column.any()  # the long weak edge never touches the strong one either
    image[20:, 10:41] = 255  # now the weak step's lower part joins the strong region's edge
    joined = canny(image, 100, 200)
    assert joined[2:18, 9:11].any(axis=1).all()  # the weak upper part is kept: it connects to strong pixels


# ---- lines -------------------------------------------------------------------------------


def test_line_map_follows_a_drawn_line(workspace):
    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (96, 64), "black")
    ImageDraw.Draw(picture).line([10, 50, 90, 20], fill="white", width=2)
    source = ingest(picture, workspace)
    observation = ImageToLineTool.from_config().run(source)
    match = parsed(observation, source, "line", "line-to-image")
    count = int(re.match(r"(\d+) straight lines?, white on black", match["details"]).group(1))
    assert count == 1  # the two edges of the stroke are one line
    lines = np.asarray(opened(workspace, match["name"]))
    ys, xs = np.nonzero(lines)
    direction = np.array([80.0, -30.0]) / np.hypot(80, 30)
    offset = np.stack([xs - 10.0, ys - 50.0], axis=1)
    distance = np.abs(offset[:, 0] * direction[1] - offset[:, 1] * direction[0])
    assert distance.max() <= 3  # every drawn line pixel is on the stroke
    along = offset @ direction
    covered = np.unique(np.clip(along, 0, 85.4).astype(int))
    assert covered.size >= 0.8 * 85  # and the lines cover the stroke from end to end


def test_line_map_of_a_flat_image_is_black(workspace):
    from PIL import Image

    source = ingest(Image.new("RGB", (40, 30), (90, 90, 90)), workspace)
    observation = ImageToLineTool.from_config().run({"image": source})
    assert "(40x30, 0 straight lines, white on black;" in observation
    assert not np.asarray(opened(workspace, observation.value)).any()


def test_hough_segments_of_a_rectangle_are_its_four_sides():
    from chatgpt_tool_hub.experts.annotators_ops import canny, hough_segments

    image = np.zeros((80, 120, 3), dtype=np.uint8)
    image[20:60, 30:100] = 255
    segments = hough_segments(canny(image), min_length=20)
    assert len(segments) == 4
    lengths = sorted(round(float(np.hypot(x1 - x0, y1 - y0))) for x0, y0, x1, y1 in segments)
    # the sides are 40 and 70 px; a corner pixel belongs to the side found first
    assert lengths[:2] == [pytest.approx(38, abs=3)] * 2 and lengths[2:] == [pytest.approx(68, abs=3)] * 2
    assert hough_segments(canny(image), min_length=80) == []  # no side is that long
    assert hough_segments(np.zeros((10, 10), dtype=bool)) == []


# ---- HED and scribble ----------------------------------------------------------------------


def test_hed_and_scribble_share_one_network(hed_dir, square_file, workspace):
    manager = ModelManager()
    hed = ImageToHedTool(model=hed_dir, device="cpu", manager=manager, workspace_dir=workspace,
                         options={"detect_resolution": 128})
    scribble = ImageToScribbleTool(model=hed_dir, device="cpu", manager=manager, workspace_dir=workspace,
                                   options={"detect_resolution": 128})
    soft = parsed(hed.run(square_file), square_file, "hed", "hed-to-image")
    assert soft["what"] == "HED soft-edge map" and soft["details"] == "grey soft edges on black"
    lines = parsed(scribble.run(square_file), square_file, "scribble", "scribble-to-image")
    assert lines["what"] == "Scribble" and re.fullmatch(r"white scribble lines on black, \d+\.\d% of the pixels",
                                                        lines["details"])
    assert manager.stats()["loads"] == 1 and hed.model_key == scribble.model_key
    soft_map, scribble_map = opened(workspace, soft["name"]), opened(workspace, lines["name"])
    assert soft_map.mode == scribble_map.mode == "L" and soft_map.size == scribble_map.size == (96, 64)
    assert set(np.unique(np.asarray(scribble_map))) <= {0, 255}


def test_hed_network_matches_the_published_checkpoint_layout():
    pytest.importorskip("torch")
    from chatgpt_tool_hub.experts.annotators_hed import DEPTHS, WIDTHS, ControlNetHED, layout_of

    state = ControlNetHED().state_dict()
    assert layout_of(state) == (WIDTHS, DEPTHS) == ((64, 128, 256, 512, 512), (2, 2, 3, 3, 3))
    assert list(state)[:5] == ["norm", "block1.convs.0.weight", "block1.convs.0.bias", "block1.convs.1.weight",
                               "block1.convs.1.bias"]
    assert tuple(state["block3.convs.2.weight"].shape) == (256, 256, 3, 3)
    assert tuple(state["block5.projection.weight"].shape) == (1, 512, 1, 1)
    # 3x3 convolutions 3-64-64 | 128 128 | 256 x3 | 512 x3 | 512 x3, five 1x1 projections, the mean: 14.7M
    assert sum(t.numel() for t in state.values()) == 14_716_168


def test_hed_map_is_the_sigmoid_of_the_mean_projection(tmp_path):
    torch = pytest.importorskip("torch")
    from PIL import Image

    from chatgpt_tool_hub.experts.annotators_hed import ControlNetHED, load_hed

    net = ControlNetHED(widths=(2, 2, 2, 2, 2), depths=(1, 1, 1, 1, 1))
    with torch.no_grad():
        for name, tensor in net.named_parameters():
            tensor.zero_()
            if name.endswith("projection.bias"):
                tensor.fill_(float(name[5]) - 3.0)  # blocks 1-5: -2, -1, 0, 1, 2, mean 0
        net.block1.projection.bias.fill_(3.0)  # mean (3 - 1 + 0 + 1 + 2) / 5 = 1
    torch.save(net.state_dict(), tmp_path / "weights.pth")
    model = load_hed(tmp_path / "weights.pth", "cpu", torch.float32)
    edges = model(Image.new("RGB", (70, 50), "white"), resolution=64)
    assert edges.shape == (50, 70) and edges.dtype == np.uint8
    assert set(np.unique(edges)) == {int(255 / (1 + np.exp(-1.0)))}  # sigmoid(1) * 255 = 186


def test_hed_weights_from_a_pth_file(hed_dir, square_file, workspace):
    tool = ImageToHedTool.from_config(image_to_hed_model=f"{hed_dir}/ControlNetHED.pth", image_to_hed_device="cpu",
                                      image_to_hed_detect_resolution=64)
    assert tool.run(square_file).value.endswith(".png")
    assert tool.fixed_model == "set by image_to_hed_model"


@pytest.mark.parametrize("cls", [ImageToHedTool, ImageToScribbleTool])
def test_hed_folder_without_weights_names_the_file_and_setting(cls, square_file, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "empty").mkdir()
    key = cls.name.replace("-", "_")
    tool = cls.from_config(**{f"{key}_model": str(tmp_path / "empty")})
    with pytest.raises(ToolExecutionError, match=rf"the folder has no ControlNetHED.pth; set {key}_model to a "
                                                 rf"folder holding ControlNetHED.pth \(from lllyasviel/Annotators\)"):
        tool.run(square_file)
    missing = cls.from_config(**{f"{key}_model": str(tmp_path / "nope")})
    with pytest.raises(ToolExecutionError, match=rf"no such folder; set {key}_model"):
        missing.run(square_file)


def test_a_checkpoint_that_is_not_hed(square_file, tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"weight": torch.zeros(2, 2)}, tmp_path / "other.pth")
    tool = ImageToHedTool.from_config(image_to_hed_model=str(tmp_path / "other.pth"))
    with pytest.raises(ToolExecutionError, match="not a ControlNet HED checkpoint"):
        tool.run(square_file)


def test_scribble_thins_a_soft_band_to_one_line():
    from chatgpt_tool_hub.experts.annotators_ops import scribble

    soft = np.zeros((60, 80), dtype=np.float32)
    soft[:, 36:45] = 255  # a soft edge 9 px wide around x = 40
    lines = scribble(soft)
    assert set(np.unique(lines)) == {0, 255}
    columns = np.nonzero(lines[30])[0]
    assert columns.min() > 28 and columns.max() < 52 and 40 in columns  # one band, centred on the edge
    assert not lines[:, :20].any() and not lines[:, 60:].any()
    assert not scribble(np.full((20, 20), 100, dtype=np.float32)).any()  # no edge above 127: nothing


# ---- normals -------------------------------------------------------------------------------


def test_normals_of_depth_ramps_point_the_right_way():
    from chatgpt_tool_hub.experts.annotators_ops import normals_from_depth

    right = np.tile(np.linspace(0.0, 1.0, 96), (64, 1))  # closer towards the right
    normal = normals_from_depth(right, background=0.4)
    assert normal.shape == (64, 96, 3) and normal.dtype == np.uint8
    assert normal[32, 70, 0] > 200 and abs(int(normal[32, 70, 1]) - 128) <= 1  # red: x, no y
    assert tuple(normal[32, 10]) in {(127, 127, 255), (128, 128, 255)}  # the far background is flat
    down = normals_from_depth(right.T.copy())  # closer towards the bottom
    assert down[70, 32, 1] > 200 and abs(int(down[70, 32, 0]) - 128) <= 1
    left = normals_from_depth(right[:, ::-1].copy(), background=0.0)
    assert left[32, 30, 0] < 56  # closer towards the left: x is negative
    flat = normals_from_depth(np.ones((8, 8)))
    assert {tuple(p) for p in flat.reshape(-1, 3)} <= {(127, 127, 255), (128, 128, 255)}


def test_normal_map_from_a_remote_depth_ramp(fake_endpoint, square_file, workspace):
    ramp = np.tile(np.linspace(0.0, 10.0, 12), (8, 1)).tolist()  # values grow to the right: closer there
    fake_endpoint.reply_json({"predicted_depth": ramp})
    tool = ImageToNormalTool.from_config(image_to_normal_endpoint=fake_endpoint.url)
    match = parsed(tool.run(square_file), square_file, "normal", "normal-to-image")
    normal = np.asarray(opened(workspace, match["name"]))
    assert normal.shape == (64, 96, 3)
    assert normal[32, 80, 0] > 150 and tuple(normal[32, 5]) in {(127, 127, 255), (128, 128, 255)}
    fake_endpoint.reply_json({"predicted_depth": ramp})
    metric = ImageToNormalTool.from_config(image_to_normal_endpoint=fake_endpoint.url, image_to_normal_metric="yes")
    inverted = np.asarray(opened(workspace, metric.run(square_file).value))  # farther to the right: closer left
    assert inverted[32, 15, 0] < 105 and tuple(inverted[32, 90]) in {(127, 127, 255), (128, 128, 255)}


def test_normal_and_depth_share_one_model_load(depth_dir, square_file, workspace):
    from chatgpt_tool_hub.experts.dense import DepthEstimationTool

    manager = ModelManager()
    normal = ImageToNormalTool(model=depth_dir, device="cpu", manager=manager, workspace_dir=workspace)
    depth = DepthEstimationTool(model=depth_dir, device="cpu", manager=manager, workspace_dir=workspace)
    match = parsed(normal.run(square_file), square_file, "normal", "normal-to-image")
    assert depth.run(square_file).value.endswith(".png")
    assert manager.stats()["loads"] == 1
    picture = opened(workspace, match["name"])
    assert picture.mode == "RGB" and picture.size == (96, 64)
    built = ImageToNormalTool.from_config(depth_estimation_model=depth_dir)
    assert built.model == depth_dir and built.model_key == depth.model_key
    assert built.fixed_model == "set by depth_estimation_model"
    assert ImageToNormalTool.from_config().model == DepthEstimationTool.default_model


# ---- common behaviour ------------------------------------------------------------------------


ALL = [ImageToCannyTool, ImageToLineTool, ImageToHedTool, ImageToScribbleTool, ImageToNormalTool]


@pytest.mark.parametrize("cls", ALL)
def test_a_missing_file_is_an_observation_before_any_load(cls, workspace):
    tool = cls(model="./never-loaded", device="cpu", manager=ModelManager(), workspace_dir=workspace)
    with pytest.raises(ToolInputError, match="file 'image/none.png' does not exist; use a file name"):
        tool.run("image/none.png")
    with pytest.raises(ToolInputError, match="needs the path of the image file"):
        tool.run({"image": " "})
    assert tool.manager.stats()["loads"] == 0


@pytest.mark.parametrize("cls", ALL)
def test_a_file_that_is_not_an_image_is_an_observation(cls, hed_dir, depth_dir, workspace):
    (workspace / "notes.txt").write_text("not a picture")
    model = {ImageToHedTool: hed_dir, ImageToScribbleTool: hed_dir, ImageToNormalTool: depth_dir}.get(cls, "")
    tool = cls(model=model or "builtin", device="cpu", manager=ModelManager(), workspace_dir=workspace)
    with pytest.raises(ToolInputError, match="file 'notes.txt' is not an image this tool can read"):
        tool.run("notes.txt")


def test_canny_and_lines_run_no_model(square_file):
    for cls in (ImageToCannyTool, ImageToLineTool):
        manager = ModelManager()
        tool = cls.from_config(**{f"{cls.name.replace('-', '_')}_model": "./ignored"})
        tool.manager = manager
        assert tool.run(square_file).value.startswith("image/")
        assert manager.stats()["loads"] == 0 and not tool.is_loaded() and tool.load() is None
        assert tool.fixed_model == f"{cls.name} runs no model"


@pytest.mark.parametrize("name", ["image-to-hed", "image-to-scribble", "image-to-pose"])
def test_tools_no_endpoint_serves_say_so(name, fake_endpoint, square_file):
    from chatgpt_tool_hub.experts import register_expert_tools
    from chatgpt_tool_hub.tools.registry import ToolRegistry

    registry = ToolRegistry()
    register_expert_tools(registry)
    key = name.replace("-", "_")
    tool = registry.build(name, **{f"{key}_endpoint": fake_endpoint.url})
    with pytest.raises(ToolExecutionError, match=rf"{name} runs only locally .*; unset {key}_endpoint"):
        tool.run(square_file)
    assert fake_endpoint.requests == []


NO_TORCH = """
import sys
from PIL import Image, ImageDraw
from chatgpt_tool_hub.runtime.filenames import ingest_image
from chatgpt_tool_hub.experts.annotators import ImageToCannyTool, ImageToLineTool
picture = Image.new("RGB", (64, 48), "black")
ImageDraw.Draw(picture).line([5, 40, 60, 8], fill="white", width=3)
source = ingest_image(picture, "ws")
print(ImageToCannyTool.from_config(workspace_dir="ws").run(source).value.split("_")[1],
      ImageToLineTool.from_config(workspace_dir="ws").run(source).value.split("_")[1],
      sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


def test_canny_and_lines_need_neither_torch_nor_transformers(tmp_path):
    out = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["edge", "line", "[]"]


# ---- through an app ------------------------------------------------------------------------


def test_an_app_chains_canny_and_lines_on_its_edge_map(square_file, workspace):
    import json

    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    def last_file(messages, op: str) -> str:
        text = messages[-1]["content"]
        return re.findall(rf"image/[0-9a-f]{{8}}_{op}_[0-9a-f]{{8}}_[0-9a-f]{{8}}\.png", text)[-1]

    llm = ScriptedLLM([
        "Thought: Do I need to use a tool? Yes\nAction: image-to-canny\nAction Input: " + json.dumps(
            {"image": square_file}),
        lambda messages: "Thought: Do I need to use a tool? Yes\nAction: image-to-line\nAction Input: " + json.dumps(
            {"image": last_file(messages, "edge")}),
        lambda messages: f"Thought: Do I need to use a tool? No\nAI: {last_file(messages, 'line')}",
    ])
    app = AppFactory().create_app(tools_list=["image-to-canny", "image-to-line"], llm=llm, no_default=True,
                                  image_to_line_min_length=10)
    answer = app.ask(f"draw the edges of {square_file}, then its straight lines")
    edge_name = last_file(llm.requests[1], "edge")
    uuid = square_file.split("/")[1][:8]
    edge_uuid = edge_name.split("/")[1][:8]
    assert re.fullmatch(rf"image/[0-9a-f]{{8}}_line_{edge_uuid}_{uuid}\.png", answer)  # prev: the edge map
    edges, lines = np.asarray(opened(workspace, edge_name)), np.asarray(opened(workspace, answer))
    assert edges[19:51, 29:61].any() and not edges[22:48, 32:58].any()  # the square's outline, as before
    assert "4 straight lines" in llm.requests[2][-1]["content"]  # each side of the square's 1-px outline, once
    ys, xs = np.nonzero(lines)
    assert xs.min() >= 27 and xs.max() <= 62 and ys.min() >= 17 and ys.max() <= 52


LIGHT = """
import sys
from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.testing import ScriptedLLM
names = ["image-to-canny", "image-to-line", "image-to-hed", "image-to-scribble", "image-to-pose", "image-to-normal",
         "zero-shot-object-detection", "segment-by-text", "document-question-answering", "video-classification",
         "depth-estimation", "image-segmentation"]
app = AppFactory().create_app(tools_list=names, llm=ScriptedLLM([]), no_default=True)
print(len(app.tools), sorted(m for m in ("torch", "transformers", "PIL", "numpy") if m in sys.modules))
"""


def test_building_the_tools_imports_nothing_heavy(tmp_path):
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12", "[]"]


def test_every_tool_of_the_family_is_registered_with_a_tiny_builder():
    from chatgpt_tool_hub.experts import EXPERT_TOOLS, register_expert_tools
    from chatgpt_tool_hub.experts.tiny import BUILDERS
    from chatgpt_tool_hub.tools.registry import ToolRegistry

    family = {"image-to-canny", "image-to-line", "image-to-hed", "image-to-scribble", "image-to-pose",
              "image-to-normal", "zero-shot-object-detection", "segment-by-text", "document-question-answering",
              "video-classification"}
    assert family <= set(EXPERT_TOOLS) and family <= set(BUILDERS)
    registry = ToolRegistry()
    register_expert_tools(registry)
    for name in family:
        tool = registry.build(name)
        assert tool.name == name and tool.description.startswith(f"{name}: ")
        assert "Input: " in tool.description and "Output: " in tool.description and "Example" in tool.description
        assert tool.task and tool.hub_task and tool.default_model
        assert set(tool.input_kinds().values()) <= {"image", "video", "text"}
        assert tool.output_kind == ("text" if name in ("document-question-answering", "video-classification")
                                    else "image")


@pytest.mark.slow
def test_the_family_page_runs(tmp_path):
    """The ``# runnable`` blocks of docs/experts/annotators.md, each in a fresh process (as tests/test_examples.py
    runs those of docs/*.md)."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "experts" / "annotators.md"
    blocks = re.findall(r"```python\n(# runnable\n.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    for index, block in enumerate(blocks):
        script = tmp_path / f"block{index}.py"
        script.write_text(block, encoding="utf-8")
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert out.returncode == 0, out.stderr
    for target in re.findall(r"\]\(([^)#\s]+\.md)", page.read_text(encoding="utf-8")):
        assert (page.parent / target).exists(), target


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["image-to-hed", "image-to-scribble", "image-to-pose", "image-to-normal",
                                  "zero-shot-object-detection", "segment-by-text", "document-question-answering",
                                  "video-classification"])
def test_half_precision_on_cuda(name, square_file, workspace, tmp_path):
    """Each model-running tool of the family on the default device (CUDA here) in float16."""
    from importlib import import_module

    import torch

    from chatgpt_tool_hub.experts import EXPERT_TOOLS
    from chatgpt_tool_hub.experts.tiny import BUILDERS
    from chatgpt_tool_hub.runtime.video_io import write_video

    module, cls = EXPERT_TOOLS[name]
    options = {"threshold": 0.0} if name in ("zero-shot-object-detection", "segment-by-text") else {}
    options.update({"max_new_tokens": 4} if name == "document-question-answering" else {})
    tool = getattr(import_module(module), cls)(model=BUILDERS[name](tmp_path / name), manager=ModelManager(),
                                               workspace_dir=workspace, options=options)
    assert tool.device.startswith("cuda") and tool.dtype == "float16"
    if name == "video-classification":
        (workspace / "video").mkdir()
        write_video([opened(workspace, square_file)] * 6, workspace / "video" / "clip.gif")
        inputs = {"video": "video/clip.gif"}
    elif name in ("zero-shot-object-detection", "segment-by-text"):
        inputs = {"image": square_file, "labels": "square"}
    elif name == "document-question-answering":
        inputs = {"image": square_file, "question": "what is the total?"}
    else:
        inputs = {"image": square_file}
    assert tool.run(inputs)
    loaded = tool.load()
    module = getattr(loaded, "model", loaded)
    assert next(module.parameters()).dtype == torch.float16 and next(module.parameters()).is_cuda
