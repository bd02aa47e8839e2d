"""The ExpertTool extension API, on a fake model (no torch needed), and loading-layer errors."""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError, ToolInputError, UserError
from chatgpt_tool_hub.experts.base import ExpertTool, open_image
from chatgpt_tool_hub.runtime.models import loading, progress
from chatgpt_tool_hub.runtime.models.manager import ModelManager


class Negative(ExpertTool):
    """What a new tool looks like: attributes, call_local, render (load_model overridden to skip transformers)."""

    name = "image-negative"
    task = "image-to-image"
    default_model = "example/negative"
    description = "image-negative: inverts an image. Input: {\"image\": path}. Output: the new image's name."
    parameters = {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]}
    output_kind = "image"
    options = {"strength": 255}

    def load_model(self, device: str, dtype: str) -> Any:
        self.loaded_with = (device, dtype)
        return lambda img: img.point(lambda v: self.options["strength"] - v)

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image))

    def render(self, result: Any, *, image: str) -> str:
        return f"Inverted {self.rel(image)} into {self.save_image(result, image, 'negative')}"


def test_a_new_tool_in_a_few_lines(image_file, workspace):
    from PIL import Image

    tool = Negative.from_config(image_negative_strength="200", image_negative_device="cpu", other="x")
    assert tool.options == {"strength": 200} and tool.model == "example/negative"
    uuid = image_file.split("/")[1][:8]
    observation = tool.run(image_file)
    assert observation.startswith(f"Inverted {image_file} into image/")
    made = observation.split(" into ")[1]
    assert made.endswith(f"_negative_{uuid}_{uuid}.png") and tool.loaded_with == ("cpu", "float32")
    with Image.open(workspace / made) as out, Image.open(workspace / image_file) as src:
        assert out.getpixel((0, 0)) == tuple(200 - v for v in src.getpixel((0, 0)))
    chained = tool.run(made).split(" into ")[1]
    assert chained.split("_")[2] == made.split("/")[1][:8] and chained.endswith(f"_{uuid}.png")


def test_render_failure_is_an_observation(image_file):
    class Broken(Negative):
        def render(self, result, *, image):
            raise KeyError("generated_text")

    with pytest.raises(ToolExecutionError, match="image-negative failed: KeyError"):
        Broken(device="cpu", manager=ModelManager()).run(image_file)


def test_model_mismatch_hint(image_file):
    class Mismatch(Negative):
        def call_local(self, model, *, image):
            raise AttributeError("'ViTImageProcessor' object has no attribute 'post_process'")

    with pytest.raises(ToolExecutionError, match="check that image_negative_model"):
        Mismatch(device="cpu", manager=ModelManager()).run(image_file)


def test_out_of_memory_hint(image_file):
    class Oom(Negative):
        def call_local(self, model, *, image):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(ToolExecutionError, match="image_negative_device=cpu or a smaller expert_memory_budget_mb"):
        Oom(device="cpu", manager=ModelManager()).run(image_file)


def test_input_is_checked_before_loading(workspace):
    tool = Negative(device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="does not exist"):
        tool.run("image/none.png")
    assert tool.manager.stats()["loads"] == 0


def test_missing_backend_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[experts\]"'):
        loading.import_backend()


SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's default "dots" spinner


class PseudoTerminal:
    """A pseudo-terminal; ``with term:`` puts ``sys.stderr`` on it, :meth:`shown` reads what it displayed."""

    def __init__(self):
        pty = pytest.importorskip("pty")
        self.master, slave = pty.openpty()
        self.stream = open(slave, "w", encoding="utf-8", buffering=1)
        os.set_blocking(self.master, False)

    def __enter__(self) -> "PseudoTerminal":
        # set inside the test body: pytest's capturing replaces sys.stderr between setup and call
        self._saved, sys.stderr = sys.stderr, self.stream
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr = self._saved

    def shown(self) -> str:
        self.stream.flush()
        data = b""
        while select.select([self.master], [], [], 0.2)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        self.stream.close()
        os.close(self.master)


@pytest.fixture
def terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "400")  # rich sizes from the real std streams; keep long labels on one line
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    term = PseudoTerminal()
    yield term
    term.close()


def test_spinner_on_a_terminal(terminal):
    with terminal:
        assert progress.stderr_is_tty()
        with progress.loading("demo-model for demo-tool on cpu"):
            time.sleep(0.35)  # a few refreshes (rich redraws 10 times a second)
    shown = terminal.shown()
    assert "loading demo-model for demo-tool on cpu" in shown
    assert "0:00:00" in shown  # the elapsed-time column
    assert any(frame in shown for frame in SPINNER_FRAMES), shown
    assert "\x1b[2K" in shown  # transient: the line is erased when the block ends


def test_no_spinner_without_a_terminal(capfd):
    assert not progress.stderr_is_tty()  # pytest captures stderr: not a terminal
    with progress.loading("demo-model"):
        time.sleep(0.15)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_a_model_load_shows_the_spinner_with_its_label(terminal, vit_dir, image_file):
    from chatgpt_tool_hub.experts.vision import ImageClassificationTool

    tool = ImageClassificationTool(model=vit_dir, device="cpu", manager=ModelManager())
    with terminal:
        assert tool.run(image_file).startswith("Top labels")
    shown = terminal.shown()
    assert f"loading {vit_dir} for image-classification on cpu" in shown, shown[-500:]
    with terminal:
        assert tool.run(image_file).startswith("Top labels")  # loaded once: no second spinner
    assert f"loading {vit_dir}" not in terminal.shown()


def test_looks_like_path():
    assert loading.looks_like_path("./models/blip") and loading.looks_like_path("/abs/x")
    assert loading.looks_like_path("~/m") and loading.looks_like_path("a/b/c")
    assert not loading.looks_like_path("Salesforce/blip-image-captioning-base")


def test_with_model_is_a_copy_sharing_the_manager(workspace):
    manager = ModelManager()
    tool = Negative(model="example/a", device="cpu", manager=manager, endpoint="http://127.0.0.1:9/x",
                    options={"strength": 100}, workspace_dir=workspace)
    other = tool.with_model(" example/b ")
    assert other is not tool and isinstance(other, Negative)
    assert (other.model, tool.model) == ("example/b", "example/a")
    assert other.manager is manager and other.device_plan == tool.device_plan and other.workspace == tool.workspace
    assert other.endpoint is None and tool.endpoint is not None  # an endpoint serves one model
    other.options["strength"] = 1
    assert tool.options["strength"] == 100
    same = tool.with_model("example/a")
    assert same is not tool and same.endpoint is tool.endpoint
    with pytest.raises(ConfigError, match="image_negative_model"):
        tool.with_model("")


def test_with_model_loads_the_other_model_once(vit_dir, image_file, tmp_path):
    from chatgpt_tool_hub.experts.tiny import build_vit
    from chatgpt_tool_hub.experts.vision import ImageClassificationTool

    manager = ModelManager()
    tool = ImageClassificationTool(device="cpu", manager=manager)  # default hub id: never loaded here
    first, second = tool.with_model(vit_dir), tool.with_model(build_vit(tmp_path / "vit2"))
    assert first.run(image_file).startswith("Top labels") and second.run(image_file).startswith("Top labels")
    assert tool.with_model(vit_dir).run(image_file).startswith("Top labels")
    assert manager.stats()["loads"] == 2 and not tool.is_loaded()


def test_hub_task_defaults_to_task():
    class Child(Negative):
        task = "image-to-image"

    class Grandchild(Child):
        hub_task = "image-editing"

    class Great(Grandchild):
        pass

    assert (Negative.hub_task, Child.hub_task, Grandchild.hub_task, Great.hub_task) == (
        "image-to-image", "image-to-image", "image-editing", "image-editing")
    assert ExpertTool.hub_task == ""


def test_hub_tasks_match_the_planner_catalog():
    """Every expert tool's hub_task names a task of the planner's bundled model catalog."""
    from importlib import import_module

    from chatgpt_tool_hub.experts import EXPERT_TOOLS

    catalog_module = pytest.importorskip("chatgpt_tool_hub.planner.catalog")
    catalog = catalog_module.load_catalog()
    for name, (module, cls) in EXPERT_TOOLS.items():
        tool_class = getattr(import_module(module), cls)
        if catalog.fixed_reason(tool_class):  # an annotator: it keeps its own model, nothing to select
            continue
        assert catalog.for_task(tool_class.hub_task), (name, tool_class.hub_task)
        assert any(m.id.split("/")[-1] == tool_class.default_model.split("/")[-1]
                   for m in catalog.for_task(tool_class.hub_task)) or name == "text-to-image", name


def test_a_model_evicted_during_a_call_is_reclaimed_when_the_call_ends(image_file):
    """Eviction cannot free a model a call still holds; the call returns the memory when it ends."""
    import weakref

    manager = ModelManager()
    reclaimed = []

    class Evicting(Negative):
        evict = True

        def call_local(self, model, *, image):
            self.ref = weakref.ref(model)
            if self.evict:
                manager.evict(self.model_key)  # another thread's load evicted it while this call ran
            return model(open_image(image))

    tool = Evicting(device="cpu", manager=manager)
    manager.reclaim = lambda device=None: reclaimed.append((device, tool.ref() is None))
    assert tool.run(image_file).startswith("Inverted")
    # the eviction's own clean-up ran while the call held the model; the second, after it let go
    assert reclaimed == [(None, False), ("cpu", True)]
    reclaimed.clear()
    tool.evict = False
    tool.run(image_file)  # a resident model: nothing to reclaim
    assert reclaimed == []


def test_checkpoint_size_is_the_expected_size_under_a_budget(tmp_path, workspace):
    folder = tmp_path / "model"
    (folder / "unet").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 3 * 2**20)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 5 * 2**20)  # the same weights again: not counted
    (folder / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"\0" * 2**20)
    (folder / "unet" / "diffusion_pytorch_model.fp16.safetensors").write_bytes(b"\0" * 2**19)  # a variant
    assert loading.checkpoint_mb(str(folder)) == pytest.approx(4.0)
    assert loading.checkpoint_mb(str(tmp_path / "missing")) is None
    assert loading.checkpoint_mb("chatgpt-tool-hub-tests/not-cached") is None

    seen = []

    class Recording(ModelManager):
        def get(self, key, loader, **kwargs):
            seen.append(kwargs.get("expected_mb"))
            return super().get(key, loader, **kwargs)

    tool = Negative(model=str(folder), device="cpu", manager=Recording(memory_budget_mb=100))
    tool.load()
    tool.manager.memory_budget_mb = 0
    Negative(model=str(folder), device="cpu", manager=tool.manager).with_model(str(folder) + "/").load()
    assert seen == [pytest.approx(4.0), None]  # estimated only when a budget needs it


def test_checkpoint_size_counts_floats_at_the_load_dtype(tmp_path):
    """A float32 safetensors checkpoint loaded in float16 takes half its file size (the header says so)."""
    import json
    import struct

    header = {"w": {"dtype": "F32", "shape": [1024, 256], "data_offsets": [0, 1024 * 1024]},
              "steps": {"dtype": "I64", "shape": [1], "data_offsets": [1024 * 1024, 1024 * 1024 + 8]},
              "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (1024 * 1024 + 8))
    mb = 1024 * 1024
    assert loading.checkpoint_mb(str(tmp_path), dtype="float16") == pytest.approx((mb // 2 + 8) / mb)
    assert loading.checkpoint_mb(str(tmp_path), dtype="float32") == pytest.approx((mb + 8) / mb)
    assert loading.checkpoint_mb(str(tmp_path)) == (tmp_path / "model.safetensors").stat().st_size / mb


# ---- odd inputs: what a user or a model hands over -------------------------------------------------------


def test_sixteen_bit_and_float_images_are_scaled_not_clipped_to_white(workspace):
    import numpy as np
    from PIL import Image

    from chatgpt_tool_hub.experts.base import open_image

    deep = Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16))  # half of 16 bits: mid grey
    deep.save(workspace / "deep.png")
    assert open_image(workspace / "deep.png").getpixel((0, 0)) == (128, 128, 128)
    Image.fromarray(np.full((4, 4), 0.25, dtype=np.float32), "F").save(workspace / "float.tiff")
    assert open_image(workspace / "float.tiff").getpixel((0, 0)) == (63, 63, 63)


def test_a_broken_image_says_why_and_a_url_is_not_taken_for_a_file(workspace):
    (workspace / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")
    tool = Negative(device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match=r"cut\.png' is not an image this tool can read \(.+\); hand over"):
        tool.run("cut.png")
    with pytest.raises(ToolInputError, match="is a URL; this tool reads files in the workspace only"):
        tool.run("https://images.test/cat.png")


def test_an_input_a_model_cannot_take_is_named_instead_of_blaming_the_model(workspace, image_file):
    from PIL import Image

    class Fragile(Negative):
        parameters = {"type": "object", "properties": {"image": {"type": "string"}, "question": {"type": "string"}},
                      "required": ["image"]}

        def call_local(self, model, *, image, question=""):
            raise IndexError("index out of range in self")

    tool = Fragile(device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="its question is 50,000 characters long.*shorten it"):
        tool.run({"image": image_file, "question": "x" * 50_000})
    Image.new("RGB", (1, 1)).save(workspace / "dot.png")
    with pytest.raises(ToolInputError, match="dot.png is 1x1 pixels, too small"):
        tool.run({"image": "dot.png"})
    with pytest.raises(ToolExecutionError, match="check that image_negative_model"):  # ordinary inputs: as before
        tool.run({"image": image_file, "question": "what?"})


def test_wav_files_of_24_bits_are_read_and_an_empty_audio_input_shows_an_audio_example(workspace):
    import wave

    import numpy as np

    from chatgpt_tool_hub.runtime.filenames import read_wav, resolve_input

    samples = np.array([0, 1 << 22, -(1 << 22), (1 << 23) - 1], dtype=np.int32)
    raw = b"".join(int(v & 0xFFFFFF).to_bytes(3, "little") for v in samples)
    with wave.open(str(workspace / "deep.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(3)
        out.setframerate(8000)
        out.writeframes(raw)
    data, rate = read_wav(workspace / "deep.wav")
    assert rate == 8000 and np.allclose(data, [0, 0.5, -0.5, 1.0], atol=1e-6)
    with pytest.raises(ToolInputError, match=r"e\.g\. audio/1a2b3c4d\.wav"):
        resolve_input("", workspace, "audio")
