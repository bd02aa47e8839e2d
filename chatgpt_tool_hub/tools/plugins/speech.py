"""``stt`` and ``tts``: Azure AI Speech through its REST API (no SDK).

* ``stt`` posts a WAV file of the workspace to the speech-to-text REST API for
  short audio (``https://{region}.stt.speech.microsoft.com/speech/recognition/
  conversation/cognitiveservices/v1?language=...``, at most 60 s): the file
  is sent as 16 kHz mono 16-bit PCM (converted here when it is not) and the
  recognised text comes back.
* ``tts`` posts SSML to ``https://{region}.tts.speech.microsoft.com/
  cognitiveservices/v1`` with the voice ``tts_speech_id`` (with
  ``tts_auto_detect``, a voice of the text's language when that differs) and
  saves the WAV it gets as ``audio/{uuid8}.wav`` in the workspace.

The key (``stt_api_key`` / ``tts_api_key``) travels in the
``Ocp-Apim-Subscription-Key`` header. Without a key a call says so and points
at the local expert tools ``speech-recognition`` and ``text-to-speech``,
which need none. ``stt_api_base_url`` / ``tts_api_base_url`` replace the
region's URL (a proxy, a sovereign cloud, a test server).
"""

from __future__ import annotations

import array
import io
import json
import os
import re
import sys
import wave
from typing import Any, Mapping
from xml.sax.saxutils import escape, quoteattr

from ...errors import ToolExecutionError, ToolInputError
from ...runtime.filenames import new_path, relative, resolve_input
from ...runtime.http import HttpSettings
from ...runtime.http import request as send
from ..base import Tool, ToolResult, maybe_object

__all__ = ["SttTool", "TtsTool", "detect_language", "VOICES", "to_pcm16_mono"]

STT_PATH = "/speech/recognition/conversation/cognitiveservices/v1"
TTS_PATH = "/cognitiveservices/v1"
STT_RATE = 16000
MAX_SECONDS = 60
DEFAULT_VOICE = "zh-CN-XiaozhenNeural"
DEFAULT_FORMAT = "riff-24khz-16bit-mono-pcm"
# a voice per language for tts_auto_detect (the ones chatgpt-tool-hub 0.5 picked)
VOICES = {
    "zh": "zh-CN-XiaozhenNeural", "en": "en-US-JacobNeural", "ja": "ja-JP-AoiNeural", "ko": "ko-KR-SoonBokNeural",
    "de": "de-DE-LouisaNeural", "fr": "fr-FR-BrigitteNeural", "es": "es-ES-LaiaNeural",
}
_STATUS = {
    "NoMatch": "speech was detected, but no words of {language} could be recognised (is "
               "stt_recognition_language the language spoken?)",
    "InitialSilenceTimeout": "the audio starts with silence only",
    "BabbleTimeout": "the audio starts with noise only",
    "Error": "the recognition service failed",
}
_HINTS = {401: "the service refused the key; check {keys} and the region",
          403: "the service refused the request; check {keys} and the region"}
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff]")
_HAN = re.compile(r"[\u3400-\u9fff]")
# Latin-script languages: letters only one of them uses (count twice), then its commonest short words
_LATIN_HINTS = (("de", re.compile(r"[äöüß]", re.I), re.compile(r"\b(der|die|das|und|nicht|ist|ich|ein)\b", re.I)),
                ("fr", re.compile(r"[çœèêàâîûù]", re.I), re.compile(r"\b(le|la|les|et|est|une|je|vous)\b", re.I)),
                ("es", re.compile(r"[ñ¿¡]", re.I), re.compile(r"\b(el|los|las|es|una|por|que|qué|y)\b", re.I)))


def detect_language(text: str) -> str:
    """The language of ``text`` as a two-letter code, from its script (and, for Latin script, its letters and
    commonest words): ``zh``, ``ja``, ``ko``, ``de``, ``fr``, ``es``, else ``en``."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    if _HAN.search(text):
        return "zh"
    scores = {lang: 2 * len(letters.findall(text)) + len(words.findall(text)) for lang, letters, words in _LATIN_HINTS}
    best = max(scores, key=lambda lang: scores[lang])
    return best if scores[best] >= 2 else "en"


def to_pcm16_mono(data: bytes, name: str, rate: int = STT_RATE) -> tuple[bytes, float]:
    """A WAV file's bytes as 16-bit mono PCM WAV at ``rate`` Hz, and its length in seconds."""
    try:
        with wave.open(io.BytesIO(data), "rb") as src:
            channels, width, source_rate = src.getnchannels(), src.getsampwidth(), src.getframerate()
            frames = src.readframes(src.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ToolInputError(f"file '{name}' is not a PCM WAV file ({exc}); convert it to WAV first") from None
    if not source_rate or not frames:
        raise ToolInputError(f"file '{name}' holds no audio")
    if width == 2:
        samples = array.array("h", frames)
        if sys.byteorder == "big":
            samples.byteswap()
    elif width == 1:
        samples = array.array("h", ((b - 128) << 8 for b in frames))
    else:
        raise ToolInputError(f"file '{name}' uses {8 * width}-bit samples; send 16-bit PCM WAV")
    if channels > 1:
        samples = array.array("h", (sum(samples[i:i + channels]) // channels
                                    for i in range(0, len(samples) - channels + 1, channels)))
    seconds = len(samples) / float(source_rate)
    if source_rate != rate:
        count = max(1, round(len(samples) * rate / source_rate))
        step = (len(samples) - 1) / max(1, count - 1)
        resampled = array.array("h")
        for i in range(count):
            position = i * step
            left = int(position)
            right = min(left + 1, len(samples) - 1)
            fraction = position - left
            resampled.append(int(round(samples[left] * (1 - fraction) + samples[right] * fraction)))
        samples = resampled
    if sys.byteorder == "big":
        samples.byteswap()
    out = io.BytesIO()
    with wave.open(out, "wb") as dst:
        dst.setnchannels(1)
        dst.setsampwidth(2)
        dst.setframerate(rate)
        dst.writeframes(samples.tobytes())
    return out.getvalue(), seconds


class _AzureSpeech(Tool):
    kind = ""           # "stt" or "tts": the settings prefix
    host_part = ""      # the region URL is https://{region}.{host_part}
    local_tool = ""     # the expert tool that needs no key

    def __init__(self, api_key: str = "", region: str = "", *, base_url: str = "", workspace: str = "./workspace",
                 http: HttpSettings | None = None):
        self._key = "" if api_key is None else str(api_key).strip()
        self.region = str(region or "").strip().lower()
        self.base_url = str(base_url or "").strip().rstrip("/")
        self.workspace = str(workspace)
        self.http = http or HttpSettings()

    def __repr__(self) -> str:  # never the key
        return f"<{type(self).__name__} {self.name!r} region={self.region or None!r} key={'set' if self._key else 'unset'}>"

    def _endpoint(self, path: str) -> str:
        if not self._key:
            raise ToolExecutionError(
                f"the {self.name} tool has no Azure Speech key: set {self.kind}_api_key and {self.kind}_api_region "
                f"(a create_app keyword, {self.kind.upper()}_API_KEY in the environment, or config.json's "
                f"\"kwargs\"), or use the local {self.local_tool} tool instead (the experts extra), which needs "
                f"no key")
        if self.base_url:
            return self.base_url + path
        if not re.fullmatch(r"[a-z0-9-]+", self.region or ""):
            raise ToolExecutionError(f"the {self.name} tool needs {self.kind}_api_region (the Azure region of the "
                                     f"Speech resource, e.g. eastasia or westeurope), or {self.kind}_api_base_url")
        return f"https://{self.region}.{self.host_part}{path}"

    def _post(self, path: str, body: bytes, headers: dict[str, str], params: dict[str, str] | None = None) -> Any:
        url = self._endpoint(path)
        return send("POST", url, params=params, data=body,
                    headers={"Ocp-Apim-Subscription-Key": self._key, **headers}, secrets=(self._key,),
                    timeout=self.http.timeout, proxy=self.http.proxy,
                    key_names=f"{self.kind}_api_key and {self.kind}_api_region", hints=_HINTS)


class SttTool(_AzureSpeech):
    name = "stt"
    kind = "stt"
    host_part = "stt.speech.microsoft.com"
    local_tool = "speech-recognition"
    description = (
        "stt: transcribes the speech in a WAV file (at most 60 s) with Azure Speech. "
        'Input: {"audio": "<path of a WAV file from an earlier observation>"} (optionally "language", '
        "e.g. en-US). Output: the transcript."
    )
    parameters = {
        "type": "object",
        "properties": {
            "audio": {"type": "string", "description": "path of a WAV file in the workspace, e.g. audio/1a2b3c4d.wav"},
            "language": {"type": "string", "description": "the spoken language, e.g. zh-CN or en-US"},
        },
        "required": ["audio"],
    }

    def __init__(self, api_key: str = "", region: str = "", *, language: str = "zh-CN", **options: Any):
        super().__init__(api_key, region, **options)
        self.language = str(language or "zh-CN").strip()

    @classmethod
    def from_context(cls, context: Any) -> "SttTool":
        settings = context.settings
        return cls(settings.get("stt_api_key", ""), settings.get("stt_api_region", ""),
                   language=settings.get("stt_recognition_language", "zh-CN"),
                   base_url=settings.get("stt_api_base_url", ""), workspace=str(context.workspace), http=context.http)

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(tool_input, Mapping) and maybe_object(str(tool_input or "")) is None:
            tool_input = {"audio": str(tool_input or "").strip()}  # plain text: the file's path
        return super().parse_arguments(tool_input)

    def _run(self, audio: str, language: str | None = None, **_ignored: Any) -> str:
        self._endpoint(STT_PATH)  # no key: say so first
        path = resolve_input(audio, self.workspace, "audio")
        name = relative(path, self.workspace)
        language = str(language or self.language).strip()
        with open(path, "rb") as handle:
            wav, seconds = to_pcm16_mono(handle.read(), name)
        if seconds > MAX_SECONDS:
            raise ToolInputError(f"{name} is {seconds:.0f} s long; Azure's short-audio API takes at most "
                                 f"{MAX_SECONDS} s (the local {self.local_tool} tool takes longer files)")
        response = self._post(STT_PATH, wav, {"Content-Type": f"audio/wav; codecs=audio/pcm; samplerate={STT_RATE}",
                                              "Accept": "application/json"},
                              params={"language": language, "format": "simple"})
        try:
            result = json.loads(response.text)
        except ValueError:
            raise ToolExecutionError("Azure Speech answered something that is not JSON; is stt_api_base_url right?"
                                     ) from None
        status = str(result.get("RecognitionStatus", "")) if isinstance(result, dict) else ""
        text = " ".join(str(result.get("DisplayText") or "").split()) if isinstance(result, dict) else ""
        if status == "Success" and text:
            return ToolResult(f'Transcript of {name} ({seconds:.1f} s): "{text}"', value=text)
        if status in ("Success", "NoMatch", "InitialSilenceTimeout", "BabbleTimeout"):
            reason = _STATUS.get(status, "no words were recognised").format(language=language)
            return f"No speech was recognised in {name} ({seconds:.1f} s): {reason}."
        raise ToolExecutionError(f"Azure Speech could not transcribe {name}: "
                                 f"{_STATUS.get(status, 'status ' + (status or 'missing'))}")


class TtsTool(_AzureSpeech):
    name = "tts"
    kind = "tts"
    host_part = "tts.speech.microsoft.com"
    local_tool = "text-to-speech"
    output_kind = "audio"
    description = (
        "tts: reads a text aloud with Azure Speech and saves it as a WAV file (Chinese, English, Japanese, Korean, "
        'German, French, Spanish ...). Input: {"text": "<the text to speak>"}. Output: the new audio file.'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the text to speak"}},
        "required": ["text"],
    }

    def __init__(self, api_key: str = "", region: str = "", *, voice: str = DEFAULT_VOICE, auto_detect: bool = True,
                 output_format: str = DEFAULT_FORMAT, max_chars: int = 2000, **options: Any):
        super().__init__(api_key, region, **options)
        self.voice = str(voice or DEFAULT_VOICE).strip()
        self.auto_detect = bool(auto_detect)
        self.output_format = str(output_format or DEFAULT_FORMAT).strip()
        self.max_chars = max(1, int(max_chars))

    @classmethod
    def from_context(cls, context: Any) -> "TtsTool":
        settings = context.settings
        return cls(settings.get("tts_api_key", ""), settings.get("tts_api_region", ""),
                   voice=settings.get("tts_speech_id", DEFAULT_VOICE),
                   auto_detect=settings.get("tts_auto_detect", True),
                   output_format=settings.get("tts_output_format", DEFAULT_FORMAT),
                   max_chars=settings.get("tts_max_chars", 2000),
                   base_url=settings.get("tts_api_base_url", ""), workspace=str(context.workspace), http=context.http)

    def voice_for(self, text: str) -> str:
        """``tts_speech_id``, or with ``tts_auto_detect`` a voice of the text's language when the configured
        voice speaks another."""
        if not self.auto_detect:
            return self.voice
        language = detect_language(text)
        if self.voice.lower().startswith(language + "-"):
            return self.voice
        return VOICES.get(language, self.voice)

    def ssml(self, text: str, voice: str) -> str:
        locale = "-".join(voice.split("-")[:2]) or "en-US"
        return (f"<speak version='1.0' xmlns='http://www.w3.org/2001/10/synthesis' xml:lang={quoteattr(locale)}>"
                f"<voice name={quoteattr(voice)}>{escape(text)}</voice></speak>")

    def _run(self, text: str, **_ignored: Any) -> str:
        text = " ".join(str(text or "").split())
        if not text:
            raise ToolInputError('the tts tool needs the text to speak, e.g. {"text": "Good morning!"}')
        if len(text) > self.max_chars:
            raise ToolInputError(f"the text is {len(text)} characters long; tts speaks at most {self.max_chars} "
                                 f"at a time (tts_max_chars): split it into shorter parts")
        voice = self.voice_for(text)
        response = self._post(TTS_PATH, self.ssml(text, voice).encode("utf-8"),
                              {"Content-Type": "application/ssml+xml", "X-Microsoft-OutputFormat": self.output_format})
        audio = response.content
        if self.output_format.startswith("riff") and not audio.startswith(b"RIFF"):
            raise ToolExecutionError("Azure Speech answered something that is not WAV audio; "
                                     "is tts_api_base_url right?")
        ext = "wav" if self.output_format.startswith("riff") else self.output_format.rsplit("-", 1)[-1]
        name = new_path(self.workspace, "audio", ext if ext.isalnum() else "bin")
        with open(os.path.join(self.workspace, name), "wb") as handle:
            handle.write(audio)
        details = f"voice {voice}"
        if ext == "wav":
            try:
                with wave.open(io.BytesIO(audio), "rb") as src:
                    details += f", {src.getnframes() / float(src.getframerate() or 1):.1f} s"
            except (wave.Error, EOFError):
                pass
        return ToolResult(f"Spoke the text into {name} ({details}).", value=name)
