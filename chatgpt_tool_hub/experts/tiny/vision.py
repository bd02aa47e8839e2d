"""Tiny vision models: captioning, VQA, detection, classification, segmentation, depth, open-vocabulary
detection, document QA."""

from __future__ import annotations

from pathlib import Path

from ._common import LABELS, VOCAB, byte_bpe, folder_of, labels

__all__ = ["build_blip", "build_blip_vqa", "build_detr", "build_vit", "build_yolos", "build_segformer", "build_depth_anything",
           "build_owlvit", "build_sam", "build_donut", "DOC_WORDS", "BUILDERS"]


def build_blip(folder: str | Path) -> str:
    """BLIP captioner: 1-layer vision and text towers, a hand-written WordPiece vocab, 32x32 images."""
    from transformers import BlipForConditionalGeneration

    return _build_blip(folder, BlipForConditionalGeneration)


def build_blip_vqa(folder: str | Path) -> str:
    """BLIP VQA (``BlipForQuestionAnswering``, like Salesforce/blip-vqa-base), same tiny towers as the captioner."""
    from transformers import BlipForQuestionAnswering

    return _build_blip(folder, BlipForQuestionAnswering)


def _build_blip(folder: str | Path, model_class) -> str:
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipImageProcessor, BlipProcessor

    folder = folder_of(folder)
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
    model_class(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder)


def build_detr(folder: str | Path) -> str:
    """DETR with a tiny transformers ResNet backbone (no timm, nothing pretrained), 5 queries."""
    import torch
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    folder = folder_of(folder)
    # out_features and the like go to the config's __post_init__(**kwargs), which its typed signature leaves out
    backbone = ResNetConfig(num_channels=3, embedding_size=8,  # type: ignore[call-arg]
                            hidden_sizes=[8, 8, 8, 8], depths=[1, 1, 1, 1], layer_type="basic", out_features=["stage4"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone,  # type: ignore[call-arg]
                        use_pretrained_backbone=False, d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
                        num_queries=5,
                        id2label=dict(enumerate(LABELS[:3])), label2id={n: i for i, n in enumerate(LABELS[:3])})
    torch.manual_seed(0)
    DetrForObjectDetection(config).save_pretrained(folder)
    DetrImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return str(folder)


def build_vit(folder: str | Path) -> str:
    """ViT classifier over 8 labels, 32x32 images, one layer."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    folder = folder_of(folder)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, id2label=dict(enumerate(LABELS)),
                       label2id={n: i for i, n in enumerate(LABELS)})
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return str(folder)


def build_yolos(folder: str | Path) -> str:
    """YOLOS detector (the object-detection default's architecture; no timm), 5 detection tokens."""
    import torch
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    folder = folder_of(folder)
    config = YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=16, num_detection_tokens=5, **labels(LABELS[:3]))
    torch.manual_seed(0)
    YolosForObjectDetection(config).save_pretrained(folder)
    YolosImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return str(folder)


def build_segformer(folder: str | Path) -> str:
    """SegFormer semantic segmentation over 8 labels, two 1-layer stages, 32x32 inputs."""
    import torch
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    folder = folder_of(folder)
    config = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=16, **labels(LABELS))
    torch.manual_seed(0)
    SegformerForSemanticSegmentation(config).save_pretrained(folder)
    SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return str(folder)


def build_depth_anything(folder: str | Path) -> str:
    """Depth Anything (the depth-estimation default's architecture) on a 2-layer DINOv2 backbone, 28x28 inputs."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config, DPTImageProcessor

    folder = folder_of(folder)
    # out_features and the like go to the config's __post_init__(**kwargs), which its typed signature leaves out
    backbone = Dinov2Config(image_size=28, patch_size=14, hidden_size=16,  # type: ignore[call-arg]
                            num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                            out_features=["stage1", "stage2"], reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=16, reassemble_factors=[4, 2],
                                 neck_hidden_sizes=[8, 16], fusion_hidden_size=8, head_hidden_size=8, patch_size=14)
    torch.manual_seed(0)
    DepthAnythingForDepthEstimation(config).save_pretrained(folder)
    DPTImageProcessor(size={"height": 28, "width": 28}, keep_aspect_ratio=True, ensure_multiple_of=14,
                      do_pad=False).save_pretrained(folder)
    return str(folder)


def build_owlvit(folder: str | Path) -> str:
    """OWL-ViT (``OwlViTForObjectDetection``, the zero-shot detector's architecture): 1-layer CLIP text and vision
    towers, a byte-level BPE that spells the tiny vocabulary, 32x32 images (16 boxes)."""
    import torch
    from transformers import (
        CLIPTokenizer,
        OwlViTConfig,
        OwlViTForObjectDetection,
        OwlViTImageProcessor,
        OwlViTProcessor,
    )

    folder = folder_of(folder)
    vocab = byte_bpe(folder, [w for w in VOCAB if w.isalpha()] + LABELS, ["<|startoftext|>", "<|endoftext|>"],
                     end_of_word=True)
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=16)
    start, end = vocab["<|startoftext|>"], vocab["<|endoftext|>"]
    config = OwlViTConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=16, bos_token_id=start, eos_token_id=end,
                         pad_token_id=end),
        vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16)
    torch.manual_seed(0)
    OwlViTForObjectDetection(config).save_pretrained(folder)
    processor = OwlViTProcessor(image_processor=OwlViTImageProcessor(size={"height": 32, "width": 32},
                                                                     crop_size={"height": 32, "width": 32}),
                                tokenizer=tokenizer)
    processor.save_pretrained(folder)
    return str(folder)


def build_sam(folder: str | Path) -> str:
    """SAM (``SamModel``, like facebook/sam-vit-base): a 2-layer ViT on 64x64 inputs, with a tiny OWL-ViT in
    ``detector/`` (segment-by-text's detector when none is set, so the one folder runs the tool)."""
    import torch
    from transformers import SamConfig, SamImageProcessor, SamModel, SamProcessor

    folder = folder_of(folder)
    config = SamConfig(
        vision_config=dict(hidden_size=16, output_channels=16, num_hidden_layers=2, num_attention_heads=2,
                           image_size=64, patch_size=8, window_size=4, global_attn_indexes=[1], num_pos_feats=8,
                           mlp_dim=16),
        prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=16, num_hidden_layers=2, num_attention_heads=2,
                                 iou_head_hidden_dim=16))
    torch.manual_seed(0)
    SamModel(config).save_pretrained(folder)
    SamProcessor(image_processor=SamImageProcessor(size={"longest_edge": 64},
                                                   pad_size={"height": 64, "width": 64})).save_pretrained(folder)
    build_owlvit(folder / "detector")
    return str(folder)


# the words of the tiny Donut's vocabulary (SentencePiece pieces: "▁" starts a word)
DOC_WORDS = ["what", "is", "the", "total", "date", "name", "invoice", "amount", "of", "42", "2024", "acme", "?"]


def build_donut(folder: str | Path) -> str:
    """Donut (a ``VisionEncoderDecoderModel``: Donut-Swin encoder, MBart decoder, like
    naver-clova-ix/donut-base-finetuned-docvqa) with a Unigram tokenizer over ``DOC_WORDS`` and the DocVQA
    task tokens, 32x32 pages."""
    import torch
    from transformers import (
        DonutImageProcessor,
        DonutProcessor,
        DonutSwinConfig,
        MBartConfig,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        XLMRobertaTokenizer,
    )

    folder = folder_of(folder)
    pieces = [(w, 0.0) for w in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    pieces += [(w if w == "?" else f"\u2581{w}", -1.0) for w in DOC_WORDS]
    tokenizer = XLMRobertaTokenizer(vocab=pieces)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<s_docvqa>", "<s_question>", "</s_question>",
                                                                "<s_answer>", "</s_answer>"]})
    encoder = DonutSwinConfig(image_size=[32, 32], patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
                              window_size=4)
    # add_cross_attention goes to the config's __post_init__(**kwargs), which its typed signature leaves out
    decoder = MBartConfig(vocab_size=len(tokenizer), d_model=16, decoder_layers=1,  # type: ignore[call-arg]
                          decoder_attention_heads=2, decoder_ffn_dim=16, encoder_layers=1, encoder_attention_heads=2,
                          encoder_ffn_dim=16, max_position_embeddings=128, is_decoder=True, add_cross_attention=True,
                          scale_embedding=True, pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.pad_token_id = tokenizer.pad_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.decoder_start_token_id = tokenizer.convert_tokens_to_ids("<s_docvqa>")
    torch.manual_seed(0)
    VisionEncoderDecoderModel(config=config).save_pretrained(folder)
    DonutProcessor(image_processor=DonutImageProcessor(size={"height": 32, "width": 32}),
                   tokenizer=tokenizer).save_pretrained(folder)
    return str(folder)


BUILDERS = {
    "image-captioning": build_blip,
    "visual-question-answering": build_blip_vqa,
    "object-detection": build_yolos,
    "image-classification": build_vit,
    "image-segmentation": build_segformer,
    "depth-estimation": build_depth_anything,
    "zero-shot-object-detection": build_owlvit,
    "segment-by-text": build_sam,
    "document-question-answering": build_donut,
}
