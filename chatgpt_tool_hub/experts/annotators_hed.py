"""The HED soft-edge network of ControlNet 1.1 (``ControlNetHED.pth`` in ``lllyasviel/Annotators``), in torch.

This module imports torch at the top: it is imported only when ``image-to-hed`` or
``image-to-scribble`` loads its weights, never when the tools are built.

The network is five VGG-style blocks (3x3 convolutions with ReLU, a 2x2 max-pool in
front of blocks 2-5), each with a 1x1 projection to one channel; the soft-edge map is
the sigmoid of the mean of the five projections, upsampled to the image. The input is
RGB in 0-255 minus a learned mean (``norm``). Parameter names follow the published
checkpoint, so ``torch.load`` + ``load_state_dict`` reads it as is. The block widths and
depths are read from the checkpoint's tensor shapes, so a small random checkpoint of the
same layout (``experts.tiny.annotators.build_hed``) loads through the same code.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

__all__ = ["ControlNetHED", "HedModel", "layout_of", "load_hed", "WEIGHTS_NAME", "WIDTHS", "DEPTHS"]

WEIGHTS_NAME = "ControlNetHED.pth"
WIDTHS = (64, 128, 256, 512, 512)  # the published network
DEPTHS = (2, 2, 3, 3, 3)


class _Block(torch.nn.Module):
    def __init__(self, channels_in: int, channels_out: int, layers: int):
        super().__init__()
        self.convs = torch.nn.Sequential(*[torch.nn.Conv2d(channels_in if i == 0 else channels_out, channels_out,
                                                           kernel_size=3, padding=1) for i in range(layers)])
        self.projection = torch.nn.Conv2d(channels_out, 1, kernel_size=1)

    def forward(self, x: torch.Tensor, down_sampling: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if down_sampling:
            x = torch.nn.functional.max_pool2d(x, kernel_size=2, stride=2)
        for conv in self.convs:
            x = torch.nn.functional.relu(conv(x))
        return x, self.projection(x)


class ControlNetHED(torch.nn.Module):
    """Five blocks of ``depths[i]`` convolutions of ``widths[i]`` channels; returns the five projections."""

    def __init__(self, widths: tuple[int, ...] = WIDTHS, depths: tuple[int, ...] = DEPTHS):
        super().__init__()
        if len(widths) != 5 or len(depths) != 5:
            raise ValueError("the HED network has five blocks")
        self.norm = torch.nn.Parameter(torch.zeros(1, 3, 1, 1))
        channels = 3
        for i, (width, depth) in enumerate(zip(widths, depths, strict=False), start=1):
            setattr(self, f"block{i}", _Block(channels, width, depth))
            channels = width

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = x - self.norm
        projections = []
        for i in range(1, 6):
            h, projection = getattr(self, f"block{i}")(h, down_sampling=i > 1)
            projections.append(projection)
        return projections


def layout_of(state: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(widths, depths)`` of a HED checkpoint from its tensor names and shapes; ValueError when it is not one."""
    widths, depths = [], []
    for i in range(1, 6):
        convs = sorted({int(m.group(1)) for k in state
                        if (m := re.fullmatch(rf"block{i}\.convs\.(\d+)\.weight", k))})
        if not convs or convs != list(range(len(convs))) or f"block{i}.projection.weight" not in state:
            raise ValueError(f"not a ControlNet HED checkpoint (no block{i} convolutions in it)")
        widths.append(int(state[f"block{i}.convs.0.weight"].shape[0]))
        depths.append(len(convs))
    if "norm" not in state:
        raise ValueError("not a ControlNet HED checkpoint (no 'norm' tensor in it)")
    return tuple(widths), tuple(depths)


def load_hed(path: str | os.PathLike, device: str, dtype: torch.dtype) -> "HedModel":
    """The network with the weights of the checkpoint at ``path`` (a ``.pth`` state dict), on ``device``."""
    state = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ValueError(f"{os.path.basename(os.fspath(path))} holds no state dict of tensors")
    widths, depths = layout_of(state)
    net = ControlNetHED(widths, depths)
    net.load_state_dict(state)
    return HedModel(net.to(device=device, dtype=dtype).eval(), device)


def _detect_size(width: int, height: int, resolution: int) -> tuple[int, int]:
    """controlnet_aux's ``resize_image``: the short side to ``resolution``, both sides rounded to 64."""
    k = resolution / min(width, height)
    return max(64, int(round(width * k / 64)) * 64), max(64, int(round(height * k / 64)) * 64)


class HedModel:
    """The loaded network, callable: ``(PIL image, resolution) -> HxW uint8 soft edges`` at the image's size."""

    def __init__(self, model: torch.nn.Module, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.device = device

    def __call__(self, image: Any, resolution: int = 512) -> Any:
        import numpy as np
        from PIL import Image

        width, height = image.size
        size = _detect_size(width, height, max(64, int(resolution)))
        scaled = image.convert("RGB")
        if size != (width, height):
            grow = size[0] > width
            scaled = scaled.resize(size, Image.Resampling.LANCZOS if grow else Image.Resampling.BOX)
        dtype = next(self.model.parameters()).dtype
        pixels = torch.from_numpy(np.asarray(scaled, dtype=np.float32).copy()).permute(2, 0, 1)[None]
        with torch.inference_mode():
            projections = self.model(pixels.to(device=self.device, dtype=dtype))
            edges = [torch.nn.functional.interpolate(p.float(), size=(height, width), mode="bilinear",
                                                     align_corners=False)[0, 0] for p in projections]
            edge = torch.sigmoid(torch.stack(edges).mean(dim=0))
        return (edge * 255.0).clamp(0, 255).to(torch.uint8).cpu().numpy()
