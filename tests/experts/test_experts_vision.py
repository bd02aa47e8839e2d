"""The vision tools on tiny random models, loaded through the same settings users set."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts import EXPERT_DESCRIPTIONS, EXPERT_TOOLS, register_expert_tools
from chatgpt_tool_hub.experts.tiny import LABELS, VOCAB
from chatgpt_tool_hub.experts.vision import ImageCaptioningTool, ImageClassificationTool, ObjectDetectionTool
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_captioning_returns_text(blip_dir, image_file):
    tool = ImageCaptioningTool.from_config(image_captioning_model=blip_dir, image_captioning_max_new_tokens=6,
                                           unrelated_key="ignored", bing_search_api_key="")
    observation = tool.run(image_file)  # plain text input
    assert observation.startswith(f"{image_file} shows: ")
    caption = observation.split("shows: ", 1)[1]
    assert caption and set(caption.split()) <= {w.lower() for w in VOCAB}
    assert tool.run({"image": image_file}).startswith(image_file)  # JSON input
    assert tool.is_loaded() and tool.model_key == (blip_dir, "image-text-to-text", "cpu", "float32")


def test_detection_boxes_and_annotated_image(detr_dir, image_file, workspace):
    from PIL import Image

    tool = ObjectDetectionTool.from_config(object_detection_model=detr_dir, object_detection_threshold=0,
                                           object_detection_device="cpu")
    observation = tool.run({"image": image_file})
    lines = observation.splitlines()
    assert lines[0].startswith(f"Found 5 object(s) in {image_file}")
    for line in lines[1:6]:
        assert re.fullmatch(r"- (cat|dog|car) \d\.\d\d \[-?\d+, -?\d+, -?\d+, -?\d+\]", line), line
    uuid = image_file.split("/")[1].split(".")[0]
    match = re.fullmatch(rf"Annotated image: (image/[0-9a-f]{{8}}_detect_{uuid}_{uuid}\.png)", lines[-1])
    assert match, lines[-1]
    with Image.open(workspace / match.group(1)) as annotated, Image.open(workspace / image_file) as original:
        assert annotated.size == original.size
        assert annotated.tobytes() != original.tobytes()  # boxes were drawn


def test_detection_threshold_filters(detr_dir, image_file, workspace):
    tool = ObjectDetectionTool.from_config(object_detection_model=detr_dir, object_detection_threshold="1.01")
    assert tool.run(image_file) == f"No objects found in {image_file} with a score of at least 1.01."
    assert sorted(p.name for p in (workspace / "image").iterdir()) == [image_file.split("/")[1]]


def test_classification_top_labels(vit_dir, image_file):
    tool = ImageClassificationTool.from_config(image_classification_model=vit_dir)
    lines = tool.run(image_file).splitlines()
    assert lines[0] == f"Top labels for {image_file}:"
    assert len(lines) == 6
    scores = []
    for line in lines[1:]:
        label, score = re.fullmatch(r"- (\w+): (0\.\d{3})", line).groups()
        assert label in LABELS
        scores.append(float(score))
    assert scores == sorted(scores, reverse=True)
    small = ImageClassificationTool.from_config(image_classification_model=vit_dir, image_classification_top_k=2)
    assert len(small.run(image_file).splitlines()) == 3


def test_missing_file_is_an_observation(vit_dir, workspace):
    tool = ImageClassificationTool(model=vit_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="file 'image/ghost.png' does not exist; use a file name"):
        tool.run("image/ghost.png")
    assert not tool.is_loaded()  # the input is checked before anything is loaded


def test_missing_file_through_the_engine(vit_dir, workspace):
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.testing import ScriptedLLM

    llm = ScriptedLLM([
        'Thought: Do I need to use a tool? Yes\nAction: image-classification\nAction Input: {"image": "image/x.png"}',
        "Thought: Do I need to use a tool? No\nAI: no such file",
    ])
    tool = ImageClassificationTool.from_config(image_classification_model=vit_dir)
    app = AppFactory().create_app(tools_list=[tool], llm=llm, no_default=True)
    assert app.ask("what is in image/x.png?") == "no such file"
    observation = llm.requests[1][-1]["content"]
    assert "file 'image/x.png' does not exist" in observation


def test_eight_threads_on_a_cold_tool_load_once(vit_dir, image_file):
    manager = ModelManager()
    tool = ImageClassificationTool(model=vit_dir, device="cpu", manager=manager)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def call():
        barrier.wait()
        try:
            results.append(tool.run(image_file))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8 and len(set(results)) == 1
    stats = manager.stats()
    assert (stats["loads"], stats["hits"]) == (1, 7)


def test_budget_evicts_least_recently_used_tool(blip_dir, detr_dir, vit_dir, image_file):
    manager = ModelManager()
    tools = [cls(model=path, device="cpu", manager=manager, options={"threshold": 0})
             for cls, path in ((ImageCaptioningTool, blip_dir), (ObjectDetectionTool, detr_dir),
                               (ImageClassificationTool, vit_dir))]
    sizes = []
    for tool in tools:
        tool.load()
        sizes.append(manager.stats()["resident_mb"] - sum(sizes))
    manager.clear()
    manager.memory_budget_mb = sizes[0] + sizes[1] + sizes[2] - min(sizes) / 2  # all three never fit
    tools[0].run(image_file)
    tools[1].run(image_file)
    tools[0].run(image_file)  # touch the captioner: the detector is now least recently used
    tools[2].run(image_file)
    assert [t.is_loaded() for t in tools] == [True, False, True]


def test_missing_model_offline_names_the_setting(image_file):
    tool = ImageCaptioningTool.from_config(image_captioning_model="chatgpt-tool-hub-tests/no-such-model",
                                           expert_device="cpu")
    with pytest.raises(ToolExecutionError) as info:
        tool.run(image_file)
    message = str(info.value)
    assert message.startswith("could not load model 'chatgpt-tool-hub-tests/no-such-model' for "
                              "image-captioning: not found locally and the hub is unreachable")
    assert message.endswith("set image_captioning_model to a local path")


def test_default_model_offline_names_the_setting(image_file):
    tool = ImageCaptioningTool.from_config(expert_device="cpu")
    assert tool.model == "Salesforce/blip-image-captioning-base"
    try:
        tool.run(image_file)
    except ToolExecutionError as exc:  # the usual case: not in this machine's cache
        assert "set image_captioning_model to a local path" in str(exc)


def test_missing_local_folder(image_file, tmp_path):
    tool = ImageCaptioningTool.from_config(image_captioning_model=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set image_captioning_model"):
        tool.run(image_file)


def test_wrong_model_for_the_task(vit_dir, image_file):
    tool = ObjectDetectionTool.from_config(object_detection_model=vit_dir)
    with pytest.raises(ToolExecutionError, match="object_detection_model"):
        tool.run(image_file)


def test_not_an_image(vit_dir, workspace):
    (workspace / "notes.txt").write_text("hello")
    tool = ImageClassificationTool.from_config(image_classification_model=vit_dir)
    with pytest.raises(ToolInputError, match="not an image"):
        tool.run("notes.txt")


def test_cpu_placement_and_unload(vit_dir, image_file):
    manager = ModelManager()
    tool = ImageClassificationTool(model=vit_dir, manager=manager)  # default device: no CUDA here -> cpu
    pipe = tool.load()
    assert str(pipe.device) == "cpu" and str(pipe.model.dtype) == "torch.float32"
    assert tool.unload() is True and not tool.is_loaded() and tool.unload() is False


def test_registration_table():
    from chatgpt_tool_hub.tools.registry import ToolRegistry

    assert set(EXPERT_TOOLS) >= {"image-captioning", "visual-question-answering", "object-detection",
                                 "image-classification", "image-segmentation", "depth-estimation",
                                 "speech-recognition", "text-to-speech", "text-classification", "text-to-image"}
    assert set(EXPERT_DESCRIPTIONS) == set(EXPERT_TOOLS)
    registry = ToolRegistry()
    register_expert_tools(registry)
    assert registry.default_tool_names() == []
    tool = registry.build("object-detection", object_detection_threshold="0.25", unrelated=1)
    assert isinstance(tool, ObjectDetectionTool) and tool.options["threshold"] == 0.25
    for name in EXPERT_TOOLS:
        built = registry.build(name)
        assert built.name == name and built.description.startswith(f"{name}: ")
        assert "Example" in built.description and "Input: " in built.description and "Output: " in built.description
        assert built.task and built.hub_task and built.default_model and built.model == built.default_model
        files = {p for p, k in built.input_kinds().items() if k != "text"}
        assert files <= {"image", "audio", "video"}, (name, files)  # file parameters are named by their kind
        assert built.output_kind in ("text", "image", "audio", "video")


def test_detection_default_needs_no_timm(yolos_dir, image_file):
    assert ObjectDetectionTool.default_model == "hustvl/yolos-tiny"
    tool = ObjectDetectionTool.from_config(object_detection_model=yolos_dir, object_detection_threshold=0)
    lines = tool.run(image_file).splitlines()
    assert lines[0].startswith(f"Found 5 object(s) in {image_file}") and "_detect_" in lines[-1]
    assert type(tool.load().model).__name__ == "YolosForObjectDetection"


LIGHT_IMPORT = """
import sys
import chatgpt_tool_hub
from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.experts import EXPERT_DESCRIPTIONS, EXPERT_TOOLS, register_expert_tools
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.registry import ToolRegistry

registry = ToolRegistry(discover=True)
register_expert_tools(registry)
app = AppFactory(registry).create_app(tools_list=list(EXPERT_TOOLS), llm=ScriptedLLM([]), no_default=True,
                                      expert_load="image-captioning_cuda:0", expert_memory_budget_mb=512)
heavy = [m for m in ("torch", "transformers", "PIL", "numpy") if m in sys.modules]
print(sorted(t.name for t in app.tools), heavy)
"""


def test_create_app_with_expert_tools_stays_light(tmp_path):
    out = subprocess.run([sys.executable, "-c", LIGHT_IMPORT], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{sorted(EXPERT_TOOLS)} []", out.stdout


@pytest.mark.gpu
def test_half_precision_on_cuda(blip_dir, vit_dir, image_file):
    manager = ModelManager()
    tool = ImageCaptioningTool(model=blip_dir, manager=manager)
    assert tool.device == "cuda" and tool.dtype == "float16"
    assert tool.run(image_file).startswith(image_file)
    pipe = tool.load()
    assert str(pipe.model.dtype) == "torch.float16" and pipe.device.type == "cuda"
    full = ImageClassificationTool.from_config(image_classification_model=vit_dir, expert_half_precision=False)
    assert full.dtype == "float32"


@pytest.mark.gpu
def test_placement_on_cuda0_and_eviction_frees_gpu_memory(detr_dir, image_file):
    import torch

    manager = ModelManager()
    tool = ObjectDetectionTool.from_config(object_detection_model=detr_dir, expert_load="object-detection_cuda:0",
                                           object_detection_threshold=0)
    tool.manager = manager
    assert tool.run(image_file).startswith("Found")
    pipe = tool.load()
    assert str(next(pipe.model.parameters()).device) == "cuda:0"
    del pipe
    before = torch.cuda.memory_allocated(0)
    assert tool.unload()
    assert torch.cuda.memory_allocated(0) < before
