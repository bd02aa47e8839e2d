"""Per-pixel vision tools: image segmentation and depth estimation (both write an image beside their input)."""

from __future__ import annotations

from typing import Any

from .base import ExpertTool, decode_image, open_image
from .remote import RemoteBlob
from .vision import IMAGE_PARAMETERS, _records

__all__ = ["ImageSegmentationTool", "DepthEstimationTool", "PALETTE"]

# (name, RGB): the observation names each segment's colour so the LLM can describe the mask image
PALETTE = (("red", (230, 25, 75)), ("green", (60, 180, 75)), ("blue", (67, 99, 216)), ("orange", (245, 130, 49)),
           ("purple", (145, 30, 180)), ("cyan", (66, 212, 244)), ("magenta", (240, 50, 230)),
           ("lime", (191, 239, 69)), ("pink", (250, 190, 212)), ("teal", (70, 153, 144)), ("brown", (154, 99, 36)),
           ("navy", (0, 0, 117)), ("yellow", (255, 225, 25)), ("maroon", (128, 0, 0)), ("olive", (128, 128, 0)),
           ("grey", (169, 169, 169)))


class ImageSegmentationTool(ExpertTool):
    name = "image-segmentation"
    task = "image-segmentation"
    default_model = "nvidia/segformer-b0-finetuned-ade-512-512"
    description = (
        "image-segmentation: splits an image into regions (sky, road, person, wall, ...) and says how much of the "
        "image each one covers. Use it to find which things are in an image and where, or to get a mask image. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: each region's label, its share of the image in percent and its colour in a new image where the "
        "regions are painted over the original. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "- sky: 41.0% (red)\\n- tree: 22.5% (green) ... '
        'Segmentation image: image/5e6f7a8b_segment_1a2b3c4d_1a2b3c4d.png".'
    )
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"threshold": 0.9, "max_segments": 20, "alpha": 0.5}

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image), threshold=float(self.options["threshold"]))

    def render(self, result: Any, *, image: str) -> str:
        import numpy as np
        from PIL import Image

        picture = open_image(image)
        segments = []
        for record in _records(result):
            label, mask = str(record.get("label") or "").strip(), record.get("mask")
            if not label or mask is None:
                continue
            try:
                mask_image = decode_image(mask).convert("L")
            except ValueError:
                continue  # a malformed mask is skipped, never a crash
            if mask_image.size != picture.size:
                mask_image = mask_image.resize(picture.size, Image.Resampling.NEAREST)
            pixels = np.asarray(mask_image) > 127
            if not pixels.any():
                continue  # an empty mask says nothing
            score = record.get("score")
            segments.append((label, float(score) if isinstance(score, (int, float)) else None, pixels))
        source = self.rel(image)
        if not segments:
            return f"No segments found in {source}."
        segments.sort(key=lambda s: -s[2].mean())
        colors = [PALETTE[i % len(PALETTE)] for i in range(len(segments))]
        painted = paint_masks(picture, [(rgb, pixels) for (_, rgb), (_, _, pixels) in zip(colors, segments)],
                              float(self.options["alpha"]))
        limit = max(1, int(self.options["max_segments"]))
        lines = [f"Found {len(segments)} segment(s) in {source} (share of the image, colour in the segmentation "
                 f"image):"]
        for (label, score, pixels), (color, _) in list(zip(segments, colors))[:limit]:
            extra = f", score {score:.2f}" if score is not None else ""
            share = 100 * pixels.mean()
            lines.append(f"- {label}: {f'{share:.1f}%' if share >= 0.1 else '<0.1%'} ({color}{extra})")
        if len(segments) > limit:
            lines.append(f"... and {len(segments) - limit} more")
        lines.append(f"Segmentation image: {self.save_image(painted, image, 'segment')}")
        return "\n".join(lines)


def paint_masks(picture: Any, masks: list[tuple[tuple[int, int, int], Any]], alpha: float) -> Any:
    """The picture with each boolean mask blended in its colour (later masks on top)."""
    import numpy as np
    from PIL import Image

    out = np.asarray(picture.convert("RGB")).astype(np.float32)
    alpha = min(1.0, max(0.0, alpha))
    for rgb, pixels in masks:
        out[pixels] = out[pixels] * (1 - alpha) + np.asarray(rgb, dtype=np.float32) * alpha
    return Image.fromarray(out.round().clip(0, 255).astype(np.uint8), "RGB")


_GRID = (("top", "middle", "bottom"), ("left", "centre", "right"))


class DepthEstimationTool(ExpertTool):
    name = "depth-estimation"
    task = "depth-estimation"
    default_model = "depth-anything/Depth-Anything-V2-Small-hf"
    description = (
        "depth-estimation: estimates how far each part of an image is from the camera and saves a grey-scale "
        "depth map. Use it to tell what is near or far, or to get a depth image to work on. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: the depth map's file name, the minimum, maximum and mean predicted value, and where the "
        "largest and smallest values are. With the default model (relative depth) brighter/larger means closer. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "Depth map: image/5e6f7a8b_depth_1a2b3c4d_1a2b3c4d.png ... '
        'largest values (closest) at the bottom centre".'
    )
    parameters = IMAGE_PARAMETERS
    output_kind = "image"

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image))

    def render(self, result: Any, *, image: str) -> str:
        import numpy as np
        from PIL import Image

        picture_size = open_image(image).size
        depth, values = _depth_parts(result)
        if depth is None and values is None:
            return f"The depth model returned no depth map for {self.rel(image)}."
        if depth is None:
            low, high = float(values.min()), float(values.max())
            scaled = (values - low) / (high - low) * 255 if high > low else np.zeros_like(values)
            depth = Image.fromarray(scaled.astype(np.uint8), "L")
        depth = depth.convert("L")
        if depth.size != picture_size:
            depth = depth.resize(picture_size, Image.Resampling.BILINEAR)
        grey = np.asarray(depth).astype(np.float32)
        if values is None:
            values, units = grey, "grey levels 0-255"
        else:
            units = "model units"
        name = self.save_image(depth, image, "depth")
        width, height = depth.size
        return (f"Depth map of {self.rel(image)}: {name} ({width}x{height}, grey-scale, brighter = larger value).\n"
                f"Predicted depth ({units}): min {float(values.min()):.3g}, max {float(values.max()):.3g}, "
                f"mean {float(values.mean()):.3g}.\n"
                f"Largest values around the {_region(grey, np.argmax)}, smallest around the {_region(grey, np.argmin)} "
                f"(for relative-depth models such as Depth Anything and DPT, larger means closer).")


def _depth_parts(result: Any) -> tuple[Any, Any]:
    """``(depth PIL image or None, predicted values as a 2-D float array or None)`` from a local or remote answer."""
    import numpy as np

    if isinstance(result, RemoteBlob):
        return decode_image(result), None
    records = _records(result)
    if not records:
        return None, None
    record = records[0]
    depth = record.get("depth")
    depth = decode_image(depth) if depth is not None else None
    values = record.get("predicted_depth")
    if values is not None:
        if hasattr(values, "detach"):  # a torch tensor
            values = values.detach().float().cpu().numpy()
        try:
            values = np.asarray(values, dtype=np.float32).squeeze()
        except (TypeError, ValueError):
            values = None
        if values is not None and (values.ndim != 2 or not values.size or not np.isfinite(values).all()):
            values = None
    return depth, values


def _region(grey: Any, pick: Any) -> str:
    """Where in a 3x3 grid the cell with the largest (``np.argmax``) or smallest mean lies: "bottom centre"."""
    import numpy as np

    rows = np.array_split(grey, 3, axis=0)
    means = np.array([[cell.mean() if cell.size else 0.0 for cell in np.array_split(row, 3, axis=1)]
                      for row in rows])
    row, col = divmod(int(pick(means)), 3)
    if (row, col) == (1, 1):
        return "centre"
    return f"{_GRID[0][row]} {_GRID[1][col]}".replace("middle centre", "centre")
