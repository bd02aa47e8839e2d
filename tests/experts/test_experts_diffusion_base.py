"""The shared Stable Diffusion base: one load for many tools, no weight copies, eviction, dtype, errors, memory."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, UserError
from chatgpt_tool_hub.runtime.models.manager import ModelManager, model_bytes

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

ROOT = Path(__file__).resolve().parents[2]
WANTED = ("text-to-image", "image-to-image", "edit-image", "remove-object", "canny-to-image", "depth-to-image")


@pytest.fixture(scope="session")
def suite(tmp_path_factory) -> dict:
    from chatgpt_tool_hub.experts.tiny.diffusion import build_diffusion_suite

    return build_diffusion_suite(tmp_path_factory.mktemp("tiny-diffusion-base"), WANTED)


def tool_for(name: str, suite: dict, manager: ModelManager | None = None, **settings):
    from importlib import import_module

    from chatgpt_tool_hub.experts.tables.diffusion import TOOLS

    module, cls, _ = TOOLS[name]
    key = name.replace("-", "_")
    own = {k: v for k, v in suite.items() if k == "diffusion_base_model" or k.startswith(key + "_")}
    options = {f"{key}_steps": 1, f"{key}_seed": 0}
    if name == "text-to-image":
        options.update(text_to_image_width=32, text_to_image_height=32)
    tool = getattr(import_module(module), cls).from_config(**{"expert_device": "cpu", **own, **options, **settings})
    tool.manager = manager or ModelManager()
    return tool


def picture(workspace, size=(32, 32)) -> str:
    from PIL import Image

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    return ingest_image(Image.new("RGB", size, (200, 60, 60)), workspace)


def test_one_base_for_several_tools_and_no_weight_copies(suite, workspace):
    manager = ModelManager()
    tools = {name: tool_for(name, suite, manager) for name in
             ("text-to-image", "image-to-image", "canny-to-image", "depth-to-image")}
    source = picture(workspace)
    tools["text-to-image"].run({"text": "a red cat"})
    for name in ("image-to-image", "canny-to-image", "depth-to-image"):
        assert tools[name].run({"image": source, "text": "a red cat"}).value.startswith("image/")
    stats = manager.stats()
    assert stats["loads"] == 3  # the base (once, for four tools) and two ControlNets
    assert sum(m.endswith("diffusion-base cpu float32") for m in stats["models"]) == 1
    canny, depth = tools["canny-to-image"], tools["depth-to-image"]
    base = canny.load_base()
    assert base is tools["text-to-image"].load() is tools["image-to-image"].load()
    # the budget counts the base once: its bytes plus each ControlNet's own
    expected = model_bytes(base) + model_bytes(canny.load()) + model_bytes(depth.load())
    assert stats["resident_mb"] == round(expected / 1024 / 1024, 3)
    for pipe in (canny.pipeline(canny.load(), base), tools["image-to-image"].pipeline(base, None)):
        assert pipe.unet is base.unet and pipe.vae is base.vae and pipe.text_encoder is base.text_encoder
        assert pipe.tokenizer is base.tokenizer and pipe.scheduler is not base.scheduler  # a scheduler per call
    assert type(canny.pipeline(canny.load(), base)).__name__ == "StableDiffusionControlNetPipeline"
    assert type(canny.pipeline(canny.load(), base).scheduler).__name__ == "UniPCMultistepScheduler"


@pytest.mark.slow
def test_a_budget_that_fits_the_base_once_evicts_nothing(suite, workspace):
    sizing = ModelManager()
    canny, depth = tool_for("canny-to-image", suite, sizing), tool_for("depth-to-image", suite, sizing)
    total = model_bytes(canny.load_base()) + model_bytes(canny.load()) + model_bytes(depth.load())
    manager = ModelManager(memory_budget_mb=total / 1024 / 1024 * 1.05)  # not room for a second base
    source = picture(workspace)
    for name in ("text-to-image", "canny-to-image", "depth-to-image", "image-to-image", "canny-to-image"):
        tool = tool_for(name, suite, manager)
        tool.run({"text": "a cat"} if name == "text-to-image" else {"image": source, "text": "a cat"})
    assert manager.stats()["evictions"] == 0 and manager.stats()["loads"] == 3


@pytest.mark.slow
def test_evicting_the_base_frees_it(suite, workspace):
    manager = ModelManager()
    canny, edit = tool_for("canny-to-image", suite, manager), tool_for("edit-image", suite, manager)
    source = picture(workspace)
    canny.run({"image": source, "text": "a cat"})
    unet = weakref.ref(canny.load_base().unet)
    assert unet() is not None
    manager.memory_budget_mb = 0.001  # room for one model at a time
    edit.run({"image": source, "text": "make it blue"})  # loading pix2pix evicts the base and the ControlNet
    gc.collect()
    assert not manager.is_loaded(canny.base_key) and not canny.is_loaded() and edit.is_loaded()
    assert unet() is None  # no pipeline built on the base kept its modules alive
    loads = manager.stats()["loads"]
    assert canny.run({"image": source, "text": "a cat"}).value.startswith("image/")  # loads both again
    assert manager.stats()["loads"] == loads + 2 and manager.stats()["evictions"] >= 3


@pytest.mark.slow
def test_a_base_evicted_during_a_call_is_freed_when_the_call_ends(suite, workspace, monkeypatch):
    manager = ModelManager()
    canny = tool_for("canny-to-image", suite, manager)
    refs = []
    generate = type(canny).generate

    def evict_midway(self, pipe, **inputs):
        refs.append(weakref.ref(pipe.unet))
        assert manager.evict(self.base_key)  # another tool made room while this call ran on the base
        return generate(self, pipe, **inputs)

    monkeypatch.setattr(type(canny), "generate", evict_midway)
    assert canny.run({"image": picture(workspace), "text": "a cat"}).value.startswith("image/")
    assert refs and refs[0]() is None and not manager.is_loaded(canny.base_key) and canny.is_loaded()


def test_pipelines_on_a_float16_base_leave_it_float16(suite):
    import torch

    from chatgpt_tool_hub.experts.diffusion_control import CannyToImageTool
    from chatgpt_tool_hub.experts.diffusion_edit import EditImageTool, RemoveObjectTool
    from chatgpt_tool_hub.experts.generation import ImageToImageTool

    manager = ModelManager()

    def half(cls, **options):  # float16 on the CPU: the pipelines are only built, never run
        tool = type(f"Half{cls.__name__}", (cls,), {"dtype": "float16"})(
            model=suite.get(f"{cls.name.replace('-', '_')}_model"), base_model=suite["diffusion_base_model"],
            device="cpu", manager=manager, options=options)
        return tool

    canny = half(CannyToImageTool)
    base = canny.load_base()
    pipes = [canny.pipeline(canny.load(), base), half(ImageToImageTool).pipeline(base, None)]
    for cls in (EditImageTool, RemoveObjectTool):
        tool = half(cls, share_base=True)
        own = tool.load()
        assert type(own).__name__ == "UNet2DConditionModel" and tool.model_key[1].endswith("/unet")
        pipes.append(tool.pipeline(own, base))
        assert pipes[-1].unet is own and pipes[-1].vae is base.vae
    for module in (base.unet, base.vae, base.text_encoder, canny.load()):
        assert {p.dtype for p in module.parameters()} == {torch.float16}
    assert all(p.text_encoder is base.text_encoder for p in pipes)


def test_float16_is_chosen_on_cuda():
    from chatgpt_tool_hub.experts.diffusion_control import DepthToImageTool
    from chatgpt_tool_hub.experts.generation import TextToImageTool, TextToVideoTool

    base = "./tiny-base"  # nothing is loaded
    for cls in (DepthToImageTool, TextToImageTool, TextToVideoTool):
        gpu = cls.from_config(expert_device="cuda", diffusion_base_model=base)
        assert gpu.dtype == "float16" and gpu.model_key[2:] == ("cuda", "float16")
        assert gpu.base_key == (base, "diffusion-base", "cuda", "float16")
        full = cls.from_config(expert_device="cuda:1", expert_half_precision=False, diffusion_base_model=base)
        assert full.dtype == "float32" and full.base_key[2:] == ("cuda:1", "float32")
        assert cls.from_config(expert_device="cpu").dtype == "float32"


@pytest.mark.parametrize("name,settings,setting", [
    ("canny-to-image", {"diffusion_base_model": "./no-such-base"}, "diffusion_base_model"),
    ("canny-to-image", {"canny_to_image_model": "./no-such-controlnet"}, "canny_to_image_model"),
    ("text-to-image", {"diffusion_base_model": "./no-such-base"}, "diffusion_base_model"),
    ("text-to-image", {"text_to_image_model": "./no-such-model"}, "text_to_image_model"),
    ("image-to-image", {"image_to_image_model": "./no-such-model"}, "image_to_image_model"),
    ("edit-image", {"edit_image_model": "./no-such-pix2pix"}, "edit_image_model"),
    ("remove-object", {"remove_object_mask_model": "./no-such-clipseg"}, "remove_object_mask_model"),
    ("remove-object", {"remove_object_model": "./no-such-inpaint"}, "remove_object_model"),
    ("text-to-video", {"text_to_video_model": "./no-such-video-model"}, "text_to_video_model"),
])
def test_a_missing_model_folder_names_its_setting(name, settings, setting, suite, workspace):
    tool = tool_for(name, suite, **settings)
    inputs = ({"text": "a cat"} if name in ("text-to-image", "text-to-video") else
              {"image": picture(workspace), "object": "a cat"} if name == "remove-object" else
              {"image": picture(workspace), "text": "a cat"})
    with pytest.raises(ToolExecutionError, match=rf"no such folder; set {setting} to a folder made by save_pretrained"):
        tool.run(inputs)


def test_a_base_missing_from_the_hub_cache_names_the_setting(suite, workspace):
    tool = tool_for("depth-to-image", suite, diffusion_base_model="chatgpt-tool-hub-tests/no-such-base")
    with pytest.raises(ToolExecutionError, match="not found locally and the hub is unreachable .*"
                                                 "set diffusion_base_model to a local path"):
        tool.run({"image": picture(workspace), "text": "a cat"})


def test_a_controlnet_for_another_base_is_refused(suite, workspace, tmp_path):
    from diffusers import ControlNetModel, UNet2DConditionModel

    unet = UNet2DConditionModel(sample_size=16, layers_per_block=1, block_out_channels=(8, 16), cross_attention_dim=32,
                                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), attention_head_dim=2,
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=4)
    ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(4, 8)).save_pretrained(tmp_path / "cn32")
    tool = tool_for("canny-to-image", suite, canny_to_image_model=str(tmp_path / "cn32"))
    with pytest.raises(ToolExecutionError, match=r"canny_to_image_model\) was made for a base with cross-attention "
                                                 r"width 32, but diffusion_base_model .* has 16; "
                                                 r"set diffusion_base_model"):
        tool.run({"image": picture(workspace), "text": "a cat"})


def test_a_unet_with_the_wrong_input_channels_is_refused(suite, workspace):
    tool = tool_for("edit-image", suite, edit_image_model=suite["remove_object_model"])  # an inpainting model
    with pytest.raises(ToolExecutionError, match="its UNet takes 9 input channels, not 8 as instruct-pix2pix models "
                                                 "do; set edit_image_model to a model that supports"):
        tool.run({"image": picture(workspace), "text": "make it blue"})


def test_share_base_runs_edit_and_inpainting_on_the_base(suite, workspace):
    manager = ModelManager()
    source = picture(workspace, (40, 32))
    edit = tool_for("edit-image", suite, manager, edit_image_share_base=True)
    remove = tool_for("remove-object", suite, manager, remove_object_share_base="true", remove_object_mask_threshold=0)
    assert re.fullmatch(r"image/[0-9a-f]{8}_pix2pix_.*\.png", edit.run({"image": source, "text": "blue"}).value)
    assert "_remove-something_" in remove.run({"image": source, "object": "the cat"}).value
    stats = manager.stats()  # the base, two UNets and CLIPSeg: no second VAE or text encoder
    assert stats["loads"] == 4 and manager.is_loaded(edit.base_key)
    assert sorted(m.split()[-3] for m in stats["models"]) == ["clipseg", "diffusion-base", "inpainting/unet",
                                                              "instruct-pix2pix/unet"]


def test_text_to_image_runs_on_the_base_unless_it_has_its_own_model(suite):
    base = suite["diffusion_base_model"]
    shared = tool_for("text-to-image", suite)
    canny = tool_for("canny-to-image", suite)
    assert shared.model == base and shared.fixed_model is None and shared.model_key == canny.base_key
    own = tool_for("text-to-image", suite, text_to_image_model=suite["edit_image_model"])
    assert own.model_key[0] == suite["edit_image_model"] and own.model_key != canny.base_key
    assert own.fixed_model == "set by text_to_image_model"
    other = shared.with_model("some/other-model")  # the planner's pick: a base of its own
    assert other.model_key[0] == "some/other-model" and other.base_model == base


def test_controlnet_tools_keep_their_controlnet(suite):
    from chatgpt_tool_hub.experts.diffusion_control import CannyToImageTool

    canny = CannyToImageTool.from_config(diffusion_base_model=suite["diffusion_base_model"])
    assert canny.model == "lllyasviel/control_v11p_sd15_canny"  # the default: no setting chose it
    assert canny.fixed_model is None  # the planner may pick another canny ControlNet from the catalog
    from chatgpt_tool_hub.planner.catalog import load_catalog

    offered = [m.id for m in load_catalog().candidates(canny, top_k=10)]
    assert offered and all("canny" in m for m in offered)  # ... and only canny ControlNets are offered
    assert tool_for("canny-to-image", suite).fixed_model == "set by canny_to_image_model"
    assert canny.with_model("./another-controlnet").base_model == suite["diffusion_base_model"]


def test_concurrent_calls_on_the_shared_base(suite, workspace):
    manager = ModelManager()
    source = picture(workspace)
    tools = [tool_for(name, suite, manager) for name in ("canny-to-image", "depth-to-image", "text-to-image") * 2]
    barrier, results, errors = threading.Barrier(len(tools)), [], []

    def call(tool):
        barrier.wait()
        try:
            inputs = {"text": "a cat"} if tool.name == "text-to-image" else {"image": source, "text": "a cat"}
            results.append(tool.run(inputs))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(tool,)) for tool in tools]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == len(tools) and manager.stats()["loads"] == 3


def test_diffusion_models_are_built_one_at_a_time(suite, monkeypatch):
    """accelerate's init_empty_weights patches torch process-wide: two loads at once would corrupt each other."""
    import diffusers

    from chatgpt_tool_hub.experts import diffusion_base

    held = []
    original = diffusers.ControlNetModel.from_pretrained

    def watched(*args, **kwargs):
        held.append(diffusion_base.LOAD_LOCK.held())  # this thread holds the process-wide load lock
        return original(*args, **kwargs)

    monkeypatch.setattr(diffusers.ControlNetModel, "from_pretrained", watched)
    tool_for("canny-to-image", suite).load()
    assert held == [True]


def test_video_format_must_be_gif_or_mp4():
    from chatgpt_tool_hub.experts.generation import TextToVideoTool

    with pytest.raises(ConfigError, match="text_to_video_format' must be gif or mp4") as info:
        TextToVideoTool.from_config(text_to_video_format="avi")
    assert info.value.key == "text_to_video_format"


def test_missing_diffusers_names_the_extra(monkeypatch, suite, workspace):
    source = picture(workspace)
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(UserError, match=r'depth-to-image needs diffusers.*pip install "chatgpt-tool-hub\[diffusion\]"'):
        tool_for("depth-to-image", suite).run({"image": source, "text": "a cat"})


def test_an_image_tool_on_a_remote_endpoint(fake_endpoint, workspace):
    import base64
    import io

    from PIL import Image

    from chatgpt_tool_hub.experts.diffusion_edit import EditImageTool

    buffer = io.BytesIO()
    Image.new("RGB", (24, 16), "green").save(buffer, "PNG")
    fake_endpoint.reply_bytes(buffer.getvalue(), "image/png")
    source = picture(workspace)
    tool = EditImageTool.from_config(edit_image_endpoint=fake_endpoint.url, edit_image_steps=3)
    observation = tool.run({"image": source, "text": "make it green"})
    assert re.fullmatch(rf"Edited {source} as instructed: image/[0-9a-f]{{8}}_pix2pix_.*\.png \(24x16\)\.", observation)
    body = json.loads(fake_endpoint.requests[0]["body"])
    assert base64.b64decode(body["inputs"]) == (workspace / source).read_bytes()
    assert body["parameters"] == {"prompt": "make it green", "num_inference_steps": 3, "guidance_scale": 7.5}


@pytest.mark.gpu
def test_diffusion_tools_in_half_precision_on_cuda(suite, workspace):
    import torch

    manager = ModelManager()
    source = picture(workspace, (48, 32))
    canny = tool_for("canny-to-image", suite, manager, expert_device="cuda")
    edit = tool_for("edit-image", suite, manager, expert_device="cuda")
    video = tool_for("text-to-video", suite, manager, expert_device="cuda", text_to_video_num_frames=2,
                     text_to_video_width=32, text_to_video_height=32)
    assert "canny2image" in canny.run({"image": source, "text": "a cat"}).value
    assert "pix2pix" in edit.run({"image": source, "text": "make it blue"}).value
    assert video.run("a cat").value.endswith(".gif")
    base = canny.load_base()
    assert canny.base_key[2:] == ("cuda", "float16") and base.unet.dtype == torch.float16
    assert base.unet.device.type == "cuda" and canny.load().dtype == torch.float16
    assert edit.load().unet.dtype == torch.float16


# ---- the memory benchmark and the docs ------------------------------------------------------


def _benchmark(*args: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "diffusion_memory.py"), *args],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _totals(text: str) -> tuple[list[float], list[float]]:
    loaded = [float(x) for x in re.search(r"all loaded at once\s+([\d.]+)\s+([\d.]+)", text).groups()]
    accounted = [float(x) for x in re.search(r"managers account\s+([\d.]+)\s+([\d.]+)", text).groups()]
    return loaded, accounted


@pytest.mark.slow
def test_memory_benchmark_shared_vs_separate():
    text = _benchmark("--tools", "text-to-image", "canny-to-image", "depth-to-image", "edit-image")
    (shared, separate), (shared_accounted, separate_accounted) = _totals(text)
    assert shared_accounted == shared and separate_accounted == separate  # the managers count the base once
    rows = {k: float(v) for k, v in re.findall(r"^([a-z-]+-image)\s+([\d.]+)\s+[\d.]+$", text, re.M)}
    # after text-to-image loaded the base, a ControlNet tool adds its ControlNet only
    assert 0 < rows["canny-to-image"] == rows["depth-to-image"] < rows["text-to-image"] / 2
    assert 1.3 < separate / shared < 3 and "the shared layout holds 4 models" in text


@pytest.mark.slow
def test_memory_benchmark_at_real_size():
    text = _benchmark("--shapes")
    assert "unet 859.5" in text and "controlnet 361.3" in text and "vae 83.7" in text
    (shared, separate), _ = _totals(text)
    assert 16_000 < shared < 18_500 and separate / shared > 2.4  # float16 MB


@pytest.mark.slow
def test_the_docs_runnable_blocks_run(tmp_path):
    text = (ROOT / "docs" / "experts" / "diffusion.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```python[ \t]*\n(.*?)^```", text, re.S | re.M) if b.startswith("# runnable")]
    assert blocks
    for code in blocks:
        script = tmp_path / "block.py"
        script.write_text(code, encoding="utf-8")
        env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env=env)
        assert out.returncode == 0, out.stderr[-2000:]


def test_a_controlnet_folder_with_its_own_base_uses_it_inside_an_app(tmp_path):
    """An app passes every setting, diffusion_base_model's default included: a ControlNet folder that
    carries its base (the tiny BUILDERS models) still runs on that base, with nothing looked up online."""
    from chatgpt_tool_hub.apps import AppFactory
    from chatgpt_tool_hub.experts.tiny import BUILDERS
    from chatgpt_tool_hub.testing import ScriptedLLM

    folder = BUILDERS["canny-to-image"](tmp_path / "canny")
    app = AppFactory().create_app(tools_list=["canny-to-image"], llm=ScriptedLLM([]), no_default=True,
                                  workspace_dir=str(tmp_path / "ws"), canny_to_image_model=str(folder))
    tool = next(t for t in app.tools if t.name == "canny-to-image")
    assert tool.base_model == str(Path(folder) / "base")
    chosen = AppFactory().create_app(tools_list=["canny-to-image"], llm=ScriptedLLM([]), no_default=True,
                                     workspace_dir=str(tmp_path / "ws"), canny_to_image_model=str(folder),
                                     diffusion_base_model=str(tmp_path / "my-base"))
    assert next(t for t in chosen.tools if t.name == "canny-to-image").base_model == str(tmp_path / "my-base")
