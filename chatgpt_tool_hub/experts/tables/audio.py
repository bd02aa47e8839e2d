"""Audio expert tools: speech recognition, text-to-speech, audio classification, voice conversion.

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
    "audio-classification": ("chatgpt_tool_hub.experts.audio_tasks", "AudioClassificationTool",
             "What can be heard in a WAV file: speech, music, animals, alarms (AST AudioSet; expert model)."),
    "audio-to-audio": ("chatgpt_tool_hub.experts.audio_tasks", "AudioToAudioTool",
             "Speak a recording again in another voice, into a new WAV file (SpeechT5 VC; expert model)."),
}
