"""Device and dtype resolution: <tool>_device, expert_load, expert_device, the default."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.runtime.models import devices
from chatgpt_tool_hub.runtime.models.devices import (
    DevicePlan,
    normalize_device,
    parse_load_spec,
    pick_dtype,
    plan_device,
    tool_key,
)


def test_tool_key():
    assert tool_key("image-captioning") == "image_captioning"


def test_per_tool_setting_wins():
    plan = plan_device("image-captioning", {"image_captioning_device": "cuda:1", "expert_device": "cpu",
                                            "expert_load": "image-captioning_cuda:0"})
    assert plan == DevicePlan("cuda:1", "image_captioning_device", True)


def test_load_spec_beats_global_device():
    kwargs = {"expert_load": "image-captioning_cuda:0,object-detection_cpu", "expert_device": "mps"}
    assert plan_device("image-captioning", kwargs).device == "cuda:0"
    assert plan_device("object-detection", kwargs).device == "cpu"
    assert plan_device("image-classification", kwargs) == DevicePlan("mps", "expert_device", True)


def test_default_is_decided_at_load_time(monkeypatch):
    plan = plan_device("image-captioning", {"image_captioning_device": "", "expert_device": None})
    assert plan.device is None and plan.source == "default"
    monkeypatch.setattr(devices, "default_device", lambda: "cuda")
    assert plan.resolve() == "cuda"


def test_default_device_follows_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.default_device() == "cpu"


@pytest.mark.parametrize("spec", [
    "image-captioning_cuda:0,object-detection_cpu",
    "ImageCaptioning_cuda:0, ObjectDetection_cpu",          # TaskMatrix spelling
    "image_captioning_cuda:0;object_detection_cpu",
    "image-captioning_CUDA:0 object-detection_cpu",
    {"image-captioning": "cuda:0", "object-detection": "cpu"},
])
def test_load_spec_forms(spec):
    assert parse_load_spec(spec) == {"image-captioning": "cuda:0", "object-detection": "cpu"}


def test_load_spec_accepts_bare_gpu_index():
    assert parse_load_spec("image-captioning_1") == {"image-captioning": "cuda:1"}


@pytest.mark.parametrize("spec", ["image-captioning", "image-captioning_gpu0", "_cpu", "image-captioning_",
                                  "image-captioning_cuda:x"])
def test_bad_load_spec_names_the_setting(spec):
    with pytest.raises(ConfigError) as info:
        parse_load_spec(spec)
    assert info.value.key == "expert_load"
    assert "expert_load" in str(info.value)


def test_bad_device_names_its_setting():
    with pytest.raises(ConfigError) as info:
        plan_device("object-detection", {"object_detection_device": "gpu"})
    assert info.value.key == "object_detection_device"
    with pytest.raises(ConfigError) as info:
        plan_device("object-detection", {"expert_device": "tpu"})
    assert info.value.key == "expert_device"
    assert normalize_device(" CUDA:2 ", "k") == "cuda:2"


def test_bad_spec_fails_when_the_tool_is_built():
    from chatgpt_tool_hub.experts.vision import ImageCaptioningTool

    with pytest.raises(ConfigError) as info:
        ImageCaptioningTool.from_config(expert_load="image-captioning:cuda")
    assert info.value.key == "expert_load"


def test_dtype():
    assert pick_dtype("cuda:0", True) == "float16"
    assert pick_dtype("cuda", False) == "float32"
    assert pick_dtype("cpu", True) == "float32"
    assert plan_device("x", {"expert_half_precision": "false"}).half_precision is False
    assert plan_device("x", {}, half_precision=False).half_precision is False
