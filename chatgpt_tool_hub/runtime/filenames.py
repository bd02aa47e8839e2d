"""Visual ChatGPT's file discipline, inside the workspace.

* Inputs are copied to ``image/{uuid8}.png`` (RGB, long side ≤ 512, aspect
  kept) or ``audio/{uuid8}.wav``.
* Outputs are named ``{uuid8}_{op}_{prev}_{org}.{ext}`` beside their input:
  ``prev`` is the uuid of the file the operation read and ``org`` the original
  upload, so the chain of operations can be read from the name. For
  ``image/abcd1234.png`` and op ``detect`` the output is
  ``image/{new}_detect_abcd1234_abcd1234.png``; a second op on that output
  gives ``image/{newer}_{op2}_{new}_abcd1234.png``.
* A tool only reads files inside the workspace that exist
  (:func:`resolve_input`); paths are given and returned relative to it.

WAV is read and written with the standard ``wave`` module (16-bit PCM), so no
ffmpeg is needed.

Files handed in (a path) are untrusted bytes: :func:`ingest_image` and
:func:`ingest_audio` decode them in a contained child process
(:func:`~chatgpt_tool_hub.runtime.contained.run_contained`: a wall limit of
``INGEST_TIMEOUT_S``, ``INGEST_MEMORY_MB`` of address space, killed on a
cancel), and an image's pixels are counted from its header, before anything is
decoded: at most ``MAX_INPUT_PIXELS`` (or fewer, ``max_pixels``).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
import wave
from pathlib import Path
from typing import Any

from ..errors import ToolExecutionError, ToolInputError

__all__ = ["MAX_IMAGE_SIDE", "MAX_INPUT_PIXELS", "IMAGE_FORMATS", "INGEST_TIMEOUT_S", "INGEST_MEMORY_MB",
           "check_pixels", "new_uuid", "ingest_image", "ingest_image_sized", "ingest_audio", "output_path", "new_path",
           "resolve_input", "relative", "read_wav", "write_wav"]

MAX_IMAGE_SIDE = 512
MAX_INPUT_PIXELS = 40_000_000  # about 120 MB decoded as RGB; larger inputs are refused before decoding
INGEST_TIMEOUT_S = 60.0  # wall seconds to decode one file handed in (its child process is killed past them)
INGEST_MEMORY_MB = 1536  # address space of that child: a 40-megapixel image decodes in well under it
# Pillow formats an input image may have, whatever its name says; never EPS/PS (they run Ghostscript)
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF")
_FOLDERS = {"image": "image", "audio": "audio", "video": "video"}


def new_uuid() -> str:
    return uuid.uuid4().hex[:8]


def _workspace(workspace: str | os.PathLike) -> Path:
    root = Path(workspace).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def relative(path: str | os.PathLike, workspace: str | os.PathLike) -> str:
    """``path`` relative to the workspace, with ``/`` separators (what observations show)."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(workspace))
    return rel.replace(os.sep, "/")


def new_path(workspace: str | os.PathLike, kind: str, ext: str) -> str:
    """A fresh ``{kind}/{uuid8}.{ext}`` inside the workspace, relative to it (for outputs with no input file)."""
    folder = _workspace(workspace) / _FOLDERS.get(kind, kind)
    folder.mkdir(parents=True, exist_ok=True)
    return f"{_FOLDERS.get(kind, kind)}/{new_uuid()}.{ext.lstrip('.')}"


def check_pixels(image: Any, name: Any = "the image", limit: int | None = None, why: str = "") -> None:
    """``ToolInputError`` when an opened (not yet decoded) image has more than ``limit`` pixels
    (default ``MAX_INPUT_PIXELS``; ``why`` names a smaller limit's setting in the message)."""
    limit = MAX_INPUT_PIXELS if limit is None else limit
    width, height = image.size
    if width * height > limit:
        if why:
            raise ToolInputError(f"file '{name}' is {width}x{height} pixels, more than the {limit} pixels left "
                                 f"{why}; it was not decoded")
        raise ToolInputError(f"file '{name}' is {width}x{height} pixels; images of at most {limit} "
                             f"pixels are read (a decompression bomb would exhaust memory)")


def ingest_image(path: str | os.PathLike | Any, workspace: str | os.PathLike, *, cancellation: Any = None) -> str:
    """Copy an image (a path or a PIL image) into ``image/{uuid8}.png``; returns the path relative to the workspace.

    A path is decoded in a contained child (:func:`ingest_image_sized`); a PIL
    image, already decoded by the caller, here.
    """
    from PIL import Image

    if isinstance(path, (str, os.PathLike)):
        return ingest_image_sized(path, workspace, cancellation=cancellation)[0]
    root = _workspace(workspace)
    (root / "image").mkdir(exist_ok=True)
    name = f"image/{new_uuid()}.png"
    _shrink(path.convert("RGB"), Image).save(root / name, "PNG")
    return name


def ingest_image_sized(path: str | os.PathLike, workspace: str | os.PathLike, *, max_pixels: int = MAX_INPUT_PIXELS,
                       why: str = "", timeout: float = INGEST_TIMEOUT_S, memory_mb: int = INGEST_MEMORY_MB,
                       cancellation: Any = None) -> tuple[str, int]:
    """Decode the image file ``path`` in a contained child into ``image/{uuid8}.png``: ``(its name, the pixels
    decoded)``.

    The image is refused before decoding when it has more than ``max_pixels``
    pixels (at most ``MAX_INPUT_PIXELS``; ``why`` names the setting of a
    smaller limit), and its child is killed past ``timeout`` seconds,
    ``memory_mb`` MiB or on ``cancellation`` (a ``ContainedError``).
    """
    from .contained import run_contained

    root = _workspace(workspace)
    (root / "image").mkdir(exist_ok=True)
    name = f"image/{new_uuid()}.png"
    target = root / name
    limit = min(int(max_pixels), MAX_INPUT_PIXELS)
    # the child works in a folder of its own: the source by its absolute path, its name as given in messages
    payload = {"source": os.path.abspath(path), "name": os.fspath(path), "target": str(target),
               "max_pixels": limit, "why": why if limit < MAX_INPUT_PIXELS else ""}
    try:
        pixels = run_contained("chatgpt_tool_hub.runtime.filenames:decode_image", payload, wall_s=timeout,
                               memory_mb=memory_mb, cancel=cancellation, what=f"decoding the image '{path}'")
    except BaseException:
        for leftover in (target, target.with_name(target.name + ".part")):
            leftover.unlink(missing_ok=True)
        raise
    return name, int(pixels)


def decode_image(payload: dict) -> int:
    """In the contained child: ``payload["source"]`` as an RGB PNG, long side at most ``MAX_IMAGE_SIDE``, at
    ``payload["target"]``; the pixels of the original. Refused before decoding past ``payload["max_pixels"]``."""
    try:
        from PIL import Image
    except ImportError:
        raise ToolExecutionError('images need Pillow: pip install "chatgpt-tool-hub[images]"') from None
    source, name, limit = payload["source"], payload.get("name", payload["source"]), int(payload["max_pixels"])
    Image.MAX_IMAGE_PIXELS = MAX_INPUT_PIXELS  # Pillow's own check (at twice that), for what it reads itself
    try:
        with Image.open(source, formats=IMAGE_FORMATS) as opened:  # no EPS (Ghostscript) and the like
            check_pixels(opened, name, limit, payload.get("why", ""))  # before decoding: a 400 KB PNG can
            width, height = opened.size                               # hold 1 GB of pixels
            image = opened.convert("RGB")
    except FileNotFoundError:
        raise ToolInputError(f"file '{name}' does not exist") from None
    except (OSError, Image.DecompressionBombError) as exc:
        raise ToolInputError(f"file '{name}' is not an image this tool can read: {exc}") from None
    part = payload["target"] + ".part"
    _shrink(image, Image).save(part, "PNG")
    os.replace(part, payload["target"])  # a child killed while writing leaves no half image under the name
    return width * height


def _shrink(image: Any, pil: Any) -> Any:
    """``image`` with its long side at most ``MAX_IMAGE_SIDE`` (aspect kept)."""
    width, height = image.size
    scale = MAX_IMAGE_SIDE / max(width, height)
    if scale < 1:
        image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))),
                             pil.Resampling.LANCZOS)
    return image


def ingest_audio(source: str | os.PathLike | Any, workspace: str | os.PathLike,
                 sampling_rate: int | None = None, *, cancellation: Any = None) -> str:
    """Copy a WAV file, or write a numpy array (float in [-1, 1] or int16), to ``audio/{uuid8}.wav``.

    Arrays need ``sampling_rate``. A file is checked in a contained child
    first (:func:`check_wav`). Returns the path relative to the workspace.
    """
    root = _workspace(workspace)
    (root / "audio").mkdir(exist_ok=True)
    name = f"audio/{new_uuid()}.wav"
    if isinstance(source, (str, os.PathLike)):
        from .contained import run_contained

        if not os.path.isfile(source):
            raise ToolInputError(f"file '{source}' does not exist")
        run_contained("chatgpt_tool_hub.runtime.filenames:check_wav", (os.path.abspath(source), os.fspath(source)),
                      wall_s=INGEST_TIMEOUT_S, memory_mb=INGEST_MEMORY_MB, cancel=cancellation,
                      what=f"reading the audio file '{source}'")
        shutil.copyfile(source, root / name)
    else:
        if not sampling_rate:
            raise ToolInputError("ingest_audio needs sampling_rate when given an array")
        write_wav(root / name, source, int(sampling_rate))
    return name


def check_wav(source: tuple[str, str]) -> tuple[int, int, int]:
    """In the contained child: ``(channels, sampling rate, frames)`` of the WAV file at ``source[0]`` (an
    absolute path; ``source[1]`` is its name in messages), or ``ToolInputError`` when it is not one."""
    path, name = source
    try:
        with wave.open(path, "rb") as wav:
            return wav.getnchannels(), wav.getframerate(), wav.getnframes()
    except (wave.Error, EOFError) as exc:
        raise ToolInputError(f"file '{name}' is not a WAV file ({exc}); convert it to WAV first") from None


def write_wav(path: str | os.PathLike, samples: Any, sampling_rate: int) -> None:
    """Write mono or (frames, channels) samples as 16-bit PCM WAV."""
    import numpy as np

    data = np.asarray(samples)
    if data.ndim == 2 and data.shape[0] < data.shape[1] and data.shape[0] <= 8:
        data = data.T  # (channels, frames) -> (frames, channels)
    if data.dtype.kind == "f":
        data = (np.clip(data, -1.0, 1.0) * 32767).astype("<i2")
    elif data.dtype != np.dtype("<i2"):
        data = data.astype("<i2")
    channels = 1 if data.ndim == 1 else data.shape[1]
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(int(sampling_rate))
        out.writeframes(np.ascontiguousarray(data).tobytes())


def read_wav(path: str | os.PathLike) -> tuple[Any, int]:
    """``(float32 mono samples in [-1, 1], sampling_rate)`` from an 8/16/32-bit PCM WAV."""
    import numpy as np

    with wave.open(str(path), "rb") as src:
        rate, width, channels = src.getframerate(), src.getsampwidth(), src.getnchannels()
        raw = src.readframes(src.getnframes())
    data: np.ndarray
    if width == 1:
        data = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128) / 128
    elif width in (2, 4):
        dtype = "<i2" if width == 2 else "<i4"
        data = np.frombuffer(raw, dtype=dtype).astype(np.float32) / float(2 ** (8 * width - 1))
    elif width == 3:  # 24-bit: three little-endian bytes per sample, sign-extended
        triples = np.frombuffer(raw[: len(raw) - len(raw) % 3], dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        data = (np.where(ints >= 1 << 23, ints - (1 << 24), ints)).astype(np.float32) / float(1 << 23)
    else:
        raise ToolInputError(f"file '{os.path.basename(str(path))}' uses {8 * width}-bit samples; 8, 16, 24 and "
                             f"32-bit PCM WAV are read: convert it to 16-bit PCM WAV first")
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    return data, rate


_OP = re.compile(r"[^A-Za-z0-9-]+")


def output_path(input_path: str, op: str, ext: str = "png") -> str:
    """The chained output name for ``op`` applied to ``input_path``, in the same folder.

    ``image/abcd1234.png`` + ``detect`` → ``image/{new}_detect_abcd1234_abcd1234.png``;
    ``image/{u}_{op}_{prev}_{org}.png`` + ``op2`` → ``image/{new}_{op2}_{u}_{org}.png``.
    A name that follows neither form counts as an original (its stem, ``_`` → ``-``).
    """
    head, tail = os.path.split(input_path)
    stem = tail.rsplit(".", 1)[0] if "." in tail else tail
    parts = stem.split("_")
    if len(parts) == 4 and all(parts):
        prev, org = parts[0], parts[3]
    else:
        prev = org = _OP.sub("-", stem).strip("-") or "file"
    op = _OP.sub("-", op).strip("-") or "op"
    name = f"{new_uuid()}_{op}_{prev}_{org}.{ext.lstrip('.')}"
    return f"{head}/{name}" if head else name


_EXAMPLES = {"image": "image/1a2b3c4d.png", "audio": "audio/1a2b3c4d.wav", "video": "video/1a2b3c4d.mp4"}


def resolve_input(path: Any, workspace: str | os.PathLike, kind: str = "file") -> str:
    """The absolute path of an existing file inside the workspace, or ``ToolInputError``.

    ``path`` is relative to the workspace (an absolute path must lie inside it).
    A path relative to the current folder is accepted when it lies inside the
    workspace (``workspace/image/x.png``). Escapes (``..``, symlinks out, hard
    links that may name a file outside) are refused.
    """
    text = str(path or "").strip().strip("'\"`").strip()
    if not text:
        raise ToolInputError(f"this tool needs the path of the {kind} file from an earlier observation, "
                             f"e.g. {_EXAMPLES.get(kind, 'files/report.pdf')}")
    if re.match(r"(?i)^(?:https?|ftp)://", text):
        raise ToolInputError(f"'{text[:200]}' is a URL; this tool reads files in the workspace only: have the "
                             f"user hand the {kind} over, or download it into the workspace first")
    root = os.path.realpath(_workspace(workspace))
    if "\0" in text:  # no file has such a name (and os.path would raise ValueError on it)
        raise ToolInputError(f"file {text!r} does not exist; use a file name from an earlier observation, "
                             f"never invent one")
    candidate = os.path.realpath(os.path.join(root, os.path.expanduser(text)))
    if not os.path.isfile(candidate) and not os.path.isabs(text):
        # "workspace/image/x.png": a path relative to the current folder that lies inside the workspace
        from_cwd = os.path.realpath(text)
        if os.path.isfile(from_cwd) and os.path.commonpath([root, from_cwd]) == root:
            candidate = from_cwd
    if os.path.commonpath([root, candidate]) != root:
        raise ToolInputError(f"file '{text}' is outside the workspace; use a file name from an earlier "
                             f"observation, never invent one")
    if not os.path.isfile(candidate):
        raise ToolInputError(f"file '{text}' does not exist; use a file name from an earlier observation, "
                             f"never invent one")
    if os.stat(candidate).st_nlink > 1:  # another name of the same file may lie outside the workspace
        raise ToolInputError(f"file '{text}' has other hard links, which may be names of a file outside the "
                             f"workspace; use a file name from an earlier observation")
    return candidate
