"""Per-pixel vision tools: image segmentation and depth estimation (both write images beside their input).

Both also write the condition map of a ControlNet tool: ``image-segmentation``
an ADE20K-palette colour map (op ``segmentation``, for ``segmentation-to-image``;
each ADE20K class in its palette colour, as ControlNet's seg model was trained)
beside its overlay (op ``segment``), and ``depth-estimation`` a depth map (op
``depth``, for ``depth-to-image``) of the input's size, 8-bit grey, near =
bright: the model's values min-max scaled, and inverted for metric models
(larger = farther), as ControlNet's MiDaS depth maps are.
"""

from __future__ import annotations

import zlib
from typing import Any

from ..tools.base import ToolResult
from .base import ExpertTool, decode_image, open_image
from .remote import RemoteBlob
from .vision import IMAGE_PARAMETERS, _records

__all__ = ["ImageSegmentationTool", "DepthEstimationTool", "PALETTE", "ADE20K_CLASSES", "ADE20K_PALETTE",
           "ade_colour", "run_depth", "closeness"]

# (name, RGB): the observation names each segment's colour so the LLM can describe the mask image
PALETTE = (("red", (230, 25, 75)), ("green", (60, 180, 75)), ("blue", (67, 99, 216)), ("orange", (245, 130, 49)),
           ("purple", (145, 30, 180)), ("cyan", (66, 212, 244)), ("magenta", (240, 50, 230)),
           ("lime", (191, 239, 69)), ("pink", (250, 190, 212)), ("teal", (70, 153, 144)), ("brown", (154, 99, 36)),
           ("navy", (0, 0, 117)), ("yellow", (255, 225, 25)), ("maroon", (128, 0, 0)), ("olive", (128, 128, 0)),
           ("grey", (169, 169, 169)))

# ADE20K's 150 classes and their colours (the palette of mmseg and ControlNet's segmentation annotator)
ADE20K_CLASSES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet",
    "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water",
    "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence", "desk",
    "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path",
    "stairs", "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge", "bookcase",
    "blind", "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove", "palm",
    "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus", "towel",
    "light", "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver", "airplane",
    "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster",
    "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything", "swimming pool", "stool",
    "barrel", "basket", "waterfall", "tent", "bag", "minibike", "cradle", "oven", "ball", "food", "step", "tank",
    "trade name", "microwave", "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture",
    "hood", "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate", "monitor",
    "bulletin board", "shower", "radiator", "glass", "clock", "flag")
ADE20K_PALETTE = (
    (120, 120, 120), (180, 120, 120), (6, 230, 230), (80, 50, 50), (4, 200, 3), (120, 120, 80), (140, 140, 140),
    (204, 5, 255), (230, 230, 230), (4, 250, 7), (224, 5, 255), (235, 255, 7), (150, 5, 61), (120, 120, 70),
    (8, 255, 51), (255, 6, 82), (143, 255, 140), (204, 255, 4), (255, 51, 7), (204, 70, 3), (0, 102, 200),
    (61, 230, 250), (255, 6, 51), (11, 102, 255), (255, 7, 71), (255, 9, 224), (9, 7, 230), (220, 220, 220),
    (255, 9, 92), (112, 9, 255), (8, 255, 214), (7, 255, 224), (255, 184, 6), (10, 255, 71), (255, 41, 10),
    (7, 255, 255), (224, 255, 8), (102, 8, 255), (255, 61, 6), (255, 194, 7), (255, 122, 8), (0, 255, 20),
    (255, 8, 41), (255, 5, 153), (6, 51, 255), (235, 12, 255), (160, 150, 20), (0, 163, 255), (140, 140, 140),
    (250, 10, 15), (20, 255, 0), (31, 255, 0), (255, 31, 0), (255, 224, 0), (153, 255, 0), (0, 0, 255),
    (255, 71, 0), (0, 235, 255), (0, 173, 255), (31, 0, 255), (11, 200, 200), (255, 82, 0), (0, 255, 245),
    (0, 61, 255), (0, 255, 112), (0, 255, 133), (255, 0, 0), (255, 163, 0), (255, 102, 0), (194, 255, 0),
    (0, 143, 255), (51, 255, 0), (0, 82, 255), (0, 255, 41), (0, 255, 173), (10, 0, 255), (173, 255, 0),
    (0, 255, 153), (255, 92, 0), (255, 0, 255), (255, 0, 245), (255, 0, 102), (255, 173, 0), (255, 0, 20),
    (255, 184, 184), (0, 31, 255), (0, 255, 61), (0, 71, 255), (255, 0, 204), (0, 255, 194), (0, 255, 82),
    (0, 10, 255), (0, 112, 255), (51, 0, 255), (0, 194, 255), (0, 122, 255), (0, 255, 163), (255, 153, 0),
    (0, 255, 10), (255, 112, 0), (143, 255, 0), (82, 0, 255), (163, 255, 0), (255, 235, 0), (8, 184, 170),
    (133, 0, 255), (0, 255, 92), (184, 0, 255), (255, 0, 31), (0, 184, 255), (0, 214, 255), (255, 0, 112),
    (92, 255, 0), (0, 224, 255), (112, 224, 255), (70, 184, 160), (163, 0, 255), (153, 0, 255), (71, 255, 0),
    (255, 0, 163), (255, 204, 0), (255, 0, 143), (0, 255, 235), (133, 255, 0), (255, 0, 235), (245, 0, 255),
    (255, 0, 122), (255, 245, 0), (10, 190, 212), (214, 255, 0), (0, 204, 255), (20, 0, 255), (255, 255, 0),
    (0, 153, 255), (0, 41, 255), (0, 255, 204), (41, 0, 255), (41, 255, 0), (173, 0, 255), (0, 245, 255),
    (71, 0, 255), (122, 0, 255), (0, 255, 184), (0, 92, 255), (184, 255, 0), (0, 133, 255), (255, 214, 0),
    (25, 194, 194), (102, 255, 0), (92, 0, 255))
_ADE_INDEX = {name: i for i, name in enumerate(ADE20K_CLASSES)}


def ade_colour(label: str) -> tuple[tuple[int, int, int], bool]:
    """``(RGB, is_ade_class)``: the ADE20K colour of a label (``"bed "``, ``"windowpane, window"`` match too);
    a label outside ADE20K gets a palette colour picked from its name, the same one every time."""
    key = " ".join(str(label).lower().split())
    index = _ADE_INDEX.get(key)
    if index is None:
        index = _ADE_INDEX.get(key.replace(";", ",").split(",")[0].strip())
    if index is not None:
        return ADE20K_PALETTE[index], True
    return ADE20K_PALETTE[zlib.crc32(key.encode("utf-8")) % len(ADE20K_PALETTE)], False


class ImageSegmentationTool(ExpertTool):
    name = "image-segmentation"
    task = "image-segmentation"
    default_model = "nvidia/segformer-b0-finetuned-ade-512-512"
    description = (
        "image-segmentation: splits an image into regions (sky, road, person, wall, ...) and says how much of the "
        "image each one covers. Use it to find which things are in an image and where, or to get a mask image. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: each region's label, its share of the image in percent and its colour in a new image where the "
        "regions are painted over the original, and a segmentation map (each region in its ADE20K colour on "
        "black) that segmentation-to-image takes. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "- sky: 41.0% (red)\\n- tree: 22.5% (green) ... '
        'Segmentation image: image/5e6f7a8b_segment_1a2b3c4d_1a2b3c4d.png\\nSegmentation map ...: '
        'image/9c0d1e2f_segmentation_1a2b3c4d_1a2b3c4d.png".'
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
        painted = paint_masks(picture, [(rgb, pixels) for (_, rgb), (_, _, pixels) in zip(colors, segments, strict=False)],
                              float(self.options["alpha"]))
        limit = max(1, int(self.options["max_segments"]))
        lines = [f"Found {len(segments)} segment(s) in {source} (share of the image, colour in the segmentation "
                 f"image):"]
        for (label, score, pixels), (color, _) in list(zip(segments, colors, strict=False))[:limit]:
            extra = f", score {score:.2f}" if score is not None else ""
            share = 100 * pixels.mean()
            lines.append(f"- {label}: {f'{share:.1f}%' if share >= 0.1 else '<0.1%'} ({color}{extra})")
        if len(segments) > limit:
            lines.append(f"... and {len(segments) - limit} more")
        lines.append(f"Segmentation image: {self.save_image(painted, image, 'segment')}")
        colours = [ade_colour(label) for label, _, _ in segments]
        black = Image.new("RGB", picture.size, (0, 0, 0))
        seg_map = paint_masks(black, [(rgb, pixels) for (rgb, _), (_, _, pixels) in zip(colours, segments, strict=False)], 1.0)
        name = self.save_image(seg_map, image, "segmentation")
        outside = sorted({label for (label, _, _), (_, known) in zip(segments, colours, strict=False) if not known})
        note = (f"; not ADE20K classes, so segmentation-to-image may not know them: {', '.join(outside)}"
                if outside else "")
        lines.append(f"Segmentation map (ADE20K colours on black, {picture.width}x{picture.height}; the image "
                     f"input of segmentation-to-image{note}): {name}")
        return ToolResult("\n".join(lines), value=name)


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
        "depth map (near = bright). Use it to tell what is near or far, or as the first step of depth-to-image "
        "(a new image with the same depth layout). "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: the depth map's file name, the minimum, maximum and mean predicted value, and where the "
        "closest and farthest parts are. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "Depth map of image/1a2b3c4d.png: '
        'image/5e6f7a8b_depth_1a2b3c4d_1a2b3c4d.png ... Closest around the bottom centre, farthest around the top '
        'left.".'
    )
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    # "auto": metric models (GLPN, ZoeDepth, Depth Pro, metric Depth Anything: larger = farther) are inverted
    options = {"metric": "auto"}

    def call_local(self, model: Any, *, image: str) -> Any:
        return run_depth(model, open_image(image))

    def render(self, result: Any, *, image: str) -> str:
        import numpy as np
        from PIL import Image

        size = open_image(image).size
        near = closeness(result, size, self.options["metric"])
        if near is None:
            return f"The depth model returned no depth map for {self.rel(image)}."
        low, high = float(near.min()), float(near.max())
        grey = ((near - low) / (high - low) * 255 if high > low else np.zeros_like(near)).round().astype(np.uint8)
        name = self.save_image(Image.fromarray(grey, "L"), image, "depth")
        _, values, flagged = _depth_parts(result)
        if values is None:
            values, units = np.asarray(grey, dtype=np.float32), "grey levels 0-255, brighter = closer"
        else:
            farther = _is_metric(self.options["metric"], flagged)
            units = f"model units, larger = {'farther' if farther else 'closer'}"
        width, height = size
        return ToolResult(
            f"Depth map of {self.rel(image)}: {name} ({width}x{height}, 8-bit grey, near = bright; the image input "
            f"of depth-to-image).\n"
            f"Predicted depth ({units}): min {float(values.min()):.3g}, max {float(values.max()):.3g}, "
            f"mean {float(values.mean()):.3g}.\n"
            f"Closest around the {_region(grey, np.argmax)}, farthest around the {_region(grey, np.argmin)}.",
            value=name)


_METRIC_MODEL_TYPES = ("glpn", "zoedepth", "depth_pro")


def run_depth(model: Any, picture: Any) -> Any:
    """The depth pipeline's answer for a picture, marked ``metric`` when the model's values grow with distance."""
    out = model(picture)
    config = getattr(getattr(model, "model", None), "config", None)
    metric = (getattr(config, "depth_estimation_type", None) == "metric"
              or getattr(config, "model_type", None) in _METRIC_MODEL_TYPES)
    return {**out, "metric": metric} if isinstance(out, dict) else out


def _is_metric(option: Any, flagged: bool) -> bool:
    """The ``metric`` option ("auto", or yes/no) applied to what the model's config says."""
    text = str(option).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    return flagged


def closeness(result: Any, size: tuple[int, int], metric: Any = "auto") -> Any:
    """A float ``HxW`` array at ``size`` where larger means closer, from a local or remote depth answer;
    ``None`` when the answer holds no depth. Metric depth (larger = farther) is negated."""
    import numpy as np
    from PIL import Image

    depth, values, flagged = _depth_parts(result)
    if values is not None:
        plane = Image.fromarray(values.astype(np.float32), "F")
    elif depth is not None:
        plane = depth.convert("L")
    else:
        return None
    wanted = (size[0], size[1])  # a tuple even when a caller hands a list
    if plane.size != wanted:
        plane = plane.resize(wanted, Image.Resampling.BILINEAR)
    near = np.asarray(plane, dtype=np.float32)
    return -near if _is_metric(metric, flagged) else near


def _depth_parts(result: Any) -> tuple[Any, Any, bool]:
    """``(depth PIL image or None, predicted values as a 2-D float array or None, metric)`` from a local or
    remote answer (``metric``: the model's values grow with distance, as ``run_depth`` marks it)."""
    import numpy as np

    if isinstance(result, RemoteBlob):
        return decode_image(result), None, False
    records = _records(result)
    if not records:
        return None, None, False
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
    return depth, values, record.get("metric") is True


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
