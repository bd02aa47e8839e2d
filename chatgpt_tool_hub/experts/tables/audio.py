"""Audio expert tools: speech recognition, text-to-speech.

``TOOLS``: tool name -> (module, class, one line for tool listings; the full
description lives on the class). Light: nothing is imported until a tool is built.
"""

from __future__ import annotations

__all__ = ["TOOLS"]

TOOLS: dict[str, tuple[str, str, str]] = {
    "speech-recognition": ("chatgpt_tool_hub.experts.audio", "SpeechRecognitionTool",
             "Transcribe speech in a WAV file (Whisper; expert model)."),
    "text-to-speech": ("chatgpt_tool_hub.experts.audio", "TextToSpeechTool",
             "Read a text aloud into a WAV file (MMS-TTS VITS; expert model)."),
}
