"""Tiny diffusers pipelines: Stable Diffusion."""

from __future__ import annotations

import shutil
from pathlib import Path

from ._common import byte_bpe, folder_of

__all__ = ["build_stable_diffusion", "BUILDERS"]


def build_stable_diffusion(folder: str | Path) -> str:
    """A Stable Diffusion pipeline folder (UNet, VAE, CLIP text encoder + BPE tokenizer, Euler scheduler) that
    makes 32x32 images; needs diffusers."""
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = folder_of(folder)
    words = folder_of(folder / "tokenizer-source")
    vocab = byte_bpe(words, [], ["<|startoftext|>", "<|endoftext|>"], end_of_word=True)
    tokenizer = CLIPTokenizer(str(words / "vocab.json"), str(words / "merges.txt"), model_max_length=77)
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=77, projection_dim=16, bos_token_id=vocab["<|startoftext|>"],
        eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"]))
    unet = UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=2, norm_num_groups=4)
    vae = AutoencoderKL(down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        block_out_channels=(8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4,
                        sample_size=32)
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       timestep_spacing="trailing", steps_offset=1)
    StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                            safety_checker=None, feature_extractor=None,
                            requires_safety_checker=False).save_pretrained(folder)
    shutil.rmtree(words)
    return str(folder)


BUILDERS = {
    "text-to-image": build_stable_diffusion,
}
