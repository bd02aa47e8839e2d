"""Image and video processing tools (Pillow; PyAV for MP4): no model, no network, files in the workspace.

``image-crop``, ``image-resize``, ``image-rotate``, ``image-convert`` and
``image-grid`` work on images; ``video-frames`` extracts frames of a video as
PNG images and ``frames-to-video`` assembles images into a GIF or an MP4.
Inputs are workspace-relative paths from earlier observations (resolved with
``runtime.filenames.resolve_input``: no path outside the workspace, no symlink or
hard link out); outputs follow Visual ChatGPT's naming
(``image/{uuid8}_{op}_{prev}_{org}.png``, see ``runtime.filenames``), and each
observation is a ``ToolResult`` whose ``value`` is the new file's name (a
planner hands it on). Every image read is checked against
``MAX_INPUT_PIXELS`` before it is decoded, and every image made is bounded by
``<tool>_max_side`` (default 4096 pixels a side).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ..base import Tool, ToolResult

__all__ = ["MediaTool", "ImageCropTool", "ImageResizeTool", "ImageRotateTool", "ImageConvertTool", "ImageGridTool",
           "VideoFramesTool", "FramesToVideoTool", "MEDIA_HINT"]

MEDIA_HINT = 'pip install "chatgpt-tool-hub[media]"'
_FORMATS = {"png": ("PNG", "png"), "jpeg": ("JPEG", "jpg"), "jpg": ("JPEG", "jpg"), "webp": ("WEBP", "webp"),
            "bmp": ("BMP", "bmp"), "gif": ("GIF", "gif"), "tiff": ("TIFF", "tiff"), "tif": ("TIFF", "tiff")}
_MODES = {"keep": None, "rgb": "RGB", "rgba": "RGBA", "grayscale": "L", "greyscale": "L", "gray": "L", "grey": "L"}
_SEPARATORS = re.compile(r"[\s,;]+")


def _image_parameter(what: str = "the image to work on") -> dict:
    return {"type": "string", "description": f"path of {what}, from an earlier observation (e.g. image/1a2b3c4d.png)"}


def _images_parameter() -> dict:
    return {"type": ["array", "string"], "items": {"type": "string"},
            "description": "paths of images from earlier observations, in order (a text with one path per line "
                           "or separated by commas is accepted)"}


class MediaTool(Tool):
    """What the media tools share: the workspace, input resolution, bounded opening and chained output names."""

    output_kind = "image"
    op = "image"
    default_max_side = 4096

    def __init__(self, *, workspace_dir: str | os.PathLike = "./workspace", max_side: int | None = None):
        self.workspace = Path(workspace_dir).expanduser().resolve()
        self.max_side = int(max_side if max_side is not None else self.default_max_side)
        if self.max_side < 16:
            key = f"{self.name.replace('-', '_')}_max_side"
            raise ConfigError(f"setting '{key}' must be at least 16 pixels", key=key)

    @classmethod
    def from_context(cls, context: Any) -> "MediaTool":
        return cls(workspace_dir=context.workspace,
                   max_side=context.settings.get(f"{cls.name.replace('-', '_')}_max_side", cls.default_max_side))

    # ---- helpers ---------------------------------------------------------------------------

    def resolve(self, path: Any, kind: str = "image") -> str:
        from ...runtime.filenames import resolve_input

        return resolve_input(path, self.workspace, kind)

    def rel(self, path: str | os.PathLike) -> str:
        from ...runtime.filenames import relative

        return relative(path, self.workspace)

    def open(self, path: Any) -> Any:
        """The image at a workspace path (first frame of an animation), decoded after the pixel check."""
        image_module = _pillow(self.name)
        from ...runtime.filenames import IMAGE_FORMATS, check_pixels

        full = self.resolve(path)
        try:
            with image_module.open(full, formats=IMAGE_FORMATS) as image:
                check_pixels(image, self.rel(full))
                image.load()
                if image.mode not in ("RGB", "RGBA", "L", "LA"):
                    image = image.convert("RGBA" if "A" in image.getbands() or "transparency" in image.info
                                          else "RGB")
                return image.copy()
        except (image_module.UnidentifiedImageError, OSError) as exc:
            raise ToolInputError(f"file '{self.rel(full)}' is not an image {self.name} can read "
                                 f"({type(exc).__name__})") from None

    def images(self, value: Any, most: int) -> list[str]:
        """Absolute paths of a list of images (or a text of paths); 1 to ``most`` of them."""
        items = value if isinstance(value, list) else [p for p in _SEPARATORS.split(str(value or "")) if p]
        items = [str(item).strip() for item in items if str(item).strip()]
        if not items:
            raise ToolInputError(f"{self.name} needs a list of image paths from earlier observations, e.g. "
                                 f'["image/1a2b3c4d.png", "image/5e6f7a8b.png"]')
        if len(items) > most:
            raise ToolInputError(f"{len(items)} images given; {self.name} takes at most {most}")
        return [self.resolve(item) for item in items]

    def check_size(self, width: int, height: int) -> None:
        if width < 1 or height < 1:
            raise ToolInputError(f"{self.name}: the result would be {width}x{height} pixels; give a size of at "
                                 f"least 1x1")
        if max(width, height) > self.max_side:
            raise ToolInputError(f"{self.name}: the result would be {width}x{height} pixels, more than "
                                 f"{self.max_side} a side ({self.name.replace('-', '_')}_max_side); ask for a "
                                 f"smaller one")

    def save(self, image: Any, source: str, op: str | None = None, ext: str = "png", pil_format: str = "PNG",
             folder: str = "image", **options: Any) -> str:
        """Save under the chained name of ``source`` (an absolute input path) in ``folder``; the relative name."""
        from ...runtime.filenames import output_path

        name = output_path(f"{folder}/{os.path.basename(source)}", op or self.op, ext)
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            image.save(target, pil_format, **options)
        except (OSError, ValueError) as exc:
            raise ToolExecutionError(f"{self.name} could not write {name}: {exc}") from None
        return name


def _pillow(tool: str) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ToolExecutionError(f"{tool} needs Pillow, which is not installed: {MEDIA_HINT}") from None
    return Image


def _done(text: str, name: str) -> ToolResult:
    return ToolResult(text, value=name)


# ---- images ----------------------------------------------------------------------------------


class ImageCropTool(MediaTool):
    name = "image-crop"
    op = "crop"
    description = (
        "image-crop: cuts a rectangle out of an image. Use it when the user wants only a part of a picture. "
        'Input: {"image": "<path>", "box": [left, top, right, bottom]}, in pixels from the top-left corner, '
        "or as fractions of the width and height when every number is at most 1 ([0.5, 0, 1, 1] is the right "
        "half). Output: the new image's file name and size. "
        'Example: {"image": "image/1a2b3c4d.png", "box": [10, 20, 110, 100]} -> "Cropped image/1a2b3c4d.png to '
        'image/5e6f7a8b_crop_1a2b3c4d_1a2b3c4d.png (100x80)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": _image_parameter(),
            "box": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4,
                    "description": "[left, top, right, bottom] in pixels, or fractions (all numbers <= 1)"},
        },
        "required": ["image", "box"],
        "additionalProperties": False,
    }

    def _run(self, image: str, box: list[float]) -> ToolResult:
        picture = self.open(image)
        width, height = picture.size
        if all(0 <= value <= 1 for value in box):
            box = [box[0] * width, box[1] * height, box[2] * width, box[3] * height]
        left, top, right, bottom = (int(round(value)) for value in box)
        left, right = sorted((max(0, min(width, left)), max(0, min(width, right))))
        top, bottom = sorted((max(0, min(height, top)), max(0, min(height, bottom))))
        if right - left < 1 or bottom - top < 1:
            raise ToolInputError(f"the box {box} leaves nothing of the {width}x{height} image; give "
                                 f"[left, top, right, bottom] inside it")
        name = self.save(picture.crop((left, top, right, bottom)), self.resolve(image))
        return _done(f"Cropped {self.rel(self.resolve(image))} to {name} ({right - left}x{bottom - top}).", name)


class ImageResizeTool(MediaTool):
    name = "image-resize"
    op = "resize"
    description = (
        "image-resize: makes an image larger or smaller. Give a width, a height (the other side keeps the "
        "aspect ratio), both (that exact size), or a scale factor. "
        'Input: {"image": "<path>", "width": <pixels>, "height": <pixels>, "scale": <factor>} (one of them at '
        "least). Output: the new image's file name and size. "
        'Example: {"image": "image/1a2b3c4d.png", "width": 256} -> "Resized image/1a2b3c4d.png (512x384) to '
        'image/5e6f7a8b_resize_1a2b3c4d_1a2b3c4d.png (256x192)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": _image_parameter(),
            "width": {"type": "integer", "minimum": 1, "description": "new width in pixels"},
            "height": {"type": "integer", "minimum": 1, "description": "new height in pixels"},
            "scale": {"type": "number", "exclusiveMinimum": 0, "description": "factor for both sides (0.5: half)"},
        },
        "required": ["image"],
        "additionalProperties": False,
    }

    def _run(self, image: str, width: int | None = None, height: int | None = None,
             scale: float | None = None) -> ToolResult:
        picture = self.open(image)
        old_w, old_h = picture.size
        if width and height:
            new_w, new_h = width, height
        elif width:
            new_w, new_h = width, max(1, round(old_h * width / old_w))
        elif height:
            new_w, new_h = max(1, round(old_w * height / old_h)), height
        elif scale:
            new_w, new_h = max(1, round(old_w * scale)), max(1, round(old_h * scale))
        else:
            raise ToolInputError('image-resize needs a width, a height or a scale, e.g. '
                                 '{"image": "image/1a2b3c4d.png", "width": 256}')
        self.check_size(new_w, new_h)
        resized = picture.resize((new_w, new_h), _pillow(self.name).Resampling.LANCZOS)
        source = self.resolve(image)
        name = self.save(resized, source)
        return _done(f"Resized {self.rel(source)} ({old_w}x{old_h}) to {name} ({new_w}x{new_h}).", name)


class ImageRotateTool(MediaTool):
    name = "image-rotate"
    op = "rotate"
    description = (
        "image-rotate: turns an image clockwise by any angle (the canvas grows to keep all of it) and/or "
        "mirrors it. "
        'Input: {"image": "<path>", "degrees": <clockwise angle>, "flip": "none"|"horizontal"|"vertical"}. '
        "Output: the new image's file name and size. "
        'Example: {"image": "image/1a2b3c4d.png", "degrees": 90} -> "Rotated image/1a2b3c4d.png by 90 degrees '
        'clockwise: image/5e6f7a8b_rotate_1a2b3c4d_1a2b3c4d.png (384x512)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": _image_parameter(),
            "degrees": {"type": "number", "default": 0, "description": "clockwise angle (negative: anticlockwise)"},
            "flip": {"type": "string", "enum": ["none", "horizontal", "vertical"], "default": "none",
                     "description": "mirror left-right (horizontal) or top-bottom (vertical), after rotating"},
        },
        "required": ["image"],
        "additionalProperties": False,
    }

    def _run(self, image: str, degrees: float = 0, flip: str = "none") -> ToolResult:
        module = _pillow(self.name)
        picture = self.open(image)
        angle = float(degrees) % 360
        if angle == 0 and flip == "none":
            raise ToolInputError('image-rotate needs an angle or a flip, e.g. {"image": "image/1a2b3c4d.png", '
                                 '"degrees": 90}')
        turns = {90.0: module.Transpose.ROTATE_270, 180.0: module.Transpose.ROTATE_180,
                 270.0: module.Transpose.ROTATE_90}  # Pillow turns anticlockwise
        if angle in turns:
            picture = picture.transpose(turns[angle])  # lossless
        elif angle:
            fill = {"RGBA": (0, 0, 0, 0), "LA": (0, 0), "L": 255}.get(picture.mode, (255, 255, 255))
            picture = picture.rotate(-angle, resample=module.Resampling.BICUBIC, expand=True, fillcolor=fill)
        if flip == "horizontal":
            picture = picture.transpose(module.Transpose.FLIP_LEFT_RIGHT)
        elif flip == "vertical":
            picture = picture.transpose(module.Transpose.FLIP_TOP_BOTTOM)
        self.check_size(*picture.size)
        source = self.resolve(image)
        name = self.save(picture, source)
        what = [f"by {degrees:g} degrees clockwise"] if angle else []
        what += [f"mirrored {flip}ly"] if flip != "none" else []
        return _done(f"Rotated {self.rel(source)} {' and '.join(what)}: {name} "
                     f"({picture.width}x{picture.height}).", name)


class ImageConvertTool(MediaTool):
    name = "image-convert"
    op = "convert"
    description = (
        "image-convert: saves an image in another file format (png, jpeg, webp, bmp, gif, tiff) and/or colour "
        "mode (grayscale, rgb, rgba). Use it when the user asks for a JPEG, a black-and-white version, a "
        "smaller file and the like. "
        'Input: {"image": "<path>", "format": "png"|"jpeg"|"webp"|"bmp"|"gif"|"tiff", '
        '"mode": "keep"|"grayscale"|"rgb"|"rgba", "quality": <1-100, for jpeg and webp>}. '
        "Output: the new file's name, size and bytes. "
        'Example: {"image": "image/1a2b3c4d.png", "format": "jpeg", "mode": "grayscale"} -> "Converted '
        'image/1a2b3c4d.png to image/5e6f7a8b_convert_1a2b3c4d_1a2b3c4d.jpg (JPEG, L, 512x384, 20480 bytes)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": _image_parameter(),
            "format": {"type": "string", "enum": sorted(_FORMATS), "default": "png", "description": "the file format"},
            "mode": {"type": "string", "enum": sorted(_MODES), "default": "keep", "description": "the colour mode"},
            "quality": {"type": "integer", "minimum": 1, "maximum": 100, "default": 90,
                        "description": "JPEG / WebP quality"},
        },
        "required": ["image"],
        "additionalProperties": False,
    }

    def _run(self, image: str, format: str = "png", mode: str = "keep", quality: int = 90) -> ToolResult:
        module = _pillow(self.name)
        picture = self.open(image)
        pil_format, ext = _FORMATS[format.lower()]
        wanted = _MODES[mode.lower()]
        if wanted:
            picture = picture.convert(wanted)
        if pil_format in ("JPEG", "BMP") and picture.mode in ("RGBA", "LA"):  # no alpha there: over white
            background = module.new("RGB", picture.size, (255, 255, 255))
            background.paste(picture.convert("RGBA"), mask=picture.convert("RGBA").getchannel("A"))
            picture = background if picture.mode == "RGBA" else background.convert("L")
        options: dict[str, Any] = {"quality": int(quality)} if pil_format in ("JPEG", "WEBP") else {}
        source = self.resolve(image)
        name = self.save(picture, source, ext=ext, pil_format=pil_format, **options)
        size = (self.workspace / name).stat().st_size
        return _done(f"Converted {self.rel(source)} to {name} ({pil_format}, {picture.mode}, "
                     f"{picture.width}x{picture.height}, {size} bytes).", name)


class ImageGridTool(MediaTool):
    name = "image-grid"
    op = "grid"
    max_images = 36
    description = (
        "image-grid: puts several images side by side in one picture (a grid, a strip or a contact sheet), each "
        "scaled to fit a square cell. Use it to compare images or show them together. "
        'Input: {"images": ["<path>", "<path>", ...], "columns": <how many per row>, "cell": <cell side in '
        'pixels>, "gap": <pixels between cells>}. Output: the new image\'s file name and layout. '
        'Example: {"images": ["image/1a2b3c4d.png", "image/5e6f7a8b.png"], "columns": 2} -> "Composed 2 images in '
        '1 row of 2 columns: image/9c0d1e2f_grid_1a2b3c4d_1a2b3c4d.png (516x256)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "images": _images_parameter(),
            "columns": {"type": "integer", "minimum": 1, "description": "images per row (default: a square grid)"},
            "cell": {"type": "integer", "minimum": 16, "maximum": 1024, "default": 256,
                     "description": "side of each square cell in pixels"},
            "gap": {"type": "integer", "minimum": 0, "maximum": 64, "default": 4, "description": "pixels between"},
        },
        "required": ["images"],
        "additionalProperties": False,
    }

    def _run(self, images: Any, columns: int | None = None, cell: int = 256, gap: int = 4) -> ToolResult:
        module = _pillow(self.name)
        paths = self.images(images, self.max_images)
        count = len(paths)
        columns = min(count, columns or math.ceil(math.sqrt(count)))
        rows = math.ceil(count / columns)
        width, height = columns * cell + (columns - 1) * gap, rows * cell + (rows - 1) * gap
        self.check_size(width, height)
        sheet = module.new("RGB", (width, height), (255, 255, 255))
        for index, path in enumerate(paths):
            picture = self.open(self.rel(path)).convert("RGBA")
            picture.thumbnail((cell, cell), module.Resampling.LANCZOS)
            column, row = index % columns, index // columns
            x = column * (cell + gap) + (cell - picture.width) // 2
            y = row * (cell + gap) + (cell - picture.height) // 2
            sheet.paste(picture, (x, y), picture)
        name = self.save(sheet, paths[0])
        layout = f"{rows} row{'s' if rows > 1 else ''} of {columns} column{'s' if columns > 1 else ''}"
        return _done(f"Composed {count} image{'s' if count > 1 else ''} in {layout}: {name} ({width}x{height}).",
                     name)


# ---- video -----------------------------------------------------------------------------------


class VideoFramesTool(MediaTool):
    name = "video-frames"
    op = "frame"
    max_frames = 64
    description = (
        "video-frames: takes still frames out of a video (GIF, MP4, WebM, AVI, MOV, MKV), evenly spaced over "
        "its length, and saves each as a PNG image. Use it to look at what happens in a video or to work on "
        'its frames with the image tools. Input: {"video": "<path>", "count": <how many frames, 1-64>}. '
        "Output: the frame images' file names, in order. "
        'Example: {"video": "video/1a2b3c4d.mp4", "count": 2} -> "Took 2 frames from video/1a2b3c4d.mp4: '
        'image/5e6f7a8b_frame_1a2b3c4d_1a2b3c4d.png, image/9c0d1e2f_frame_1a2b3c4d_1a2b3c4d.png (64x48)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "video": {"type": "string", "description": "path of a video from an earlier observation"},
            "count": {"type": "integer", "minimum": 1, "maximum": max_frames, "default": 8,
                      "description": "how many frames to take, evenly spaced"},
        },
        "required": ["video"],
        "additionalProperties": False,
    }

    def _run(self, video: str, count: int = 8) -> ToolResult:
        from ...errors import UserError
        from ...runtime.video_io import read_frames

        _pillow(self.name)
        source = self.resolve(video, "video")
        try:
            frames = read_frames(source, max_frames=count)
        except UserError as exc:  # PyAV missing for an MP4: say which extra brings it
            raise ToolExecutionError(str(exc)) from None
        names = [self.save(frame, source) for frame in frames]
        first = frames[0]
        return ToolResult(f"Took {len(names)} frame{'s' if len(names) > 1 else ''} from {self.rel(source)}: "
                          f"{', '.join(names)} ({first.width}x{first.height}).", value=", ".join(names))


class FramesToVideoTool(MediaTool):
    name = "frames-to-video"
    op = "video"
    output_kind = "video"
    max_images = 500
    default_max_side = 1920
    description = (
        "frames-to-video: joins images into an animation or a clip, in the order given: an animated GIF, or an "
        "MP4 video. Every frame takes the size of the first. "
        'Input: {"images": ["<path>", "<path>", ...], "fps": <frames per second>, "format": "gif"|"mp4"}. '
        "Output: the new video's file name, frame count, size and frame rate. "
        'Example: {"images": ["image/1a2b3c4d.png", "image/5e6f7a8b.png"], "fps": 2} -> "Made '
        'video/9c0d1e2f_video_1a2b3c4d_1a2b3c4d.gif (2 frames, 512x384, 2 fps)."'
    )
    parameters = {
        "type": "object",
        "properties": {
            "images": _images_parameter(),
            "fps": {"type": "number", "minimum": 0.1, "maximum": 60, "default": 8, "description": "frames per second"},
            "format": {"type": "string", "enum": ["gif", "mp4"], "default": "gif", "description": "the file type"},
        },
        "required": ["images"],
        "additionalProperties": False,
    }

    def _run(self, images: Any, fps: float = 8, format: str = "gif") -> ToolResult:
        from ...errors import UserError
        from ...runtime.filenames import output_path
        from ...runtime.video_io import write_video

        module = _pillow(self.name)
        paths = self.images(images, self.max_images)
        frames = [self.open(self.rel(path)).convert("RGB") for path in paths]
        size = frames[0].size
        self.check_size(*size)
        frames = [frame if frame.size == size else frame.resize(size, module.Resampling.LANCZOS) for frame in frames]
        name = output_path(f"video/{os.path.basename(paths[0])}", self.op, format)
        target = self.workspace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_video(frames, target, fps=float(fps))
        except UserError as exc:  # PyAV missing for MP4
            raise ToolExecutionError(f"{exc}; or ask for format gif") from None
        except (OSError, ValueError) as exc:
            raise ToolExecutionError(f"frames-to-video could not write {name}: {exc}") from None
        return _done(f"Made {name} ({len(frames)} frame{'s' if len(frames) > 1 else ''}, {size[0]}x{size[1]}, "
                     f"{float(fps):g} fps).", name)
