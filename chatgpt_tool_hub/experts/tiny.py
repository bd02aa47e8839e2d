"""Tiny randomly initialised models for testing and benchmarking expert tools (no network).

Each ``build_*`` makes a model of a few kilobytes, saves it with
``save_pretrained`` into ``folder`` and returns the folder, which an expert
tool then loads through its normal settings (``image_captioning_model=folder``).
Building one takes milliseconds once transformers is imported. Use them to
test your own expert tools::

    from chatgpt_tool_hub.experts.tiny import build_vit
    tool = ImageClassificationTool.from_config(image_classification_model=build_vit(tmp / "vit"))

Add a builder here for every new expert tool (and a fixture in
``tests/experts/conftest.py``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LABELS", "VOCAB", "BUILDERS", "build_blip", "build_detr", "build_vit"]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "a", "photo", "of", "cat", "dog", "the",
         "on", "in", "red", "blue", "picture", "man", "woman", "car", "sitting", "grass"]
LABELS = ["cat", "dog", "car", "bird", "tree", "house", "boat", "person"]


def build_blip(folder: str | Path) -> str:
    """BLIP captioner: 1-layer vision and text towers, a hand-written WordPiece vocab, 32x32 images."""
    import torch
    from transformers import (BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor,
                              BlipProcessor)

    folder = _folder(folder)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizer(str(vocab), do_lower_case=True)
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    processor = BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                              tokenizer=tokenizer)
    config = BlipConfig(
        text_config=dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=37, max_position_embeddings=64, bos_token_id=5, pad_token_id=0,
                         sep_token_id=3, eos_token_id=3),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                           image_size=32, patch_size=8),
        projection_dim=32, image_text_hidden_size=32)
    torch.manual_seed(0)
    BlipForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder)


def build_detr(folder: str | Path) -> str:
    """DETR with a tiny transformers ResNet backbone (no timm, nothing pretrained), 5 queries."""
    import torch
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    folder = _folder(folder)
    backbone = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 8, 8, 8], depths=[1, 1, 1, 1],
                            layer_type="basic", out_features=["stage4"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                        d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, num_queries=5,
                        id2label=dict(enumerate(LABELS[:3])), label2id={n: i for i, n in enumerate(LABELS[:3])})
    torch.manual_seed(0)
    DetrForObjectDetection(config).save_pretrained(folder)
    DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return str(folder)


def build_vit(folder: str | Path) -> str:
    """ViT classifier over 8 labels, 32x32 images, one layer."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    folder = _folder(folder)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, id2label=dict(enumerate(LABELS)),
                       label2id={n: i for i, n in enumerate(LABELS)})
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return str(folder)


def _folder(folder: str | Path) -> Path:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


# tool name -> builder of a tiny model for it
BUILDERS = {
    "image-captioning": build_blip,
    "object-detection": build_detr,
    "image-classification": build_vit,
}
