"""Tiny models of the media expert tools: video classification."""

from __future__ import annotations

from pathlib import Path

from ._common import folder_of, labels

__all__ = ["build_videomae", "ACTIONS", "BUILDERS"]

ACTIONS = ["dancing", "cooking", "running", "swimming"]


def build_videomae(folder: str | Path) -> str:
    """VideoMAE video classifier (like MCG-NJU/videomae-base-finetuned-kinetics) over four actions: 4 frames of
    32x32 in tubelets of 2, one layer."""
    import torch
    from transformers import VideoMAEConfig, VideoMAEForVideoClassification, VideoMAEImageProcessor

    folder = folder_of(folder)
    config = VideoMAEConfig(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=16,
                            num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, **labels(ACTIONS))
    torch.manual_seed(0)
    VideoMAEForVideoClassification(config).save_pretrained(folder)
    VideoMAEImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return str(folder)


BUILDERS = {
    "video-classification": build_videomae,
}
