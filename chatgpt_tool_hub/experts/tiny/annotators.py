"""Tiny models of the annotator tools: HED (edges, scribbles), VitPose (pose), Depth Anything (normals).

``image-to-canny`` and ``image-to-line`` run no model: their builder only makes the
folder (the tools do not read ``<tool>_model``).
"""

from __future__ import annotations

from pathlib import Path

from ._common import folder_of
from .vision import build_depth_anything

__all__ = ["build_hed", "build_vitpose", "build_no_model", "BUILDERS"]


def build_no_model(folder: str | Path) -> str:
    """An empty folder: the tool runs no model (Canny edges, Hough lines)."""
    return str(folder_of(folder))


def build_hed(folder: str | Path) -> str:
    """``ControlNetHED.pth`` of the published layout (five blocks of 2, 2, 3, 3, 3 convolutions) with 4-8 channels
    instead of 64-512: the tools read the widths from the checkpoint, so it loads like the real one."""
    import torch

    from ..annotators_hed import DEPTHS, WEIGHTS_NAME, ControlNetHED

    folder = folder_of(folder)
    torch.manual_seed(0)
    net = ControlNetHED(widths=(4, 4, 8, 8, 8), depths=DEPTHS)
    with torch.no_grad():
        net.norm.copy_(torch.tensor([122.0, 116.0, 104.0]).view(1, 3, 1, 1))  # an RGB mean, as trained ones have
    torch.save(net.state_dict(), folder / WEIGHTS_NAME)
    return str(folder)


def build_vitpose(folder: str | Path) -> str:
    """VitPose (``VitPoseForPoseEstimation``, 17 COCO keypoints): a 1-layer ViT backbone on 64x48 crops."""
    import torch
    from transformers import VitPoseBackboneConfig, VitPoseConfig, VitPoseForPoseEstimation, VitPoseImageProcessor

    folder = folder_of(folder)
    # out_indices, num_labels and the like go to the config's __post_init__(**kwargs), which its typed signature
    # leaves out
    backbone = VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16],  # type: ignore[call-arg]
                                     hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, out_indices=[1])
    config = VitPoseConfig(backbone_config=backbone, num_labels=17)  # type: ignore[call-arg]
    torch.manual_seed(0)
    VitPoseForPoseEstimation(config).save_pretrained(folder)
    VitPoseImageProcessor(size={"height": 64, "width": 48}).save_pretrained(folder)
    return str(folder)


BUILDERS = {
    "image-to-canny": build_no_model,
    "image-to-line": build_no_model,
    "image-to-hed": build_hed,
    "image-to-scribble": build_hed,
    "image-to-pose": build_vitpose,
    "image-to-normal": build_depth_anything,
}
