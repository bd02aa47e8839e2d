"""The diffusion tools end to end on tiny random models: chained file names, sizes, videos, an app's chain."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.experts import EXPERT_TOOLS, register_expert_tools
from chatgpt_tool_hub.experts.tables.diffusion import TOOLS
from chatgpt_tool_hub.experts.tiny.diffusion import CONTROLNET_TOOLS
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

UUID = "[0-9a-f]{8}"
HUB_TASKS = {"text-to-image": "text-to-image", "image-to-image": "image-to-image", "edit-image": "image-to-image",
             "remove-object": "image-to-image", "replace-object": "image-to-image", "text-to-video": "text-to-video",
             **{name: "text-to-image" for name in CONTROLNET_TOOLS}}
OPS = {"canny-to-image": "canny2image", "depth-to-image": "depth2image", "hed-to-image": "hed2image",
       "line-to-image": "line2image", "normal-to-image": "normal2image", "scribble-to-image": "scribble2image",
       "pose-to-image": "pose2image", "segmentation-to-image": "segment2image"}


@pytest.fixture(scope="session")
def suite(tmp_path_factory) -> dict:
    """One tiny model per diffusion tool, all on one tiny base (``diffusion_base_model``)."""
    from chatgpt_tool_hub.experts.tiny.diffusion import build_diffusion_suite

    return build_diffusion_suite(tmp_path_factory.mktemp("tiny-diffusion"))


def tool_for(name: str, suite: dict, manager: ModelManager | None = None, **options):
    """The tool as an app builds it, from settings only (``<tool>_model``, ``diffusion_base_model`` ...)."""
    from importlib import import_module

    module, cls, _ = TOOLS[name]
    key = name.replace("-", "_")
    settings = {k: v for k, v in suite.items() if k == "diffusion_base_model" or k.startswith(key + "_")}
    settings.update({f"{key}_{k}": v for k, v in {"steps": 1, "seed": 0, **options}.items()})
    tool = getattr(import_module(module), cls).from_config(expert_device="cpu", **settings)
    tool.manager = manager or ModelManager()
    return tool


def chained(op: str, source: str) -> re.Pattern:
    """``image/{uuid}_{op}_{prev}_{org}.png`` for an output made from ``source`` (an original or a chained name)."""
    stem = source.split("/")[-1].rsplit(".", 1)[0]
    parts = stem.split("_")
    prev, org = (parts[0], parts[3]) if len(parts) == 4 else (stem, stem)
    return re.compile(rf"image/({UUID})_{re.escape(op)}_{prev}_{org}\.png")


def edge_map(workspace, size=(48, 32)) -> str:
    """A canny-style condition image: white rectangle outlines on black, ingested as image/{uuid}.png."""
    import numpy as np
    from PIL import Image

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    edges = np.zeros((size[1], size[0]), dtype=np.uint8)
    edges[6, 8:40] = edges[25, 8:40] = edges[6:26, 8] = edges[6:26, 39] = 255
    return ingest_image(Image.fromarray(edges, "L").convert("RGB"), workspace)


def grey_image(workspace, size=(48, 32), level=128) -> str:
    from PIL import Image

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    return ingest_image(Image.new("RGB", size, (level, level, level)), workspace)


def opened(workspace, name):
    from PIL import Image

    with Image.open(workspace / name) as image:
        return image.format, image.mode, image.size


# ---- the contract ---------------------------------------------------------------------


def test_every_diffusion_tool_is_registered_with_a_builder_and_a_description():
    from importlib import import_module

    from chatgpt_tool_hub.experts.tiny import BUILDERS

    assert set(TOOLS) == set(HUB_TASKS)
    for name, (module, cls, line) in TOOLS.items():
        tool_cls = getattr(import_module(module), cls)
        assert tool_cls.name == name and EXPERT_TOOLS[name] == (module, cls) and name in BUILDERS
        assert tool_cls.hub_task == HUB_TASKS[name], name
        text = tool_cls.description
        assert text.startswith(f"{name}: ") and "Use it" in text and "Input: {" in text and "Example: " in text, name
        assert tool_cls.output_kind == ("video" if name == "text-to-video" else "image") and line
        assert "/" in tool_cls.default_model  # a real hub id
    for name in CONTROLNET_TOOLS:  # each names the annotator its maps come from
        annotator = getattr(import_module(TOOLS[name][0]), TOOLS[name][1]).annotator
        assert f"make it first with {annotator}" in getattr(import_module(TOOLS[name][0]), TOOLS[name][1]).description


LIGHT = """
import sys
from importlib import import_module
from chatgpt_tool_hub.experts.tables.diffusion import TOOLS
tools = [getattr(import_module(m), c).from_config(diffusion_base_model="./base", expert_device="cuda")
         for m, c, _ in TOOLS.values()]
print(len(tools), sorted(m for m in ("torch", "transformers", "diffusers", "PIL", "numpy") if m in sys.modules))
"""


def test_building_every_diffusion_tool_imports_nothing_heavy(tmp_path):
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(TOOLS)), "[]"]


# ---- ControlNet tools -------------------------------------------------------------------


@pytest.mark.parametrize("name", CONTROLNET_TOOLS)
def test_controlnet_tool_draws_from_a_condition_image(name, suite, workspace):
    condition = edge_map(workspace)
    tool = tool_for(name, suite)
    observation = tool.run({"image": condition, "text": "a red house"})
    match = re.fullmatch(rf"Drew ({chained(OPS[name], condition).pattern}) \(48x32\) from the .+ {condition} "
                         rf"and the description\.", observation)
    assert match, observation
    assert observation.value == match.group(1) and opened(workspace, observation.value) == ("PNG", "RGB", (48, 32))
    assert type(tool.load()).__name__ == "ControlNetModel"  # the tool's own model: the ControlNet alone


def test_controlnet_size_option_and_plain_input(suite, workspace):
    condition = edge_map(workspace)
    tool = tool_for("canny-to-image", suite, size=64)
    observation = tool.run(f"{condition}, a red house")  # Visual ChatGPT's "path, description"
    assert chained("canny2image", condition).fullmatch(observation.value), observation
    assert opened(workspace, observation.value)[2] == (64, 43)  # long side 64, the input's aspect


@pytest.mark.slow
def test_same_seed_same_picture(suite, workspace):
    condition = edge_map(workspace)
    tool = tool_for("depth-to-image", suite)
    first, second = (tool.run({"image": condition, "text": "a house"}).value for _ in range(2))
    assert first != second and (workspace / first).read_bytes() == (workspace / second).read_bytes()


# ---- image-to-image and edit-image ------------------------------------------------------


def test_image_to_image_redraws_on_the_base(suite, workspace):
    source = grey_image(workspace, (40, 24))
    tool = tool_for("image-to-image", suite, strength=0.5)
    observation = tool.run({"image": source, "text": "the same at night"})
    assert re.fullmatch(rf"Redrew {source} after the description: ({chained('img2img', source).pattern}) \(40x24\)\.",
                        observation), observation
    assert opened(workspace, observation.value) == ("PNG", "RGB", (40, 24))
    assert tool.model_key == (suite["diffusion_base_model"], "diffusion-base", "cpu", "float32")


def test_edit_image_makes_a_chained_pix2pix_file(suite, workspace):
    source = grey_image(workspace, (36, 28))  # not a multiple of 8: generated at 32x24, saved at the input's size
    tool = tool_for("edit-image", suite)
    observation = tool.run({"image": source, "text": "make it look like a cartoon"})
    assert re.fullmatch(rf"Edited {source} as instructed: ({chained('pix2pix', source).pattern}) \(36x28\)\.",
                        observation), observation
    assert opened(workspace, observation.value) == ("PNG", "RGB", (36, 28))
    again = tool.run({"image": observation.value, "text": "make it winter"})  # an edit of the edit
    assert chained("pix2pix", observation.value).fullmatch(again.value), again
    assert type(tool.load()).__name__ == "StableDiffusionInstructPix2PixPipeline"


def test_bad_inputs_are_observations(suite, workspace):
    source = grey_image(workspace)
    (workspace / "image" / "notes.png").write_text("not an image")
    tool = tool_for("edit-image", suite)
    with pytest.raises(ToolInputError, match="needs a text besides the image"):
        tool.run({"image": source, "text": "  "})
    with pytest.raises(ToolInputError, match="is not an image"):
        tool.run({"image": "image/notes.png", "text": "make it blue"})
    with pytest.raises(ToolInputError, match="does not exist"):
        tool.run({"image": "image/ghost.png", "text": "make it blue"})
    with pytest.raises(ToolInputError, match="needs the object as text"):
        tool_for("remove-object", suite).run({"image": source, "object": ""})
    assert not tool.is_loaded()  # inputs are checked before anything is loaded


# ---- remove-object and replace-object ----------------------------------------------------


def test_remove_and_replace_object(suite, workspace):
    source = grey_image(workspace, (48, 40))
    manager = ModelManager()
    remove = tool_for("remove-object", suite, manager, mask_threshold=0.0)  # a random CLIPSeg: mask everything
    observation = remove.run({"image": source, "object": "the dog"})
    assert re.fullmatch(rf"Removed the dog from {source}: ({chained('remove-something', source).pattern}) "
                        rf"\(48x40; the mask covered 100\.0% of the image\)\.", observation), observation
    assert opened(workspace, observation.value) == ("PNG", "RGB", (48, 40))
    replace = tool_for("replace-object", suite, manager, mask_threshold=0.0)
    replaced = replace.run(f"{observation.value}, the dog, a white cat")  # the plain three-part form
    assert re.fullmatch(rf"Replaced the dog in {observation.value} with a white cat: "
                        rf"({chained('replace-something', observation.value).pattern}) \(48x40; .*", replaced), replaced
    assert replaced.value.endswith(f"_{source.split('/')[1][:8]}.png")  # the original's uuid is kept
    stats = manager.stats()  # one inpainting model and one CLIPSeg for both tools
    assert stats["loads"] == 2 and sorted(m.split()[-3] for m in stats["models"]) == ["clipseg", "inpainting"]


def test_remove_object_finds_nothing(suite, workspace):
    source = grey_image(workspace)
    tool = tool_for("remove-object", suite, mask_threshold=1.0)  # no probability is above 1
    observation = tool.run({"image": source, "object": "a unicorn"})
    assert observation == (f"Found no a unicorn in {source} (the mask covers 0.0% of it, under "
                           f"remove_object_mask_min_area); the image was not changed.")
    assert observation.value == source and len(list((workspace / "image").iterdir())) == 1


def test_mask_grows_by_the_padding(suite):
    import numpy as np
    from PIL import Image

    tool = tool_for("remove-object", suite, mask_threshold=0.0, mask_padding=0)
    picture = Image.new("RGB", (40, 40), "white")
    mask, share = tool.mask(picture, "a cat")
    assert mask.size == (40, 40) and mask.mode == "L" and share == 1.0
    padded = tool_for("remove-object", suite, mask_padding=3)
    padded.manager = tool.manager
    probabilities = padded.load_mask_model().probabilities(picture, "a cat")
    padded.options["mask_threshold"] = float(np.quantile(probabilities, 0.97))  # a few pixels only
    small, share = padded.mask(picture, "a cat")
    assert 0 < share < 0.2 and np.asarray(small).mean() / 255 > share  # grown around what was found


# ---- text-to-video --------------------------------------------------------------------------


@pytest.mark.slow
def test_text_to_video_writes_a_gif_and_an_mp4(suite, workspace):
    from chatgpt_tool_hub.runtime.video_io import video_info

    tool = tool_for("text-to-video", suite, num_frames=3, width=32, height=32, fps=4)
    observation = tool.run("an astronaut is walking in space")
    assert re.fullmatch(rf"Made (video/{UUID}\.gif) \(3 frames, 32x32, 4 fps\) from the description\.",
                        observation), observation
    assert video_info(workspace / observation.value) == {"frames": 3, "width": 32, "height": 32}
    pytest.importorskip("av")
    mp4 = tool_for("text-to-video", suite, num_frames=4, width=32, height=32, format="mp4")
    observation = mp4.run({"text": "a cat running"})
    assert re.fullmatch(rf"Made video/{UUID}\.mp4 \(4 frames, 32x32, 8 fps\) from the description\.", observation)
    assert video_info(workspace / observation.value)["frames"] == 4


# ---- an app: Visual ChatGPT's headline chain -----------------------------------------------


def _last_observation(messages) -> str:
    last = messages[-1]
    return last["content"] if isinstance(last, dict) else last.content


def test_depth_to_image_then_edit_image_through_an_app(suite, workspace):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM
    from chatgpt_tool_hub.tools.registry import ToolRegistry

    depth = grey_image(workspace, (48, 32), level=90)  # a flat grey depth map
    made = {}

    def edit(messages):
        made["depth2image"] = re.search(rf"image/{UUID}_depth2image_\w+\.png", _last_observation(messages)).group(0)
        return ('Thought: Do I need to use a tool? Yes\nAction: edit-image\n'
                f'Action Input: {{"image": "{made["depth2image"]}", "text": "make it look like a cartoon"}}')

    def answer(messages):
        made["pix2pix"] = re.search(rf"image/{UUID}_pix2pix_\w+\.png", _last_observation(messages)).group(0)
        return f"Thought: Do I need to use a tool? No\nAI: here it is: {made['pix2pix']}"

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: depth-to-image\n'
        f'Action Input: {{"image": "{depth}", "text": "a wooden house in a forest"}}',
        edit, answer])
    registry = ToolRegistry(discover=True)
    register_expert_tools(registry)
    settings = {k: v for k, v in suite.items() if k in ("diffusion_base_model", "depth_to_image_model",
                                                         "edit_image_model")}
    app = AppFactory(registry).create_app(tools_list=["depth-to-image", "edit-image"], llm=llm, no_default=True,
                                          expert_device="cpu", depth_to_image_steps=1, edit_image_steps=1, **settings)
    reply = app.ask(f"draw a wooden house in a forest from the depth map {depth}, then make it look like a cartoon")
    org = depth.split("/")[1][:8]
    first = re.fullmatch(rf"image/({UUID})_depth2image_{org}_{org}\.png", made["depth2image"])
    assert first, made
    assert re.fullmatch(rf"image/{UUID}_pix2pix_{first.group(1)}_{org}\.png", made["pix2pix"]), made
    assert reply == f"here it is: {made['pix2pix']}"
    for name in made.values():
        assert opened(workspace, name) == ("PNG", "RGB", (48, 32))
    stats = app.context.models.stats()  # the app's own manager: base + ControlNet + pix2pix
    assert stats["loads"] == 3 and any(m.endswith("diffusion-base cpu float32") for m in stats["models"])
