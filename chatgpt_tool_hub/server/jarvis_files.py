"""The files of JARVIS's answers, where JARVIS's web client looks for them.

JARVIS names the files a run made as paths on its server (``/images/1ea2.png``,
``/audios/5d3c.flac``, ``/videos/a1b2.mp4``) and its web client shows every
such path found in an answer as ``<img>`` / ``<audio>`` / ``<video>`` with the
server's base URL in front (its regular expressions match ``/`` or ``http(s):``
up to the first ``.png`` / ``.jpg`` / ``.jpeg`` / ``.gif`` / ``.tiff``,
``.wav`` / ``.flac`` or ``.mp4``: a query string after the suffix is cut off).

So a workspace file a JARVIS route names becomes
``/images/<user folder>/<expiry>-<signature>/<workspace name>`` (``/audios/``,
``/videos/`` for sound and video): the signature of a ``/files`` link, moved
into the path where the client keeps it. :func:`add_media_routes` serves those
paths; a wrong or expired signature, a path outside the user's folder or a file
that is not of the prefix's kind is a 404. The files are sent with
``Cross-Origin-Resource-Policy: cross-origin`` so a page of another origin (the
client) can show them; everything else is as ``/files`` sends it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from starlette.responses import FileResponse

from .asgi import ApiError
from .files import INLINE_TYPES, find_files, resolve_download, served_as, sign

__all__ = ["MEDIA_PREFIXES", "media_kind", "Links", "add_media_routes"]

MEDIA_PREFIXES = {"image": "images", "audio": "audios", "video": "videos"}
_SUFFIXES = {
    "image": (".png", ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".webp", ".bmp"),
    "audio": (".wav", ".flac", ".mp3", ".ogg"),
    "video": (".mp4", ".webm"),
}
_STAMP = re.compile(r"(?P<exp>\d{1,15})-(?P<sig>[0-9a-f]{32})")


def media_kind(name: str) -> str | None:
    """``"image"``, ``"audio"`` or ``"video"`` by the file's suffix; None for any other file."""
    suffix = Path(name).suffix.lower()
    return next((kind for kind, suffixes in _SUFFIXES.items() if suffix in suffixes), None)


@dataclass(frozen=True)
class Links:
    """How one user's workspace files are named in JARVIS's answers (see the module docstring)."""

    workspace: Path
    folder: str
    secret: bytes
    ttl_s: float = 0.0

    def path(self, name: str, *, clock: Any = time.time) -> str | None:
        """The client's path of the workspace file ``name``, or None when it is not an image, sound or video."""
        kind = media_kind(name)
        if kind is None:
            return None
        expires = int(clock() + self.ttl_s) + 1 if self.ttl_s > 0 else 0
        stamp = f"{expires}-{sign(self.secret, self.folder, name, expires)}"
        return f"/{MEDIA_PREFIXES[kind]}/{quote(self.folder)}/{stamp}/{quote(name)}"

    def files(self, texts: Iterable[str], since: float | None = None) -> list[str]:
        """The media files of the workspace that ``texts`` name (with ``since``: written since then)."""
        return [name for name in find_files(texts, self.workspace, since=since) if media_kind(name)]

    def rewrite(self, text: str) -> str:
        """``text`` with every media file of the workspace it names (relative or absolute) as the client's
        path; nothing else changes."""
        if not isinstance(text, str) or not text:
            return text
        spelled: dict[str, str] = {}
        root = self.workspace.resolve()
        for name in self.files([text]):
            path = self.path(name)
            if path is not None:
                for form in (name, f"./{name}", str(root / name), str(self.workspace / name)):
                    spelled[form] = path
        if not spelled:
            return text
        pattern = "|".join(re.escape(form) for form in sorted(spelled, key=len, reverse=True))
        return re.sub(rf"(?<![\w/.-])(?:{pattern})(?![\w/-])", lambda m: spelled[m.group(0)], text)

    def value(self, value: Any) -> Any:
        """``value`` (text, or JSON: dicts, lists) with :meth:`rewrite` applied to every text in it."""
        if isinstance(value, str):
            return self.rewrite(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value


def _media_file(root: Path, secret: bytes, kind: str, folder: str, stamp: str, name: str) -> Path | None:
    match = _STAMP.fullmatch(stamp)
    if match is None or media_kind(name) != kind:
        return None
    return resolve_download(root, secret, folder, name, match.group("sig"), match.group("exp"))


def add_media_routes(app: Any, state: Any) -> None:
    """``GET /images/...``, ``/audios/...``, ``/videos/...``: the files :meth:`Links.path` names."""

    def serve(kind: str, folder: str, stamp: str, name: str) -> FileResponse:
        settings = state.settings
        path = _media_file(settings.workspace_root, settings.link_secret, kind, folder, stamp, name)
        media_type, headers = served_as(path) if path is not None else ("", {})
        if path is None or media_type not in INLINE_TYPES:
            raise ApiError(404, "no such file, or the link is not valid", code="not_found")
        return FileResponse(path, media_type=media_type,
                            headers={**headers, "Cross-Origin-Resource-Policy": "cross-origin"})

    @app.get("/images/{folder}/{stamp}/{name:path}")
    async def images(folder: str, stamp: str, name: str):
        return serve("image", folder, stamp, name)

    @app.get("/audios/{folder}/{stamp}/{name:path}")
    async def audios(folder: str, stamp: str, name: str):
        return serve("audio", folder, stamp, name)

    @app.get("/videos/{folder}/{stamp}/{name:path}")
    async def videos(folder: str, stamp: str, name: str):
        return serve("video", folder, stamp, name)
