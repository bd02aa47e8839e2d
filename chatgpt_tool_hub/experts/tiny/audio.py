"""Tiny audio models: speech recognition (wav2vec2, Whisper), text-to-speech (VITS), audio classification (AST)
and voice conversion (SpeechT5 with a HiFi-GAN vocoder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._common import CHARS, byte_bpe, folder_of, labels

__all__ = ["build_wav2vec2", "build_whisper", "build_vits", "build_ast", "build_speecht5_vc", "SOUND_LABELS",
           "BUILDERS"]

SOUND_LABELS = ["Speech", "Music", "Dog", "Car", "Rain", "Silence"]


def build_wav2vec2(folder: str | Path) -> str:
    """wav2vec2 CTC speech recogniser over a hand-written letter vocab, 16 kHz."""
    import torch
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    folder = folder_of(folder)
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
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )

    folder = folder_of(folder)
    vocab = byte_bpe(folder, ["\u0120a", "\u0120cat", "\u0120dog", "\u0120the", "\u0120hello", "\u0120world"],
                      WHISPER_SPECIALS)
    eot, sot = vocab["<|endoftext|>"], vocab["<|startoftranscript|>"]
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token="<|endoftext|>",
                                 bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": WHISPER_SPECIALS[1:]})
    extractor = WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, chunk_length=30)
    ids: dict[str, Any] = dict(decoder_start_token_id=sot, eos_token_id=eot, bos_token_id=eot, pad_token_id=eot)
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

    folder = folder_of(folder)
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


def build_ast(folder: str | Path) -> str:
    """Audio Spectrogram Transformer (the audio-classification default's architecture, like
    MIT/ast-finetuned-audioset-10-10-0.4593) over six sound labels: 16 mel bins, 1 s windows (100 frames),
    one layer; the feature extractor needs no torchaudio."""
    import torch
    from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification

    folder = folder_of(folder)
    config = ASTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                       patch_size=8, frequency_stride=8, time_stride=8, max_length=100, num_mel_bins=16,
                       **labels(SOUND_LABELS))
    torch.manual_seed(0)
    ASTForAudioClassification(config).save_pretrained(folder)
    ASTFeatureExtractor(num_mel_bins=16, max_length=100, sampling_rate=16000).save_pretrained(folder)
    return str(folder)


def build_speecht5_vc(folder: str | Path) -> str:
    """SpeechT5 voice conversion (like microsoft/speecht5_vc): a speech encoder and a mel decoder of one layer
    each, 16 mel bins, its feature extractor, a tiny HiFi-GAN in ``vocoder/`` and a 16-value speaker embedding in
    ``speaker_embedding.npy`` (both where the audio-to-audio tool looks for them in a model folder)."""
    import numpy as np
    import torch
    from transformers import (
        SpeechT5Config,
        SpeechT5FeatureExtractor,
        SpeechT5ForSpeechToSpeech,
        SpeechT5HifiGan,
        SpeechT5HifiGanConfig,
    )

    folder = folder_of(folder)
    config = SpeechT5Config(hidden_size=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                            decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, conv_dim=(8, 8, 8),
                            conv_stride=(10, 8, 4), conv_kernel=(10, 8, 4), num_conv_pos_embeddings=4,
                            num_conv_pos_embedding_groups=2, num_mel_bins=16, speech_decoder_prenet_units=16,
                            speech_decoder_postnet_units=16, speech_decoder_postnet_layers=2,
                            speaker_embedding_dim=16, max_speech_positions=600, encoder_max_relative_position=16,
                            vocab_size=8, reduction_factor=2)
    torch.manual_seed(0)
    model = SpeechT5ForSpeechToSpeech(config)
    with torch.no_grad():  # the stop probability never fires: the output length is set by maxlenratio
        model.speech_decoder_postnet.prob_out.bias.fill_(-20.0)
    model.save_pretrained(folder)
    SpeechT5FeatureExtractor(num_mel_bins=16, sampling_rate=16000).save_pretrained(folder)
    vocoder = SpeechT5HifiGan(SpeechT5HifiGanConfig(model_in_dim=16, upsample_initial_channel=8,
                                                    upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8],
                                                    resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]],
                                                    sampling_rate=16000))
    vocoder.save_pretrained(folder / "vocoder")
    np.save(folder / "speaker_embedding.npy", np.random.default_rng(0).normal(size=16).astype(np.float32))
    return str(folder)


BUILDERS = {
    "speech-recognition": build_whisper,
    "text-to-speech": build_vits,
    "audio-classification": build_ast,
    "audio-to-audio": build_speecht5_vc,
}
