"""Where an expert model runs: device and dtype resolution.

Precedence, most specific first:

1. ``<tool>_device`` (tool name with ``-`` → ``_``), e.g. ``image_captioning_device="cuda:1"``;
2. ``expert_load``, a TaskMatrix-style load spec:
   ``"image-captioning_cuda:0,object-detection_cpu"`` (``ImageCaptioning_cuda:0``
   and ``image_captioning_cuda:0`` spell the same tool);
3. ``expert_device``, the device of every expert tool;
4. the default: ``cuda`` when ``torch.cuda.is_available()``, else ``cpu``.

Steps 1-3 are plain string work done when the tool is built (a bad value is a
``ConfigError`` naming the setting); step 4 imports torch, so it only runs when
a model is first loaded. Half precision (float16) is used on CUDA for tools
whose ``half_precision`` flag is set, unless ``expert_half_precision=false``;
CPU always gets float32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ...config import get_typed
from ...errors import ConfigError

__all__ = ["DevicePlan", "Placed", "plan_device", "parse_load_spec", "normalize_device", "tool_key",
           "default_device", "pick_dtype"]

_DEVICE = re.compile(r"^(cpu|mps|cuda|xpu|npu|hpu)(:\d+)?$")


def tool_key(tool_name: str) -> str:
    """``image-captioning`` → ``image_captioning``: the prefix of a tool's settings."""
    return tool_name.strip().replace("-", "_").lower()


def _canonical_tool(name: str) -> str:
    """``ImageCaptioning``, ``image_captioning``, ``Image-Captioning`` → ``image-captioning``."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name.strip())
    return re.sub(r"[\s_]+", "-", name).lower()


def normalize_device(value: Any, key: str) -> str:
    """A device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``; ``0`` means ``cuda:0``) or ConfigError."""
    text = str(value).strip().lower()
    if text.isdigit():
        text = f"cuda:{text}"
    if not _DEVICE.match(text):
        raise ConfigError(
            f"setting '{key}' must be a device such as cpu, cuda, cuda:1 or mps, got {str(value)[:40]!r}",
            key=key,
        )
    return text


def parse_load_spec(spec: Any, key: str = "expert_load") -> dict[str, str]:
    """Parse ``"tool_device,tool_device"`` into ``{tool-name: device}``.

    Items are separated by commas, semicolons or whitespace; each item is a
    tool name, ``_``, and a device (``image-captioning_cuda:0``). The tool name
    is the part before the last ``_``. A malformed item raises ``ConfigError``
    naming ``key``.
    """
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = [f"{k}_{v}" for k, v in spec.items()]
    else:
        items = [part for part in re.split(r"[,;\s]+", str(spec)) if part]
    plan: dict[str, str] = {}
    for item in items:
        tool, sep, device = item.rpartition("_")
        if not sep or not tool.strip("_- ") or not device:
            raise ConfigError(
                f"setting '{key}' must list tool_device items like "
                f"\"image-captioning_cuda:0,object-detection_cpu\"; cannot read {item[:60]!r}",
                key=key,
            )
        try:
            plan[_canonical_tool(tool)] = normalize_device(device, key)
        except ConfigError:
            raise ConfigError(
                f"setting '{key}': {device[:40]!r} in {item[:60]!r} is not a device "
                f"(use cpu, cuda, cuda:N or mps)", key=key) from None
    return plan


@dataclass(frozen=True)
class DevicePlan:
    """A tool's configured placement. ``device`` is None when the default decides (at load time)."""

    device: str | None
    source: str  # the setting that chose it, for messages: "image_captioning_device", "expert_load", ...
    half_precision: bool = True

    def resolve(self) -> str:
        """The concrete device; imports torch only when no setting chose one."""
        return self.device or default_device()


class Placed:
    """The concrete device and dtype of something placed by a :class:`DevicePlan` (an expert tool, the
    embedder): the device is resolved once, on first use (resolving the default imports torch)."""

    device_plan: DevicePlan
    _device: str | None = None
    half_precision: ClassVar[bool] = True  # False where the model breaks in float16

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = self.device_plan.resolve()
        return self._device

    @property
    def dtype(self) -> str:
        return pick_dtype(self.device, self.device_plan.half_precision and self.half_precision)


def plan_device(tool_name: str, kwargs: Mapping[str, Any], *, half_precision: bool = True) -> DevicePlan:
    """Read a tool's placement from configuration kwargs (no torch import)."""
    prefix = tool_key(tool_name)
    own_key = f"{prefix}_device"
    half = bool(half_precision and get_typed(kwargs, "expert_half_precision", True))
    own = get_typed(kwargs, own_key, None)
    load = parse_load_spec(get_typed(kwargs, "expert_load", None))
    if own is not None:
        return DevicePlan(normalize_device(own, own_key), own_key, half)
    canonical = _canonical_tool(tool_name)
    if canonical in load:
        return DevicePlan(load[canonical], "expert_load", half)
    global_device = get_typed(kwargs, "expert_device", None)
    if global_device is not None:
        return DevicePlan(normalize_device(global_device, "expert_device"), "expert_device", half)
    return DevicePlan(None, "default", half)


def default_device() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu`` (imports torch)."""
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str, half_precision: bool) -> str:
    """``"float16"`` on CUDA when the tool allows half precision, else ``"float32"``."""
    return "float16" if half_precision and device.startswith("cuda") else "float32"
