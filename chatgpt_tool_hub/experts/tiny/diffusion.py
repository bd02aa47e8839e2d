"""Tiny diffusers pipelines: the Stable Diffusion base, InstructPix2Pix, inpainting, ControlNets, CLIPSeg and
text-to-video.

Every UNet here has the same tiny architecture (cross-attention width 16, two blocks), so a ControlNet built
here attaches to the base built here, and a pix2pix or inpainting UNet can run on the base's VAE and text
encoder. The VAE has two blocks: it scales by 2 (real SD VAEs scale by 8), so 32x32 images have 16x16 latents.
``build_diffusion_suite(folder)`` builds one of each and returns the settings that point every diffusion tool
at them, sharing one base.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ._common import byte_bpe, folder_of

__all__ = ["build_stable_diffusion", "build_controlnet", "build_pix2pix", "build_inpaint", "build_clipseg",
           "build_text_to_video", "build_diffusion_suite", "CONTROLNET_TOOLS", "BUILDERS"]

# the ControlNet tools: each runs its own ControlNet checkpoint on the shared base
CONTROLNET_TOOLS = ("canny-to-image", "depth-to-image", "hed-to-image", "line-to-image", "normal-to-image",
                    "scribble-to-image", "pose-to-image", "segmentation-to-image")


def _tokenizer(folder: Path) -> Any:
    """A CLIP BPE tokenizer over the 256 bytes (every text encodes; nothing is out of vocabulary)."""
    from transformers import CLIPTokenizer

    words = folder_of(folder / "tokenizer-source")
    byte_bpe(words, [], ["<|startoftext|>", "<|endoftext|>"], end_of_word=True)
    tokenizer = CLIPTokenizer(str(words / "vocab.json"), str(words / "merges.txt"), model_max_length=77)
    shutil.rmtree(words)
    return tokenizer


def _text_encoder(tokenizer: Any) -> Any:
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    return CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=77, projection_dim=16, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id))


def _unet(in_channels: int = 4) -> Any:
    """The tiny UNet; 8 input channels for InstructPix2Pix (noise + image latents), 9 for inpainting."""
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=16, in_channels=in_channels, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=2, norm_num_groups=4)


def _vae() -> Any:
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    return AutoencoderKL(down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                         block_out_channels=(8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4,
                         sample_size=32)


def _scheduler() -> Any:
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  timestep_spacing="trailing", steps_offset=1)


def _parts(folder: Path, in_channels: int = 4) -> dict[str, Any]:
    tokenizer = _tokenizer(folder)
    return {"vae": _vae(), "text_encoder": _text_encoder(tokenizer), "tokenizer": tokenizer,
            "unet": _unet(in_channels), "scheduler": _scheduler()}


_NO_SAFETY = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}


def _save_pipeline(pipeline: Any, folder: Path) -> None:
    """Write a pipeline's folder (``pipeline`` is Any: diffusers' pipeline classes do not show the type checker
    their ``save_pretrained``)."""
    pipeline.save_pretrained(folder)


def build_stable_diffusion(folder: str | Path) -> str:
    """A Stable Diffusion pipeline folder (UNet, VAE, CLIP text encoder + BPE tokenizer, Euler scheduler) that
    makes 32x32 images: text-to-image's and image-to-image's model, and the diffusion tools' shared base
    (``diffusion_base_model``); needs diffusers."""
    from diffusers import StableDiffusionPipeline

    folder = folder_of(folder)
    _save_pipeline(StableDiffusionPipeline(**_parts(folder), **_NO_SAFETY), folder)
    return str(folder)


def build_controlnet(folder: str | Path) -> str:
    """A ControlNet checkpoint (``ControlNetModel`` folder) that attaches to :func:`build_stable_diffusion`'s
    base: every ``*-to-image`` ControlNet tool's model (``canny_to_image_model`` ...). The tool also needs the
    base: set ``diffusion_base_model`` to a :func:`build_stable_diffusion` folder."""
    import torch
    from diffusers import ControlNetModel

    folder = folder_of(folder)
    unet = _unet(4)
    torch.manual_seed(1)
    # the condition embedding downsamples by the VAE's factor (2 here): two stages
    ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(4, 8)).save_pretrained(folder)
    return str(folder)


def build_pix2pix(folder: str | Path) -> str:
    """An InstructPix2Pix pipeline folder (a UNet with 8 input channels, Euler-ancestral scheduler):
    edit-image's model (``edit_image_model``)."""
    from diffusers import (
        EulerAncestralDiscreteScheduler,
        StableDiffusionInstructPix2PixPipeline,
    )

    folder = folder_of(folder)
    parts = _parts(folder, in_channels=8)
    parts["scheduler"] = EulerAncestralDiscreteScheduler.from_config(parts["scheduler"].config)
    _save_pipeline(StableDiffusionInstructPix2PixPipeline(**parts, **_NO_SAFETY), folder)
    return str(folder)


def build_inpaint(folder: str | Path) -> str:
    """A Stable Diffusion inpainting pipeline folder (a UNet with 9 input channels: noise, mask and masked-image
    latents): remove-object's and replace-object's model (``remove_object_model``, ``replace_object_model``)."""
    from diffusers import StableDiffusionInpaintPipeline

    folder = folder_of(folder)
    _save_pipeline(StableDiffusionInpaintPipeline(**_parts(folder, in_channels=9), **_NO_SAFETY), folder)
    return str(folder)


def build_clipseg(folder: str | Path) -> str:
    """A CLIPSeg model and processor folder (transformers) that masks 32x32 images by a text: the mask model
    of remove-object and replace-object (``remove_object_mask_model``, ``replace_object_mask_model``)."""
    import torch
    from transformers import (
        CLIPSegConfig,
        CLIPSegForImageSegmentation,
        CLIPSegProcessor,
        ViTImageProcessor,
    )

    folder = folder_of(folder)
    tokenizer = _tokenizer(folder)
    config = CLIPSegConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 16, "intermediate_size": 16,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 77,
                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                     "pad_token_id": tokenizer.eos_token_id},
        vision_config={"image_size": 32, "patch_size": 8, "hidden_size": 16, "intermediate_size": 16,
                       "num_hidden_layers": 2, "num_attention_heads": 2},
        projection_dim=16, extract_layers=[0, 1], reduce_dim=16, decoder_num_attention_heads=2,
        decoder_intermediate_size=16)
    torch.manual_seed(0)
    CLIPSegForImageSegmentation(config).save_pretrained(folder)
    CLIPSegProcessor(image_processor=ViTImageProcessor(size={"height": 32, "width": 32}),
                     tokenizer=tokenizer).save_pretrained(folder)
    return str(folder)


def build_text_to_video(folder: str | Path) -> str:
    """A text-to-video pipeline folder (``TextToVideoSDPipeline``: a UNet3D with its own VAE and text encoder)
    that makes 32x32 frames: text-to-video's model (``text_to_video_model``)."""
    import torch
    from diffusers import TextToVideoSDPipeline, UNet3DConditionModel

    folder = folder_of(folder)
    parts = _parts(folder)
    torch.manual_seed(0)
    parts["unet"] = UNet3DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                         block_out_channels=(8, 16),
                                         down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                                         up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
                                         cross_attention_dim=16, attention_head_dim=2, norm_num_groups=4)
    _save_pipeline(TextToVideoSDPipeline(**parts), folder)
    return str(folder)


def build_diffusion_suite(folder: str | Path, tools: Any = None) -> dict[str, str]:
    """Build one tiny model per diffusion tool under ``folder`` and return the settings that use them.

    The settings point every tool at one shared base (``diffusion_base_model``);
    text-to-image and image-to-image run on it directly, the ControlNet tools attach
    their own ControlNet to it. ``tools`` limits what is built (default: all).
    """
    root = folder_of(folder)
    wanted = set(tools) if tools is not None else None
    need = (lambda name: wanted is None or name in wanted)
    settings = {"diffusion_base_model": build_stable_diffusion(root / "base")}
    if need("edit-image"):
        settings["edit_image_model"] = build_pix2pix(root / "pix2pix")
    if need("remove-object") or need("replace-object"):
        inpaint, clipseg = build_inpaint(root / "inpaint"), build_clipseg(root / "clipseg")
        for name in ("remove_object", "replace_object"):
            settings[f"{name}_model"], settings[f"{name}_mask_model"] = inpaint, clipseg
    for name in CONTROLNET_TOOLS:
        if need(name):
            settings[f"{name.replace('-', '_')}_model"] = build_controlnet(root / name)
    if need("text-to-video"):
        settings["text_to_video_model"] = build_text_to_video(root / "text-to-video")
    return settings


def build_controlnet_bundle(folder: str | Path) -> str:
    """A ControlNet folder with a tiny base of its own in ``base/``: a ControlNet tool loads it through
    ``<tool>_model`` alone (a ControlNet folder with a ``base/`` pipeline uses it when ``diffusion_base_model``
    is not set)."""
    root = folder_of(build_controlnet(folder))
    build_stable_diffusion(root / "base")
    return str(root)


def build_inpaint_bundle(folder: str | Path) -> str:
    """An inpainting folder with its CLIPSeg mask model in ``mask/``: remove-object and replace-object load
    it through ``<tool>_model`` alone (a ``mask/`` model is used when ``<tool>_mask_model`` is not set)."""
    root = folder_of(build_inpaint(folder))
    build_clipseg(root / "mask")
    return str(root)


# tool name -> builder of a folder the tool loads through ``<tool>_model`` alone (the ControlNet tools' folders
# carry their own tiny base, remove/replace-object's their mask model; build_diffusion_suite shares one base)
BUILDERS = {
    "text-to-image": build_stable_diffusion,
    "image-to-image": build_stable_diffusion,
    "edit-image": build_pix2pix,
    "remove-object": build_inpaint_bundle,
    "replace-object": build_inpaint_bundle,
    **{name: build_controlnet_bundle for name in CONTROLNET_TOOLS},
    "text-to-video": build_text_to_video,
}
