"""Audio expert tools on WAV files: audio classification (what sound is this) and audio-to-audio (voice conversion).

* ``audio-classification`` runs the transformers pipeline (AST trained on
  AudioSet by default: speech, music, dog bark, siren ... 527 labels). Audio
  longer than the model hears at once (AST: its ``max_length`` frames, 10.24 s;
  else 10 s; or ``audio_classification_window_s``) is classified in windows (at
  most ``audio_classification_max_windows``) whose scores are averaged.
* ``audio-to-audio``: transformers has no audio-to-audio pipeline; the tool
  runs SpeechT5 voice conversion (``microsoft/speecht5_vc``): the speech of
  the input is spoken again in the voice of a speaker embedding (a 512-value
  x-vector, ``audio_to_audio_speaker_embedding``: a ``.npy``, ``.json`` or
  ``.pt`` file; ``speaker_embedding.npy`` in the model folder; else a neutral
  all-zero one, which the observation mentions). The mel spectrogram is turned
  into a waveform by the HiFi-GAN vocoder (``vocoder/`` in the model folder,
  else ``audio_to_audio_vocoder``, ``microsoft/speecht5_hifigan``). Long audio
  is converted in pieces of ``audio_to_audio_chunk_s`` seconds. The output is
  a WAV file named after its input (``audio/{new}_vc_{prev}_{org}.wav``).
"""

from __future__ import annotations

import base64
import json
import os
import wave
from typing import Any

from ..errors import ToolExecutionError
from ..runtime import filenames as files
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .audio import AUDIO_PARAMETERS, read_audio, resample, wav_seconds
from .base import ExpertTool
from .remote import RemoteBlob
from .vision import _records, _scored

__all__ = ["AudioClassificationTool", "AudioToAudioTool", "VoiceConverter", "load_speaker_embedding"]


class AudioClassificationTool(ExpertTool):
    name = "audio-classification"
    task = "audio-classification"
    default_model = "MIT/ast-finetuned-audioset-10-10-0.4593"
    description = (
        "audio-classification: tells what can be heard in an audio file - speech, music, an instrument, animals, "
        "vehicles, alarms, noise (the 527 AudioSet sound classes) - with scores. Use it to find out what kind of "
        "sound a recording holds; use speech-recognition for the words spoken. "
        'Input: {"audio": "<path of a WAV file from an earlier observation>"}. '
        "Output: the top labels with scores, best first. "
        'Example: {"audio": "audio/1a2b3c4d.wav"} -> "Top sounds in audio/1a2b3c4d.wav (4.0 s):\\n- Dog: 0.912\\n'
        '- Animal: 0.850".'
    )
    parameters = AUDIO_PARAMETERS
    options = {"top_k": 5, "window_s": 0.0, "max_windows": 6}

    def call_local(self, model: Any, *, audio: str) -> Any:
        samples, rate = read_audio(audio)
        target = int(getattr(getattr(model, "feature_extractor", None), "sampling_rate", 0) or 16000)
        samples = resample(samples, rate, target)
        window_s = float(self.options["window_s"]) or _window_seconds(model)
        window = max(1, int(window_s * target))
        most = max(1, int(self.options["max_windows"]))
        pieces = [samples[i:i + window] for i in range(0, len(samples), window)] or [samples]
        if len(pieces) > 1 and len(pieces[-1]) < window // 4:  # a short tail joins the window before it
            pieces[-2:] = [samples[(len(pieces) - 2) * window:]]
        used = pieces[:most]
        labels = len(getattr(model.model.config, "id2label", {}) or {}) or 1000
        outputs = model([{"raw": p, "sampling_rate": target} for p in used], top_k=labels)
        if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
            outputs = [outputs]
        totals: dict[str, float] = {}
        for output in outputs:
            for label, score, _ in _scored(_records(output)):
                totals[label] = totals.get(label, 0.0) + score / len(used)
        note = ""
        if len(pieces) > 1:
            seconds = len(samples) / target
            note = (f"Note: the {seconds:.1f} s of audio were classified in {len(used)} windows of "
                    f"{window_s:g} s and their scores averaged")
            if len(pieces) > most:
                note += (f"; only the first {sum(len(p) for p in used) / target:.1f} s were heard "
                         f"({tool_key(self.name)}_max_windows)")
            note += "."
        return {"labels": [{"label": k, "score": v} for k, v in totals.items()], "note": note}

    def render(self, result: Any, *, audio: str) -> str:
        note = ""
        if isinstance(result, dict) and "labels" in result:
            note, result = str(result.get("note") or ""), result["labels"]
        labels = _scored(_records(result))[: max(1, int(self.options["top_k"]))]
        seconds = wav_seconds(audio)
        length = f" ({seconds:.1f} s)" if seconds is not None else ""
        if not labels:
            return f"The classifier returned no labels for {self.rel(audio)}{length}."
        lines = [f"Top sounds in {self.rel(audio)}{length}:",
                 *(f"- {label}: {score:.3f}" for label, score, _ in labels)]
        if note:
            lines.append(note)
        return ToolResult("\n".join(lines), value=labels[0][0])


def _window_seconds(pipe: Any) -> float:
    """How much audio the model hears at once: AST's ``max_length`` spectrogram frames of 10 ms (10.24 s for the
    AudioSet checkpoints), else 10 s."""
    extractor = getattr(pipe, "feature_extractor", None)
    if getattr(getattr(pipe.model, "config", None), "model_type", "") == "audio-spectrogram-transformer":
        frames = int(getattr(extractor, "max_length", 0) or 0)
        if frames > 0:
            return frames / 100.0
    return 10.0


def load_speaker_embedding(path: str, size: int, setting: str, workspace: str | os.PathLike = ".") -> Any:
    """A speaker embedding of ``size`` floats from a ``.npy``, ``.json`` (a list) or ``.pt`` file (a float32 numpy
    array); ``ToolExecutionError`` naming ``setting`` when it is missing, unreadable or has another size."""
    import numpy as np

    candidates = [os.path.expanduser(path)]
    if not os.path.isabs(candidates[0]):
        candidates.insert(0, os.path.join(os.fspath(workspace), candidates[0]))
    found = next((c for c in candidates if os.path.isfile(c)), None)
    if found is None:
        raise ToolExecutionError(f"{setting}={path!r}: no such file; set it to a .npy/.json/.pt file of {size} "
                                 f"numbers (an x-vector)")
    try:
        if found.endswith(".json"):
            with open(found, encoding="utf-8") as fh:
                values = np.asarray(json.load(fh), dtype=np.float32)
        elif found.endswith((".pt", ".pth", ".bin")):
            import torch

            values = torch.load(found, map_location="cpu", weights_only=True).float().numpy()
        else:
            values = np.load(found, allow_pickle=False).astype(np.float32)
    except Exception as exc:
        raise ToolExecutionError(f"{setting}={path!r} could not be read ({type(exc).__name__}); use a .npy, .json "
                                 f"or .pt file of {size} numbers") from None
    values = values.reshape(-1)
    if values.size != size:
        raise ToolExecutionError(f"{setting}={path!r} holds {values.size} numbers; the model needs a speaker "
                                 f"embedding of {size}")
    return values


class VoiceConverter:
    """SpeechT5 speech-to-speech, its vocoder, feature extractor and speaker embedding:
    ``(samples at the model's rate) -> waveform``."""

    def __init__(self, model: Any, vocoder: Any, extractor: Any, speaker: Any, device: str, *, default_speaker: bool):
        self.model, self.vocoder, self.extractor = model, vocoder, extractor
        self.components = {"model": model, "vocoder": vocoder}  # ``model_bytes`` measures both
        self.speaker = speaker
        self.device = device
        self.default_speaker = default_speaker
        self.sampling_rate = int(getattr(extractor, "sampling_rate", 16000) or 16000)
        self.output_rate = int(getattr(vocoder.config, "sampling_rate", self.sampling_rate) or self.sampling_rate)
        strides = getattr(model.config, "conv_stride", None) or (320,)
        self.frame_samples = 1
        for stride in strides:
            self.frame_samples *= int(stride)

    def __call__(self, samples: Any, *, chunk_s: float = 20.0, max_length_ratio: float = 4.0,
                 threshold: float = 0.5) -> Any:
        import numpy as np
        import torch

        dtype = next(self.model.parameters()).dtype
        speaker = torch.as_tensor(self.speaker, dtype=dtype, device=self.device).reshape(1, -1)
        step = max(self.frame_samples * 4, int(chunk_s * self.sampling_rate))
        positions = int(getattr(self.model.config, "max_speech_positions", 4000) or 4000)
        factor = int(getattr(self.model.config, "reduction_factor", 2) or 2)
        waves = []
        for start in range(0, len(samples), step):
            piece = samples[start:start + step]
            if len(piece) < self.frame_samples * 2:
                continue  # too short for the speech encoder
            features = self.extractor(audio=piece, sampling_rate=self.sampling_rate, return_tensors="pt")
            values = features["input_values"].to(self.device, dtype)
            frames = max(1, len(piece) // self.frame_samples)
            ratio = min(float(max_length_ratio), (positions - 2) * factor / frames)  # the decoder's positions
            with torch.inference_mode():
                wave = self.model.generate_speech(values, speaker, vocoder=self.vocoder, maxlenratio=ratio,
                                                  threshold=float(threshold))
            waves.append(wave.float().cpu().numpy().reshape(-1))
        if not waves:
            raise ValueError("the audio is too short to convert")
        return np.concatenate(waves)


class AudioToAudioTool(ExpertTool):
    name = "audio-to-audio"
    task = "audio-to-audio"
    default_model = "microsoft/speecht5_vc"
    description = (
        "audio-to-audio: converts the voice in a speech recording into another speaker's voice (SpeechT5 voice "
        "conversion): the same words, spoken again by the configured voice. Use it when the user wants a "
        "recording re-voiced or anonymised. "
        'Input: {"audio": "<path of a WAV file with speech from an earlier observation>"}. '
        "Output: the name of the new WAV file and its length. "
        'Example: {"audio": "audio/1a2b3c4d.wav"} -> '
        '"Converted the voice of audio/1a2b3c4d.wav into audio/5e6f7a8b_vc_1a2b3c4d_1a2b3c4d.wav (3.1 s, 16000 Hz).".'
    )
    parameters = AUDIO_PARAMETERS
    output_kind = "audio"
    options = {"vocoder": "microsoft/speecht5_hifigan", "speaker_embedding": "", "chunk_s": 20.0,
               "max_length_ratio": 4.0, "threshold": 0.5}

    def load_model(self, device: str, dtype: str) -> Any:
        token, prefix = self.hf_token, tool_key(self.name)

        def build_vocoder(location: str, args: dict[str, Any]) -> Any:
            from transformers import SpeechT5HifiGan

            # Any: transformers' stubs give ``model.to`` an unbound signature
            vocoder: Any = SpeechT5HifiGan.from_pretrained(location, dtype=args["dtype"], token=token)
            return vocoder.to(device).eval()

        def build(location: str, args: dict[str, Any]) -> Any:
            import numpy as np
            import transformers

            config = transformers.AutoConfig.from_pretrained(location, token=token)
            if getattr(config, "model_type", "") != "speecht5":
                raise ValueError(f"{self.model} is a {getattr(config, 'model_type', '?')} model, not SpeechT5 voice "
                                 f"conversion (such as {self.default_model})")
            # Any: transformers' stubs give ``model.to`` an unbound signature
            model: Any = transformers.SpeechT5ForSpeechToSpeech.from_pretrained(location, dtype=args["dtype"],
                                                                                token=token)
            extractor = transformers.AutoFeatureExtractor.from_pretrained(location, token=token)
            own = os.path.join(location, "vocoder")
            vocoder_source = own if os.path.isfile(os.path.join(own, "config.json")) else str(self.options["vocoder"])
            vocoder = self.load_checkpoint(build_vocoder, device, dtype, source=vocoder_source,
                                           setting=f"{prefix}_vocoder", task="text-to-speech")
            size = int(config.speaker_embedding_dim)
            configured = str(self.options["speaker_embedding"] or "").strip()
            packaged = os.path.join(location, "speaker_embedding.npy")
            if configured:
                speaker = load_speaker_embedding(configured, size, f"{prefix}_speaker_embedding", self.workspace)
            elif os.path.isfile(packaged):
                speaker = load_speaker_embedding(packaged, size, f"{prefix}_speaker_embedding")
            else:
                speaker = np.zeros(size, dtype=np.float32)
            return VoiceConverter(model.to(device).eval(), vocoder, extractor, speaker, device,
                                  default_speaker=not configured and not os.path.isfile(packaged))

        return self.load_checkpoint(build, device, dtype)

    def call_local(self, model: VoiceConverter, *, audio: str) -> Any:
        samples, rate = read_audio(audio)
        samples = resample(samples, rate, model.sampling_rate)
        wave = model(samples, chunk_s=float(self.options["chunk_s"]),
                     max_length_ratio=float(self.options["max_length_ratio"]),
                     threshold=float(self.options["threshold"]))
        note = ""
        if model.default_speaker:
            note = (f"Note: no speaker embedding is set, so a neutral voice was used; set "
                    f"{tool_key(self.name)}_speaker_embedding to an x-vector file to choose the voice.")
        return {"audio": wave, "sampling_rate": model.output_rate, "note": note}

    def render(self, result: Any, *, audio: str) -> str:
        import numpy as np

        note = ""
        if isinstance(result, RemoteBlob):
            name = self._save_blob(result.data, result.content_type, audio)
        elif isinstance(result, dict) and "audio" in result:
            samples = np.nan_to_num(np.asarray(result["audio"], dtype=np.float32)).reshape(-1)
            peak = float(np.abs(samples).max()) if samples.size else 0.0
            if peak > 1.0:  # a vocoder may overshoot: scale into [-1, 1] rather than clip
                samples = samples / peak
            name = self.save_audio(samples, int(result["sampling_rate"]), audio, "vc")
            note = str(result.get("note") or "")
        else:  # the inference API: [{"label", "blob" (base64), "content-type"}]
            record = next(iter(_records(result)), {})
            if not record.get("blob"):
                raise ValueError("the endpoint sent no audio")
            name = self._save_blob(base64.b64decode(record["blob"]), str(record.get("content-type", "")), audio)
        seconds, rate = wav_seconds(self.workspace / name), _wav_rate(self.workspace / name)
        details = f"{seconds:.1f} s, {rate} Hz" if seconds is not None else "length unknown"
        observation = f"Converted the voice of {self.rel(audio)} into {name} ({details})."
        return ToolResult(observation + (f"\n{note}" if note else ""), value=name)

    def _save_blob(self, data: bytes, content_type: str, audio: str) -> str:
        is_wav = data[:4] == b"RIFF" and data[8:12] == b"WAVE"
        ext = "wav" if is_wav else {"audio/flac": "flac", "audio/x-flac": "flac", "audio/mpeg": "mp3",
                                    "audio/ogg": "ogg"}.get(content_type.split(";")[0].strip())
        if ext is None:
            raise ValueError(f"the endpoint sent {content_type or 'bytes'} that are not audio this tool knows")
        name = files.output_path(self.rel(audio), "vc", ext)
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return name


def _wav_rate(path: Any) -> int | None:
    try:
        with wave.open(str(path), "rb") as src:
            return src.getframerate()
    except (wave.Error, EOFError, OSError):
        return None
