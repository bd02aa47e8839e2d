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
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
import wave
from pathlib import Path
from typing import Any

from ..errors import ToolInputError

__all__ = ["MAX_IMAGE_SIDE", "MAX_INPUT_PIXELS", "IMAGE_FORMATS", "check_pixels", "new_uuid", "ingest_image",
           "ingest_audio", "output_path", "new_path", "resolve_input", "relative", "read_wav", "write_wav"]

MAX_IMAGE_SIDE = 512
MAX_INPUT_PIXELS = 40_000_000  # about 120 MB decoded as RGB; larger inputs are refused before decoding
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


def check_pixels(image: Any, name: Any = "the image") -> None:
    """``ToolInputError`` when an opened (not yet decoded) image has more than ``MAX_INPUT_PIXELS`` pixels."""
    width, height = image.size
    if width * height > MAX_INPUT_PIXELS:
        raise ToolInputError(f"file '{name}' is {width}x{height} pixels; images of at most {MAX_INPUT_PIXELS} "
                             f"pixels are read (a decompression bomb would exhaust memory)")


def ingest_image(path: str | os.PathLike | Any, workspace: str | os.PathLike) -> str:
    """Copy an image (a path or a PIL image) into ``image/{uuid8}.png``; returns the path relative to the workspace."""
    from PIL import Image

    root = _workspace(workspace)
    if isinstance(path, (str, os.PathLike)):
        try:
            with Image.open(path, formats=IMAGE_FORMATS) as opened:  # no EPS (Ghostscript) and the like
                check_pixels(opened, path)  # before decoding: a 400 KB PNG can hold 1 GB of pixels
                image = opened.convert("RGB")
        except FileNotFoundError:
            raise ToolInputError(f"file '{path}' does not exist") from None
        except (OSError, Image.DecompressionBombError) as exc:
            raise ToolInputError(f"file '{path}' is not an image this tool can read: {exc}") from None
    else:
        image = path.convert("RGB")
    width, height = image.size
    scale = MAX_IMAGE_SIDE / max(width, height)
    if scale < 1:
        image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))),
                             Image.Resampling.LANCZOS)
    (root / "image").mkdir(exist_ok=True)
    name = f"image/{new_uuid()}.png"
    image.save(root / name, "PNG")
    return name


def ingest_audio(source: str | os.PathLike | Any, workspace: str | os.PathLike,
                 sampling_rate: int | None = None) -> str:
    """Copy a WAV file, or write a numpy array (float in [-1, 1] or int16), to ``audio/{uuid8}.wav``.

    Arrays need ``sampling_rate``. Returns the path relative to the workspace.
    """
    root = _workspace(workspace)
    (root / "audio").mkdir(exist_ok=True)
    name = f"audio/{new_uuid()}.wav"
    if isinstance(source, (str, os.PathLike)):
        if not os.path.isfile(source):
            raise ToolInputError(f"file '{source}' does not exist")
        try:
            with wave.open(str(source), "rb"):
                pass
        except (wave.Error, EOFError) as exc:
            raise ToolInputError(f"file '{source}' is not a WAV file ({exc}); convert it to WAV first") from None
        shutil.copyfile(source, root / name)
    else:
        if not sampling_rate:
            raise ToolInputError("ingest_audio needs sampling_rate when given an array")
        write_wav(root / name, source, int(sampling_rate))
    return name


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
