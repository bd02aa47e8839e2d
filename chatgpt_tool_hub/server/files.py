"""Files in and out of the server.

In: the ``image_url`` parts of OpenAI messages (``data:`` URIs, and http(s)
URLs fetched through the SSRF guard of the network tools) are copied into the
user's workspace as ``image/<digest8>.png`` -- named by their content, so an
image a client sends again with every turn (the history) is one file, on every
replica that shares the workspace root.

Out: workspace files a run names (in its answer or its observations) come back
as links ``/files/<user folder>/<path>?sig=...``; the signature (an HMAC of
the folder and path with a key made from the server's keys and workspace
root) is what authorises the download, so chat pages can show the images.
Nothing outside the user's folder is ever served.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import mimetypes
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote, unquote_to_bytes, urljoin

from ..errors import ToolHubError, UserError

__all__ = ["ImageError", "ImagesStopped", "ImageBudget", "ingest_image_url", "find_files", "sign", "signed_path",
           "resolve_download", "IMAGE_SUFFIXES", "Attachment", "attachment_of", "ingest_attachment",
           "DOCUMENT_SUFFIXES"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
_MIME_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/jpg": ".jpg", "image/gif": ".gif",
                "image/webp": ".webp", "image/bmp": ".bmp", "image/tiff": ".tiff"}
_DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[^,;]*)*),(?P<data>.*)", re.S)
_PATHS = re.compile(r"(?<![\w/.-])(/?(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]{1,8})(?![\w/-])")
_MAX_REDIRECTS = 5


class ImageError(UserError):
    """An image part that cannot be used; the message says why (HTTP 400)."""


class ImagesStopped(ImageError):
    """Reading a request's images was stopped: ``reason`` is ``"cancelled"`` (the client went away) or
    ``"deadline"`` (the request's time is up)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class ImageBudget:
    """What reading one request's images may still cost: decoded pixels (``serve_max_image_pixels``), time
    (a ``time.monotonic()`` deadline) and a cancel (a :class:`~chatgpt_tool_hub.runtime.contained.Cancellation`)."""

    def __init__(self, max_pixels: int, *, cancellation: Any = None, deadline: float | None = None):
        self.max_pixels = self.left = int(max_pixels)
        self.cancellation, self.deadline = cancellation, deadline

    def seconds(self, most: float) -> float:
        """Seconds the next step may take (at most ``most``); :class:`ImagesStopped` when none are left."""
        self.check()
        return most if self.deadline is None else min(most, self.deadline - time.monotonic())

    def check(self) -> None:
        """:class:`ImagesStopped` when the request was cancelled or its deadline has passed."""
        if self.cancellation is not None and self.cancellation.cancelled:
            raise ImagesStopped("the request was cancelled while its images were read", "cancelled")
        if self.deadline is not None and self.deadline <= time.monotonic():
            raise ImagesStopped("reading the request's images took longer than the request may take "
                                "(serve_request_timeout_s)", "deadline")


# ---- files in: documents and audio ---------------------------------------------------------------

# what the document tools read (read-document, document-qa, summary), by file name
DOCUMENT_SUFFIXES = (".pdf", ".docx", ".html", ".htm", ".xhtml", ".md", ".markdown", ".txt", ".rst", ".csv", ".log",
                     ".json", ".xml", ".yaml", ".yml")
_MIME_DOCUMENT = {"application/pdf": ".pdf", "text/plain": ".txt", "text/markdown": ".md", "text/html": ".html",
                  "text/csv": ".csv", "application/json": ".json",
                  "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx"}


@dataclass(frozen=True)
class Attachment:
    """A file a message carries: ``kind`` ``"document"`` (OpenAI's ``file`` part) or ``"audio"``
    (``input_audio``), its bytes as sent (base64, or a ``data:`` URI) and its name's suffix."""

    kind: str
    data: str
    suffix: str


def attachment_of(part: Any, where: str) -> Attachment:
    """The :class:`Attachment` of a ``file`` or ``input_audio`` content part (HTTP 400 with the reason when
    it cannot be used: a ``file_id`` of OpenAI's file store, a type the tools cannot read)."""
    from .asgi import ApiError

    if part.get("type") == "input_audio":
        audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
        form = str(audio.get("format") or "").lower()
        if form not in ("wav", "wave"):
            raise ApiError(400, f"{where}: input_audio must be WAV (format 'wav'), not {form or 'no format'!r}: the "
                                f"speech tools read 16-bit PCM WAV", code="invalid_audio", param="messages")
        if not isinstance(audio.get("data"), str) or not audio["data"]:
            raise ApiError(400, f"{where}: an input_audio part needs input_audio.data (base64)", code="invalid_audio", param="messages")
        return Attachment("audio", audio["data"], ".wav")
    file = part.get("file") if isinstance(part.get("file"), dict) else {}
    if file.get("file_id") and not file.get("file_data"):
        raise ApiError(400, f"{where}: this server keeps no uploaded files: send the file itself as "
                            f"file.file_data (a data: URI or base64) with file.filename", code="invalid_file", param="messages")
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        raise ApiError(400, f"{where}: a file part needs file.file_data (a data: URI or base64)", code="invalid_file", param="messages")
    suffix = Path(str(file.get("filename") or "")).suffix.lower()
    if not suffix:
        match = _DATA_URI.match(data.strip())
        suffix = _MIME_DOCUMENT.get((match.group("mime") or "").lower(), "") if match else ""
    if suffix not in DOCUMENT_SUFFIXES:
        raise ApiError(400, f"{where}: the document tools read {', '.join(DOCUMENT_SUFFIXES)} files; this file is "
                            f"{suffix or 'of no known type'} (give file.filename with its suffix)", code="invalid_file", param="messages")
    return Attachment("document", data, suffix)


def ingest_attachment(attachment: Attachment, workspace: Path, *, budget: ImageBudget | None = None) -> tuple[str, str]:
    """Copy a document or audio file into ``workspace``: ``(kind, workspace-relative name)``. A document is kept
    as it came, named by its content (``document/<digest8><suffix>``: sent again, it is one file); audio is
    checked in a contained child like a handed WAV file (``audio/<uuid8>.wav``)."""
    if budget is not None:
        budget.check()
    text = attachment.data.strip()
    if text.lower().startswith("data:"):
        data, _ = _decode_data_uri(text, len(text))
    else:
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ImageError(f"a {attachment.kind} part's data is neither a data: URI nor valid base64") from None
    if attachment.kind == "audio":
        from ..errors import ModelFeedbackError
        from ..runtime.contained import ContainedError
        from ..runtime.filenames import ingest_audio

        with tempfile.TemporaryDirectory(prefix="tool-hub-upload-") as folder:
            source = Path(folder) / "upload.wav"
            source.write_bytes(data)
            try:
                return "audio", ingest_audio(source, workspace,
                                             cancellation=budget.cancellation if budget is not None else None)
            except (ModelFeedbackError, ContainedError) as exc:
                raise ImageError(f"the audio cannot be used: {exc}") from None
    name = f"document/{hashlib.sha256(data).hexdigest()[:8]}{attachment.suffix}"
    target = workspace / name
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return "document", name


# ---- images in --------------------------------------------------------------------------------


def _decode_data_uri(url: str, max_bytes: int) -> tuple[bytes, str]:
    match = _DATA_URI.fullmatch(url.strip())
    if not match:
        raise ImageError("an image_url data URI must look like data:image/png;base64,...")
    if len(match.group("data")) > max_bytes * 4 // 3 + 4:
        raise ImageError(f"an image is larger than serve_max_body_bytes ({max_bytes} bytes)")
    mime = (match.group("mime") or "").lower()
    try:
        if ";base64" in (match.group("params") or "").lower():
            data = base64.b64decode(match.group("data"), validate=False)
        else:
            data = unquote_to_bytes(match.group("data"))
    except (binascii.Error, ValueError):
        raise ImageError("an image_url data URI is not valid base64") from None
    return data, mime


def _fetch(url: str, max_bytes: int, allow_private: bool, timeout: float = 15.0) -> tuple[bytes, str]:
    """GET an image through the SSRF guard: every hop checked and pinned, the whole fetch bounded."""
    from ..runtime.netguard import check_url, pinned_session

    session = pinned_session()
    try:
        with session.deadline(timeout * 2):
            current = url
            for _ in range(_MAX_REDIRECTS + 1):
                checked = session.pin(check_url(current, allow_private))
                response = session.get(checked.url, stream=True, allow_redirects=False, timeout=(timeout, timeout),
                                       headers={"Accept": "image/*"})
                location = response.headers.get("Location") if response.status_code in (301, 302, 303, 307,
                                                                                         308) else None
                if location:
                    response.close()
                    current = urljoin(checked.url, location.strip())
                    continue
                if response.status_code >= 400:
                    response.close()
                    raise ImageError(f"the image URL {checked.url} answered HTTP {response.status_code}")
                chunks, total = [], 0
                for chunk in response.iter_content(65536):
                    total += len(chunk)
                    if total > max_bytes:
                        response.close()
                        raise ImageError(f"the image at {checked.url} is larger than serve_max_body_bytes "
                                         f"({max_bytes} bytes)")
                    chunks.append(chunk)
                mime = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
                response.close()
                return b"".join(chunks), mime
            raise ImageError(f"the image URL {url} redirected more than {_MAX_REDIRECTS} times")
    except ImageError:
        raise
    except ToolHubError as exc:  # refused by the guard (a private address ...), or unresolvable
        raise ImageError(f"the image URL was not fetched: {exc}") from None
    except OSError as exc:  # requests' errors are OSErrors
        raise ImageError(f"the image URL could not be fetched: {type(exc).__name__}") from None
    finally:
        session.close()


def ingest_image_url(url: str, workspace: Path, *, max_bytes: int, allow_private: bool = False,
                     budget: ImageBudget | None = None) -> str:
    """Copy the image at ``url`` (``data:`` or http(s)) into ``workspace``; its workspace-relative name.

    The image is decoded in a contained child process
    (:func:`chatgpt_tool_hub.runtime.filenames.ingest_image_sized`), refused
    before decoding when it has more pixels than ``budget`` has left, and
    stopped by its cancel and deadline (:class:`ImagesStopped`); an image
    already in the workspace costs nothing.
    """
    from ..runtime.contained import ContainedError
    from ..runtime.filenames import INGEST_TIMEOUT_S, MAX_INPUT_PIXELS, ingest_image_sized

    budget = budget or ImageBudget(MAX_INPUT_PIXELS)
    budget.check()
    if not isinstance(url, str) or not url.strip():
        raise ImageError("an image_url part needs a url")
    if url.strip().lower().startswith("data:"):
        data, mime = _decode_data_uri(url, max_bytes)
    elif url.strip().lower().startswith(("http://", "https://")):
        data, mime = _fetch(url.strip(), max_bytes, allow_private, budget.seconds(15.0))
    else:
        raise ImageError("an image_url must be a data: URI or an http(s) URL")
    digest = hashlib.sha256(data).hexdigest()[:8]
    name = f"image/{digest}.png"
    if (workspace / name).is_file():  # sent before (the history carries it every turn)
        return name
    if budget.left <= 0:
        raise ImageError(f"the images of this request hold more than {budget.max_pixels} pixels in all "
                         f"(serve_max_image_pixels); send fewer or smaller images")
    suffix = _MIME_SUFFIX.get(mime, ".png")
    timeout = budget.seconds(INGEST_TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="tool-hub-upload-") as folder:
        source = Path(folder) / f"upload{suffix}"
        source.write_bytes(data)
        try:
            made, pixels = ingest_image_sized(source, workspace, max_pixels=budget.left,
                                              why="of this request's serve_max_image_pixels",
                                              timeout=timeout,
                                              cancellation=budget.cancellation)
        except ContainedError as exc:
            if exc.limit in ("wall", "cancelled"):
                budget.check()  # the request's deadline or cancel: ImagesStopped
            raise ImageError(f"an image could not be read: {str(exc).replace(str(source), 'the image')}") from None
        except ToolHubError as exc:  # not an image, too many pixels, Pillow missing
            raise ImageError(f"an image could not be read: {str(exc).replace(str(source), 'the image')}") from None
    budget.left -= pixels
    os.replace(workspace / made, workspace / name)
    return name


# ---- files out ----------------------------------------------------------------------------------


def find_files(texts: Iterable[str], workspace: Path, *, since: float | None = None) -> list[str]:
    """Workspace-relative names of the files ``texts`` name that exist in ``workspace`` (absolute paths
    inside it count too); with ``since``, only files written since then (the run's own)."""
    root = workspace.resolve()
    found: list[str] = []
    for text in texts:
        for candidate in _PATHS.findall(text or ""):
            path = Path(candidate)
            target = path if path.is_absolute() else root / path
            try:
                target = target.resolve()
                relative = target.relative_to(root)
            except (OSError, ValueError):
                continue
            name = relative.as_posix()
            if name in found or not target.is_file():
                continue
            if since is not None and target.stat().st_mtime < since - 1:
                continue
            found.append(name)
    return found


def sign(secret: bytes, folder: str, name: str, expires: int = 0) -> str:
    """The signature of a link to ``folder/name`` valid until ``expires`` (Unix seconds; 0: never)."""
    message = f"{folder}/{name}\0{int(expires)}".encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]


def signed_path(secret: bytes, folder: str, name: str, ttl_s: float = 0.0, *, clock=time.time) -> str:
    """``/files/<folder>/<name>?exp=...&sig=...``: valid for ``ttl_s`` seconds (0: for ever)."""
    expires = int(clock() + ttl_s) + 1 if ttl_s and ttl_s > 0 else 0
    return f"/files/{quote(folder)}/{quote(name)}?exp={expires}&sig={sign(secret, folder, name, expires)}"


def resolve_download(root: Path, secret: bytes, folder: str, name: str, sig: str | None, exp: str | None = None,
                     *, clock=time.time) -> Path | None:
    """The file a link names, when its signature is right, it has not expired and it lies inside the user's
    folder; else None (any malformed part is simply not a valid link)."""
    if not sig or not sig.isascii() or not sig.isalnum() or len(sig) != 32:
        return None
    expires = int(exp) if exp is not None and exp.isascii() and exp.isdigit() and len(exp) < 16 else None
    if expires is None or not hmac.compare_digest(sign(secret, folder, name, expires).encode(), sig.encode()):
        return None
    if expires and clock() > expires:
        return None
    if "/" in folder or folder in ("", ".", "..") or "\0" in name:
        return None
    base = (root / folder).resolve()
    try:
        target = (base / name).resolve()
        target.relative_to(base)
    except (OSError, ValueError):
        return None
    try:
        info = target.stat()
    except OSError:
        return None
    # a hard link can name another user's file from inside this folder (the file tools refuse them too)
    return target if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 else None


# served inline: media the page and chat UIs show; everything else (HTML, SVG, XML, scripts ...) is a download,
# so a file a user's code wrote can never run as a page of this server's origin
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "audio/wav",
                          "audio/x-wav", "audio/mpeg", "audio/ogg", "audio/flac", "video/mp4", "video/webm",
                          "text/plain", "application/pdf"})
DOWNLOAD_HEADERS = {"X-Content-Type-Options": "nosniff",
                    "Content-Security-Policy": "default-src 'none'; img-src 'self'; media-src 'self'; sandbox",
                    "Cross-Origin-Resource-Policy": "same-origin"}


# passive media: a page of any origin may embed them (<img>, <audio>, <video>): a signed link is a capability,
# whoever holds it may show the file, as a chat UI on another origin does with the links in its answers
EMBEDDABLE_PREFIXES = ("image/", "audio/", "video/")


def served_as(path: Path) -> tuple[str, dict[str, str]]:
    """``(media type, headers)`` of a file sent by ``/files``: inline only for :data:`INLINE_TYPES`, and
    embeddable by pages of other origins (``Cross-Origin-Resource-Policy: cross-origin``) only when it is
    passive media (an image, audio, video)."""
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind in INLINE_TYPES:
        if kind.startswith(EMBEDDABLE_PREFIXES):
            return kind, {**DOWNLOAD_HEADERS, "Cross-Origin-Resource-Policy": "cross-origin"}
        return kind, dict(DOWNLOAD_HEADERS)
    return "application/octet-stream", {**DOWNLOAD_HEADERS,
                                        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(path.name)}"}


def now() -> float:
    return time.time()
