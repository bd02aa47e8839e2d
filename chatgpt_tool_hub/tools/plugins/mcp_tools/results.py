"""MCP results as observation text; images, audio and binary resources saved into the workspace.

Text is kept (control characters removed, head and tail of ``max_chars``).
With a workspace, an image, an audio clip or an embedded binary resource is
written to ``image/{uuid8}.png``, ``audio/{uuid8}.wav``, ``video/...`` or
``files/{uuid8}.{ext}`` (the extension from its MIME type) and the observation
names that workspace-relative path, so other tools can open it; without one it
is only described. A resource link is named with its URI.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import os
import re
import uuid
from pathlib import Path
from typing import Any

from ....config import SETTINGS
from ....errors import ToolExecutionError
from ....textutil import clip_text, strip_control

__all__ = ["render_result", "render_resource", "render_prompt", "FileSaver", "MAX_RESULT_CHARS", "MAX_SAVED_BYTES"]

MAX_RESULT_CHARS = SETTINGS["mcp_max_result_chars"].default  # the default of mcp_max_result_chars
MAX_SAVED_BYTES = 50 * 1024 * 1024  # a larger block is described, not saved
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/jpg": "jpg", "image/gif": "gif", "image/webp": "webp",
               "image/svg+xml": "svg", "image/bmp": "bmp", "audio/wav": "wav", "audio/x-wav": "wav",
               "audio/wave": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/ogg": "ogg", "audio/flac": "flac",
               "audio/webm": "webm", "video/mp4": "mp4", "application/pdf": "pdf", "application/json": "json",
               "text/plain": "txt", "text/csv": "csv", "application/zip": "zip"}


class FileSaver:
    """Writes decoded blocks into ``workspace`` under fresh names; returns the workspace-relative name."""

    def __init__(self, workspace: str | os.PathLike, max_bytes: int = MAX_SAVED_BYTES):
        self.workspace = Path(workspace).expanduser()
        self.max_bytes = max_bytes

    def save(self, data: bytes, mime: str | None, kind: str, uri: str | None = None) -> str:
        folder = kind if kind in ("image", "audio") else _folder(mime)
        name = f"{folder}/{uuid.uuid4().hex[:8]}.{_extension(mime, uri, kind)}"
        path = self.workspace.resolve() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb") as sink:  # a fresh name: never overwrite
            sink.write(data)
        return name


def render_result(result: Any, max_chars: int = MAX_RESULT_CHARS, *, files: FileSaver | None = None,
                  resource_tool: str | None = None) -> str:
    """An MCP ``CallToolResult`` as observation text (control characters removed, head and tail of
    ``max_chars``); ``isError`` raises ``ToolExecutionError`` with the same text. ``files`` saves
    images, audio and binary resources; ``resource_tool`` is named next to resource links."""
    parts: list[str] = []
    saved: list[str] = []
    for block in getattr(result, "content", None) or []:
        parts.append(_block(block, files, saved, resource_tool))
    text = "\n".join(parts)
    structured = _attr(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    text = _finish(text, max_chars, saved)
    if _attr(result, "is_error", "isError"):
        raise ToolExecutionError(text or "the MCP tool reported an error without details")
    return text or "(the MCP tool returned no content)"


def render_resource(result: Any, max_chars: int = MAX_RESULT_CHARS, *, files: FileSaver | None = None) -> str:
    """A ``ReadResourceResult``: each content's text with its URI, binary contents saved or described."""
    saved: list[str] = []
    parts = [_contents(item, files, saved) for item in getattr(result, "contents", None) or []]
    return _finish("\n".join(parts), max_chars, saved) or "(the resource is empty)"


def render_prompt(result: Any, max_chars: int = MAX_RESULT_CHARS, *, files: FileSaver | None = None) -> str:
    """A ``GetPromptResult``: its description, then each message as ``[role] content``."""
    saved: list[str] = []
    parts = [str(result.description)] if getattr(result, "description", None) else []
    for message in getattr(result, "messages", None) or []:
        parts.append(f"[{getattr(message, 'role', '?')}] {_block(message.content, files, saved, None)}")
    return _finish("\n".join(parts), max_chars, saved) or "(the prompt has no messages)"


def _finish(text: str, max_chars: int, saved: list[str]) -> str:
    text = clip_text(strip_control(text), max_chars)
    lost = [name for name in saved if name not in text]  # clipped away: the names must stay visible
    if lost:
        note = "[saved in the workspace: " + ", ".join(lost) + "]"
        text = clip_text(text, max(0, max_chars - len(note) - 1)) + "\n" + note
    return text


def _block(block: Any, files: FileSaver | None, saved: list[str], resource_tool: str | None) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return _binary(kind, _attr(block, "mime_type", "mimeType"), getattr(block, "data", None), files, saved)
    if kind == "resource":
        return _contents(block.resource, files, saved)
    if kind == "resource_link":
        uri, mime = getattr(block, "uri", ""), _attr(block, "mime_type", "mimeType")
        details = ", ".join(str(d) for d in (mime, f"{block.size} bytes" if getattr(block, "size", None) else None) if d)
        name = getattr(block, "name", "") or ""
        text = f"[resource link: {name + ' ' if name and name != uri else ''}{uri}{f' ({details})' if details else ''}"
        return text + (f"; read it with {resource_tool}]" if resource_tool else "]")
    return f"[{kind or 'unknown'} content]"


def _contents(res: Any, files: FileSaver | None, saved: list[str]) -> str:
    uri, mime = getattr(res, "uri", ""), _attr(res, "mime_type", "mimeType")
    if getattr(res, "text", None) is not None:
        return f"[resource: {uri}]\n{res.text}"
    return _binary("resource", mime, getattr(res, "blob", None), files, saved, uri=str(uri))


def _binary(kind: str, mime: str | None, data: str | bytes | None, files: FileSaver | None, saved: list[str],
            uri: str | None = None) -> str:
    what = f"{kind}: {uri}, {mime or 'binary'}" if uri else f"{kind}: {mime or 'binary'}"
    raw = _decode(data)
    if raw is None:
        return f"[{what}, not valid base64 data]"
    if files is None:
        return f"[{what}, {len(raw)} bytes]"
    if len(raw) > files.max_bytes:
        return f"[{what}, {len(raw)} bytes, not saved: larger than {files.max_bytes // (1024 * 1024)} MB]"
    try:
        name = files.save(raw, mime, kind, uri)
    except OSError as exc:
        return f"[{what}, {len(raw)} bytes, could not be saved: {exc.strerror or exc}]"
    saved.append(name)
    source = f" {uri}" if uri else ""
    return f"[{kind}{source} saved as {name} in the workspace ({mime or 'binary'}, {len(raw)} bytes)]"


def _decode(data: str | bytes | None) -> bytes | None:
    if not data:
        return b""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        try:  # line breaks and other whitespace inside the base64 text
            return base64.b64decode(re.sub(rb"\s+", b"", data if isinstance(data, bytes) else data.encode()),
                                    validate=True)
        except (binascii.Error, ValueError):
            return None


def _folder(mime: str | None) -> str:
    major = (mime or "").split("/")[0].lower()
    return major if major in ("image", "audio", "video") else "files"


def _extension(mime: str | None, uri: str | None, kind: str) -> str:
    base = (mime or "").split(";")[0].strip().lower()
    if base in _EXTENSIONS:
        return _EXTENSIONS[base]
    guessed = mimetypes.guess_extension(base) if base else None
    if guessed and re.fullmatch(r"\.[A-Za-z0-9]{1,8}", guessed):
        return guessed[1:].lower()
    suffix = os.path.splitext((uri or "").split("?")[0].split("#")[0])[1]
    if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix):  # only the suffix of a URI, never its path
        return suffix[1:].lower()
    return {"image": "png", "audio": "wav"}.get(kind, "bin")


def _attr(obj: Any, *names: str) -> Any:
    """The first of ``obj``'s attributes ``names`` that is set (SDK objects spell fields differently)."""
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None
