"""Audio expert tools: speech recognition (WAV → transcript) and text-to-speech (text → ``audio/{uuid8}.wav``).

Audio goes in and out as 16-bit PCM WAV through the standard ``wave`` module
and numpy arrays, so no ffmpeg or torchaudio is needed: input audio is
resampled here to the model's rate (``scipy.signal.resample_poly`` when scipy
is installed, else linear interpolation).
"""

from __future__ import annotations

import os
import wave
from typing import Any, Mapping

from ..errors import ToolInputError
from ..runtime import filenames as files
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool
from .remote import RemoteBlob, RemoteEndpoint
from .vision import _records

__all__ = ["SpeechRecognitionTool", "TextToSpeechTool", "read_audio", "resample", "wav_seconds"]

AUDIO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "audio": {"type": "string",
                  "description": "path of a WAV file in the workspace, taken from an earlier observation "
                                 "(e.g. audio/1a2b3c4d.wav)"},
    },
    "required": ["audio"],
    "additionalProperties": False,
}


def read_audio(path: str | os.PathLike) -> tuple[Any, int]:
    """``(float32 mono samples, rate)`` of a WAV file, or ``ToolInputError`` naming the problem."""
    name = os.path.basename(path)
    try:
        samples, rate = files.read_wav(path)
    except (wave.Error, EOFError) as exc:
        raise ToolInputError(f"file '{name}' is not a WAV file this tool can read ({exc}); "
                             f"convert it to 16-bit PCM WAV first") from None
    if not len(samples) or not rate:
        raise ToolInputError(f"file '{name}' holds no audio samples")
    return samples, rate


def resample(samples: Any, rate: int, target: int) -> Any:
    """Mono float samples from ``rate`` to ``target`` Hz (polyphase with scipy, else linear interpolation)."""
    import numpy as np

    if rate == target:
        return np.asarray(samples, dtype=np.float32)
    try:
        from math import gcd

        from scipy.signal import resample_poly

        common = gcd(int(rate), int(target))
        return resample_poly(samples, target // common, rate // common).astype(np.float32)
    except ImportError:
        length = max(1, round(len(samples) * target / rate))
        positions = np.linspace(0, len(samples) - 1, num=length)
        return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def wav_seconds(path: str | os.PathLike) -> float | None:
    """A WAV file's duration from its header, or None when it is not a WAV file."""
    try:
        with wave.open(str(path), "rb") as src:
            return src.getnframes() / float(src.getframerate() or 1)
    except (wave.Error, EOFError, OSError):
        return None


class SpeechRecognitionTool(ExpertTool):
    name = "speech-recognition"
    task = "automatic-speech-recognition"
    default_model = "openai/whisper-tiny"
    description = (
        "speech-recognition: transcribes the speech in an audio file into text (Whisper; many languages). Use it "
        "whenever you need to know what is said in an audio file - never guess. "
        'Input: {"audio": "<path of a WAV file from an earlier observation>"}. '
        "Output: the transcript and the audio's length. "
        'Example: {"audio": "audio/1a2b3c4d.wav"} -> '
        '"Transcript of audio/1a2b3c4d.wav (3.2 s): \\"turn left at the next corner\\"".'
    )
    parameters = AUDIO_PARAMETERS
    options = {"language": "", "max_new_tokens": 256, "chunk_length_s": 30.0}

    def call_local(self, model: Any, *, audio: str) -> Any:
        samples, rate = read_audio(audio)
        target = int(getattr(getattr(model, "feature_extractor", None), "sampling_rate", 0) or 16000)
        samples = resample(samples, rate, target)
        kwargs: dict[str, Any] = {}
        if str(getattr(model, "type", "")).startswith("seq2seq"):
            limit = int(self.options["max_new_tokens"])
            positions = getattr(getattr(model.model, "config", None), "max_target_positions", None)
            if positions:  # Whisper refuses prompt + new tokens beyond its target positions
                limit = min(limit, int(positions) - 4)
            generate: dict[str, Any] = {"max_new_tokens": max(1, limit)}
            if str(self.options["language"]).strip():
                generate["language"] = str(self.options["language"]).strip()
            kwargs["generate_kwargs"] = generate
        chunk = float(self.options["chunk_length_s"])
        if chunk > 0 and len(samples) / target > chunk:
            kwargs["chunk_length_s"] = chunk  # long audio: transcribed in overlapping windows
        return model({"raw": samples, "sampling_rate": target}, **kwargs)

    def render(self, result: Any, *, audio: str) -> str:
        texts = [str(r.get("text", "")).strip() for r in _records(result)]
        text = " ".join(t for t in texts if t)
        seconds = wav_seconds(audio)
        length = f" ({seconds:.1f} s)" if seconds is not None else ""
        if not text:
            return f"No speech was recognised in {self.rel(audio)}{length}."
        return ToolResult(f'Transcript of {self.rel(audio)}{length}: "{text}"', value=text)


_AUDIO_EXTENSIONS = {"audio/flac": "flac", "audio/x-flac": "flac", "audio/mpeg": "mp3", "audio/mp3": "mp3",
                     "audio/ogg": "ogg", "audio/webm": "webm"}


class TextToSpeechTool(ExpertTool):
    name = "text-to-speech"
    task = "text-to-audio"
    hub_task = "text-to-speech"
    default_model = "facebook/mms-tts-eng"
    half_precision = False  # VITS' flows are unstable in float16, and the model is small
    description = (
        "text-to-speech: reads an English text aloud and saves it as a WAV file. Use it when the user wants to "
        "hear something or asks for an audio file. "
        'Input: {"text": "<the text to speak>"}. '
        "Output: the name of the new audio file and its length. "
        'Example: {"text": "Good morning!"} -> "Spoke the text into audio/1a2b3c4d.wav (1.4 s, 16000 Hz)".'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the text to speak"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    output_kind = "audio"
    options = {"max_chars": 1000}

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        text = str(inputs.get("text", "")).strip()
        if not text:
            raise ToolInputError(f"{self.name} needs the text to speak, e.g. {{\"text\": \"Good morning!\"}}")
        limit = int(self.options["max_chars"])
        if limit > 0 and len(text) > limit:
            raise ToolInputError(f"the text is {len(text)} characters long; {self.name} speaks at most {limit} "
                                 f"at a time (text_to_speech_max_chars): split it into shorter parts")
        return {**inputs, "text": text}

    def call_local(self, model: Any, *, text: str) -> Any:
        tokenizer = getattr(model, "tokenizer", None)
        if callable(tokenizer):  # a voice that has no sound for any character of the text (VITS drops them)
            try:
                ids = tokenizer(text).get("input_ids")
            except Exception:  # noqa: BLE001 - the model's own call says what is wrong
                ids = None
            special = set(getattr(tokenizer, "all_special_ids", None) or ())
            if ids is not None and not [i for i in ids if i not in special]:
                raise ToolInputError(f"this voice ({self.model}) has no sound for any character of {text[:40]!r}: "
                                     f"write the text in the voice's language and letters (numbers as words), "
                                     f"or set {tool_key(self.name)}_model to a voice for that language")
        return model(text)

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        return endpoint.post_json(text)

    def render(self, result: Any, *, text: str) -> str:
        if isinstance(result, RemoteBlob):
            name, seconds, rate = self._save_blob(result)
        else:
            name, seconds, rate = self._save_samples(result)
        details = f"{seconds:.1f} s" if seconds is not None else "length unknown"
        if rate:
            details += f", {rate} Hz"
        return ToolResult(f"Spoke the text into {name} ({details}).", value=name)

    def _save_samples(self, result: Any) -> tuple[str, float | None, int | None]:
        import numpy as np

        records = _records(result)
        record = records[0] if records else {}
        rate = int(record.get("sampling_rate") or 0)
        samples = np.nan_to_num(np.asarray(record.get("audio", []), dtype=np.float32)).squeeze()
        if not rate or not samples.size or samples.ndim > 2:
            raise ValueError("the model returned no audio")
        name = self.save_audio(samples, rate, None, "tts")
        frames = samples.shape[-1] if samples.ndim == 2 and samples.shape[0] <= 8 else samples.shape[0]
        return name, frames / rate, rate

    def _save_blob(self, blob: RemoteBlob) -> tuple[str, float | None, int | None]:
        is_wav = blob.data[:4] == b"RIFF" and blob.data[8:12] == b"WAVE"
        ext = "wav" if is_wav else _AUDIO_EXTENSIONS.get(blob.content_type)
        if ext is None:
            raise ValueError(f"the endpoint sent {blob.content_type or 'bytes'} that are not audio this tool knows")
        name = files.new_path(self.workspace, "audio", ext)
        target = self.workspace / name
        target.write_bytes(blob.data)
        if not is_wav:
            return name, None, None
        seconds = wav_seconds(target)
        with wave.open(str(target), "rb") as src:
            return name, seconds, src.getframerate()
