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

import json
import shutil
from pathlib import Path

__all__ = ["LABELS", "VOCAB", "TEXT_VOCAB", "CHARS", "BUILDERS", "build_blip", "build_blip_vqa", "build_detr",
           "build_yolos", "build_vit", "build_segformer", "build_depth_anything", "build_wav2vec2", "build_whisper",
           "build_vits", "build_distilbert", "build_stable_diffusion"]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "a", "photo", "of", "cat", "dog", "the",
         "on", "in", "red", "blue", "picture", "man", "woman", "car", "sitting", "grass"]
LABELS = ["cat", "dog", "car", "bird", "tree", "house", "boat", "person"]
TEXT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "i", "love", "hate", "it", "this", "movie", "good",
              "bad", "the", "is", "was", "not", "##s", "##ly"]
CHARS = list(" abcdefghijklmnopqrstuvwxyz'")  # the letters of the tiny speech models


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
    model_class(config).save_pretrained(folder)
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


def build_yolos(folder: str | Path) -> str:
    """YOLOS detector (the object-detection default's architecture; no timm), 5 detection tokens."""
    import torch
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    folder = _folder(folder)
    config = YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=16, num_detection_tokens=5, **_labels(LABELS[:3]))
    torch.manual_seed(0)
    YolosForObjectDetection(config).save_pretrained(folder)
    YolosImageProcessor(size={"shortest_edge": 32, "longest_edge": 64}).save_pretrained(folder)
    return str(folder)


def build_segformer(folder: str | Path) -> str:
    """SegFormer semantic segmentation over 8 labels, two 1-layer stages, 32x32 inputs."""
    import torch
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    folder = _folder(folder)
    config = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=16, **_labels(LABELS))
    torch.manual_seed(0)
    SegformerForSemanticSegmentation(config).save_pretrained(folder)
    SegformerImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return str(folder)


def build_depth_anything(folder: str | Path) -> str:
    """Depth Anything (the depth-estimation default's architecture) on a 2-layer DINOv2 backbone, 28x28 inputs."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config, DPTImageProcessor

    folder = _folder(folder)
    backbone = Dinov2Config(image_size=28, patch_size=14, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=16, out_features=["stage1", "stage2"], reshape_hidden_states=False)
    config = DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=16, reassemble_factors=[4, 2],
                                 neck_hidden_sizes=[8, 16], fusion_hidden_size=8, head_hidden_size=8, patch_size=14)
    torch.manual_seed(0)
    DepthAnythingForDepthEstimation(config).save_pretrained(folder)
    DPTImageProcessor(size={"height": 28, "width": 28}, keep_aspect_ratio=True, ensure_multiple_of=14,
                      do_pad=False).save_pretrained(folder)
    return str(folder)


def build_wav2vec2(folder: str | Path) -> str:
    """wav2vec2 CTC speech recogniser over a hand-written letter vocab, 16 kHz."""
    import torch
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC,
                              Wav2Vec2Processor)

    folder = _folder(folder)
    letters = ["<pad>", "<unk>", "|"] + CHARS[1:]
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(letters)}))
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), word_delimiter_token="|", bos_token=None,
                                     eos_token=None)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, do_normalize=True,
                                         return_attention_mask=False)
    config = Wav2Vec2Config(vocab_size=len(letters), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=16, conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4),
                            num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, pad_token_id=0)
    torch.manual_seed(0)
    Wav2Vec2ForCTC(config).save_pretrained(folder)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    return str(folder)


WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                    "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]


def build_whisper(folder: str | Path) -> str:
    """Whisper (the speech-recognition default's architecture): English-only, a byte-level BPE vocab of a few words,
    16 mel bins, one layer each side, 64 target positions."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer)

    folder = _folder(folder)
    vocab = _byte_bpe(folder, ["\u0120a", "\u0120cat", "\u0120dog", "\u0120the", "\u0120hello", "\u0120world"],
                      WHISPER_SPECIALS)
    eot, sot = vocab["<|endoftext|>"], vocab["<|startoftranscript|>"]
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token="<|endoftext|>",
                                 bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": WHISPER_SPECIALS[1:]})
    extractor = WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, chunk_length=30)
    ids = dict(decoder_start_token_id=sot, eos_token_id=eot, bos_token_id=eot, pad_token_id=eot)
    config = WhisperConfig(vocab_size=len(vocab), num_mel_bins=16, d_model=16, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                           decoder_ffn_dim=16, max_source_positions=1500, max_target_positions=64,
                           begin_suppress_tokens=None, **ids)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(**ids, max_length=64, is_multilingual=False,
                                               no_timestamps_token_id=vocab["<|notimestamps|>"])
    model.save_pretrained(folder)
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    return str(folder)


def build_vits(folder: str | Path) -> str:
    """VITS text-to-speech (like facebook/mms-tts-eng) over a letter vocab, 16 kHz, one layer everywhere."""
    import torch
    from transformers import VitsConfig, VitsModel, VitsTokenizer

    folder = _folder(folder)
    letters = ["<pad>"] + CHARS
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(letters)}))
    tokenizer = VitsTokenizer(str(folder / "vocab.json"), language=None, add_blank=True, normalize=True,
                              phonemize=False)
    config = VitsConfig(vocab_size=len(letters), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        ffn_dim=8, ffn_kernel_size=3, flow_size=8, spectrogram_bins=9, upsample_initial_channel=8,
                        upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3],
                        resblock_dilation_sizes=[[1, 3]], prior_encoder_num_flows=1,
                        prior_encoder_num_wavenet_layers=1, posterior_encoder_num_wavenet_layers=1,
                        duration_predictor_num_flows=1, duration_predictor_filter_channels=8,
                        depth_separable_num_layers=1, sampling_rate=16000)
    torch.manual_seed(0)
    VitsModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_distilbert(folder: str | Path) -> str:
    """DistilBERT sentiment classifier (NEGATIVE/POSITIVE, like the SST-2 default), a hand-written WordPiece vocab."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizer

    folder = _folder(folder)
    (folder / "vocab.txt").write_text("\n".join(TEXT_VOCAB) + "\n")
    tokenizer = DistilBertTokenizer(str(folder / "vocab.txt"), do_lower_case=True, model_max_length=64)
    config = DistilBertConfig(vocab_size=len(TEXT_VOCAB), dim=16, n_layers=1, n_heads=2, hidden_dim=16,
                              max_position_embeddings=64, **_labels(["NEGATIVE", "POSITIVE"]))
    torch.manual_seed(0)
    DistilBertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def build_stable_diffusion(folder: str | Path) -> str:
    """A Stable Diffusion pipeline folder (UNet, VAE, CLIP text encoder + BPE tokenizer, Euler scheduler) that
    makes 32x32 images; needs diffusers."""
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = _folder(folder)
    words = _folder(folder / "tokenizer-source")
    vocab = _byte_bpe(words, [], ["<|startoftext|>", "<|endoftext|>"], end_of_word=True)
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


def _labels(names: list[str]) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


def _byte_bpe(folder: Path, words: list[str], specials: list[str], end_of_word: bool = False) -> dict[str, int]:
    """Write ``vocab.json`` + ``merges.txt`` of a byte-level BPE (GPT-2/Whisper/CLIP style): the 256 byte symbols
    (and their ``</w>`` forms for CLIP), merges that spell ``words``, then ``specials``; returns the vocab."""
    symbols = _byte_symbols()
    vocab = {c: i for i, c in enumerate(symbols)}
    if end_of_word:
        vocab.update((c + "</w>", len(symbols) + i) for i, c in enumerate(symbols))
    merges: list[str] = []
    for word in words:
        current = word[0]
        for char in word[1:]:
            merges.append(f"{current} {char}")
            current += char
            vocab.setdefault(current, len(vocab))
    for token in specials:
        vocab.setdefault(token, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in dict.fromkeys(merges)))
    return vocab


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values (``bytes_to_unicode``), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), ord("\xff") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def _folder(folder: str | Path) -> Path:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


# tool name -> builder of a tiny model for it
BUILDERS = {
    "image-captioning": build_blip,
    "visual-question-answering": build_blip_vqa,
    "object-detection": build_yolos,
    "image-classification": build_vit,
    "image-segmentation": build_segformer,
    "depth-estimation": build_depth_anything,
    "speech-recognition": build_whisper,
    "text-to-speech": build_vits,
    "text-classification": build_distilbert,
    "text-to-image": build_stable_diffusion,
}
