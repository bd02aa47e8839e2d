"""Helpers for the expert tool tests (response bodies of a fake inference endpoint)."""

from __future__ import annotations


def png_base64(image) -> str:
    """A PIL image as base64 PNG text (how the inference API sends masks and images inside JSON)."""
    import base64
    import io

    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    """A silent mono 16-bit WAV file's bytes."""
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()
