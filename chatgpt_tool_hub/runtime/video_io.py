"""Video files for expert tools: frames in and out, GIF through Pillow, MP4 (and other containers) through PyAV.

A generated video is written as GIF (Pillow, always available with the
``experts`` extra) or, when the tool asks for ``mp4`` and PyAV is installed
(``pip install "chatgpt-tool-hub[video]"``), as H.264 MP4. Reading takes GIF
(and other animated images Pillow reads) without PyAV and any container PyAV
reads (MP4, WebM, AVI, MOV, MKV) with it. Frames are RGB ``PIL.Image`` objects;
reading is bounded: at most ``max_frames`` frames are kept, sampled evenly
over the whole video, and a file with more than ``MAX_DECODED_FRAMES`` frames
or larger than ``MAX_PIXELS`` per frame is refused before it is decoded whole.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ..errors import ToolInputError, UserError

__all__ = ["read_frames", "write_video", "video_info", "VIDEO_HINT", "GIF_EXTENSIONS", "MAX_DECODED_FRAMES",
           "MAX_PIXELS"]

VIDEO_HINT = 'pip install "chatgpt-tool-hub[video]"'
GIF_EXTENSIONS = (".gif", ".webp", ".png", ".apng")
MAX_DECODED_FRAMES = 20_000
MAX_PIXELS = 4096 * 4096


def _import_av() -> Any:
    try:
        import av
    except ImportError as exc:
        raise UserError(f"this video needs PyAV, which is not installed ({exc.name or exc}): {VIDEO_HINT}; "
                        f"GIF files work without it") from exc
    return av


def _evenly(count: int, wanted: int) -> list[int]:
    """``wanted`` frame indices spread evenly over ``count`` frames (all of them when there are fewer)."""
    if count <= wanted:
        return list(range(count))
    return sorted({round(i * (count - 1) / max(1, wanted - 1)) for i in range(wanted)})


def read_frames(path: str | os.PathLike, max_frames: int = 16) -> list[Any]:
    """Up to ``max_frames`` RGB frames of a video file, sampled evenly; ``ToolInputError`` when it is not a video."""
    name = os.path.basename(os.fspath(path))
    if os.fspath(path).lower().endswith(GIF_EXTENSIONS):
        return _read_animated(path, name, max_frames)
    av = _import_av()
    try:
        with av.open(os.fspath(path)) as container:
            stream = next((s for s in container.streams if s.type == "video"), None)
            if stream is None:
                raise ToolInputError(f"'{name}' has no video stream")
            if stream.codec_context.width * stream.codec_context.height > MAX_PIXELS:
                raise ToolInputError(f"'{name}' has frames larger than {MAX_PIXELS} pixels; it was not decoded")
            total = stream.frames or 0
            if total > MAX_DECODED_FRAMES:
                raise ToolInputError(f"'{name}' has {total} frames, more than {MAX_DECODED_FRAMES}; cut it first")
            frames = []
            for index, frame in enumerate(container.decode(stream)):
                if index >= MAX_DECODED_FRAMES:
                    raise ToolInputError(f"'{name}' has more than {MAX_DECODED_FRAMES} frames; cut it first")
                frames.append(frame.to_image().convert("RGB"))
                if len(frames) > 4 * max_frames:  # keep memory bounded: thin out as we go
                    frames = [frames[i] for i in _evenly(len(frames), 2 * max_frames)]
    except (ToolInputError, UserError):
        raise
    except Exception as exc:  # PyAV raises its own error types for damaged or unknown files
        raise ToolInputError(f"'{name}' is not a video this tool can read ({type(exc).__name__})") from None
    if not frames:
        raise ToolInputError(f"'{name}' holds no frames")
    return [frames[i] for i in _evenly(len(frames), max_frames)]


def _read_animated(path: str | os.PathLike, name: str, max_frames: int) -> list[Any]:
    from PIL import Image, ImageSequence, UnidentifiedImageError

    from .filenames import check_pixels

    try:
        with Image.open(path) as image:
            check_pixels(image, name)
            count = getattr(image, "n_frames", 1)
            if count > MAX_DECODED_FRAMES:
                raise ToolInputError(f"'{name}' has {count} frames, more than {MAX_DECODED_FRAMES}; cut it first")
            wanted = set(_evenly(count, max_frames))
            return [frame.convert("RGB") for i, frame in enumerate(ImageSequence.Iterator(image)) if i in wanted]
    except (UnidentifiedImageError, OSError) as exc:
        raise ToolInputError(f"'{name}' is not a video this tool can read ({type(exc).__name__})") from None


def write_video(frames: Sequence[Any], path: str | os.PathLike, fps: float = 8.0) -> str:
    """Write RGB frames (PIL images or ``HxWx3`` uint8 arrays) to ``path`` (``.gif``, or ``.mp4`` with PyAV)."""
    images = [_as_image(frame) for frame in frames]
    if not images:
        raise ValueError("no frames to write")
    target = os.fspath(path)
    if target.lower().endswith(".gif"):
        duration = max(20, int(round(1000 / max(fps, 0.1))))
        images[0].save(target, save_all=True, append_images=images[1:], duration=duration, loop=0)
        return target
    av = _import_av()
    width, height = (images[0].width // 2) * 2, (images[0].height // 2) * 2  # yuv420p needs even sizes
    with av.open(target, "w") as container:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        stream = container.add_stream(codec, rate=max(1, int(round(fps))))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for image in images:
            frame = av.VideoFrame.from_image(image.resize((width, height)) if image.size != (width, height)
                                             else image)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return target


def video_info(path: str | os.PathLike) -> dict[str, Any]:
    """``{"frames": n, "width": w, "height": h}`` of a written or read video (for observations and tests)."""
    frames = read_frames(path, max_frames=MAX_DECODED_FRAMES)
    return {"frames": len(frames), "width": frames[0].width, "height": frames[0].height}


def _as_image(frame: Any) -> Any:
    from PIL import Image

    if isinstance(frame, Image.Image):
        return frame.convert("RGB")
    import numpy as np

    array = np.asarray(frame)
    if array.dtype != np.uint8:  # floats in [0, 1] (diffusers' np output)
        array = (np.clip(array, 0.0, 1.0) * 255).round().astype(np.uint8)
    return Image.fromarray(array).convert("RGB")
