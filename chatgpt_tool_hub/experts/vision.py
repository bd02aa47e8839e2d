"""Vision expert tools: image captioning, object detection, image classification."""

from __future__ import annotations

from typing import Any, Iterable

from ..tools.base import ToolResult
from .base import ExpertTool, open_image

__all__ = ["ImageCaptioningTool", "ObjectDetectionTool", "ImageClassificationTool", "IMAGE_PARAMETERS"]

IMAGE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "image": {"type": "string",
                  "description": "path of an image file in the workspace, taken from an earlier observation "
                                 "(e.g. image/1a2b3c4d.png)"},
    },
    "required": ["image"],
    "additionalProperties": False,
}


def _records(result: Any) -> list[dict]:
    """The dicts in a pipeline or endpoint answer (a dict, a list, or a list of lists)."""
    if isinstance(result, dict):
        return [result]
    if isinstance(result, list):
        if len(result) == 1 and isinstance(result[0], list):
            result = result[0]
        return [r for r in result if isinstance(r, dict)]
    return []


def _scored(records: Iterable[dict]) -> list[tuple[str, float, dict]]:
    out = []
    for record in records:
        try:
            out.append((str(record["label"]), float(record["score"]), record))
        except (KeyError, TypeError, ValueError):
            continue  # a malformed entry is skipped, never a crash
    return sorted(out, key=lambda item: -item[1])


class ImageCaptioningTool(ExpertTool):
    name = "image-captioning"
    task = "image-text-to-text"
    hub_task = "image-to-text"
    default_model = "Salesforce/blip-image-captioning-base"
    description = (
        "image-captioning: describes what an image shows in one English sentence. Use it whenever you need to "
        "know what is in an image file - never imagine an image's content. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: the caption. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "image/1a2b3c4d.png shows: a dog sitting on a red couch".'
    )
    parameters = IMAGE_PARAMETERS
    options = {"max_new_tokens": 40, "prompt": ""}

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(images=open_image(image), text=self.options["prompt"] or "",
                     max_new_tokens=int(self.options["max_new_tokens"]), return_full_text=False)

    def render(self, result: Any, *, image: str) -> str:
        texts = [str(r.get("generated_text", "")).strip() for r in _records(result)]
        caption = " ".join(t for t in texts if t)
        if not caption:
            return f"The captioner returned no caption for {self.rel(image)}."
        return ToolResult(f"{self.rel(image)} shows: {caption}", value=caption)


class ObjectDetectionTool(ExpertTool):
    name = "object-detection"
    task = "object-detection"
    default_model = "hustvl/yolos-tiny"  # pure transformers: no timm needed (DETR's ResNet needs it)
    description = (
        "object-detection: finds the objects in an image and where they are. Use it to count objects or to "
        "locate them. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: each object's label, score and box [xmin, ymin, xmax, ymax] in pixels, and the name of a new "
        "image with the boxes drawn on it. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "- dog 0.98 [12, 40, 200, 310] ... '
        'Annotated image: image/5e6f7a8b_detect_1a2b3c4d_1a2b3c4d.png".'
    )
    parameters = IMAGE_PARAMETERS
    output_kind = "image"
    options = {"threshold": 0.5, "max_objects": 50}

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image), threshold=float(self.options["threshold"]))

    def render(self, result: Any, *, image: str) -> str:
        threshold = float(self.options["threshold"])
        found = []
        for label, score, record in _scored(_records(result)):
            box = record.get("box") or {}
            try:
                xyxy = [int(round(float(box[k]))) for k in ("xmin", "ymin", "xmax", "ymax")]
            except (KeyError, TypeError, ValueError):
                continue
            if score >= threshold:
                found.append((label, score, xyxy))
        source = self.rel(image)
        if not found:
            return f"No objects found in {source} with a score of at least {threshold:.2f}."
        limit = max(1, int(self.options["max_objects"]))
        lines = [f"Found {len(found)} object(s) in {source} (boxes are [xmin, ymin, xmax, ymax] in pixels):"]
        lines += [f"- {label} {score:.2f} {xyxy}" for label, score, xyxy in found[:limit]]
        if len(found) > limit:
            lines.append(f"... and {len(found) - limit} more")
        annotated = self.save_image(draw_boxes(open_image(image), found), image, "detect")
        lines.append(f"Annotated image: {annotated}")
        return ToolResult("\n".join(lines), value=annotated)


class ImageClassificationTool(ExpertTool):
    name = "image-classification"
    task = "image-classification"
    default_model = "google/vit-base-patch16-224"
    description = (
        "image-classification: names the main subject of an image (ImageNet-style labels). Use it to tell what "
        "kind of thing an image shows. "
        'Input: {"image": "<path of an image file from an earlier observation>"}. '
        "Output: the top 5 labels with scores between 0 and 1. "
        'Example: {"image": "image/1a2b3c4d.png"} -> "- tabby cat: 0.91\\n- tiger cat: 0.05 ...".'
    )
    parameters = IMAGE_PARAMETERS
    options = {"top_k": 5}

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image), top_k=int(self.options["top_k"]))

    def render(self, result: Any, *, image: str) -> str:
        labels = _scored(_records(result))[: max(1, int(self.options["top_k"]))]
        if not labels:
            return f"The classifier returned no labels for {self.rel(image)}."
        lines = [f"- {label}: {score:.3f}" for label, score, _ in labels]
        return "\n".join([f"Top labels for {self.rel(image)}:", *lines])


_COLORS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45")


def draw_boxes(image: Any, found: list[tuple[str, float, list[int]]]) -> Any:
    """The image with a coloured box and ``label score`` drawn for each detection."""
    from PIL import ImageDraw

    draw = ImageDraw.Draw(image)
    colors: dict[str, str] = {}
    for label, score, (x0, y0, x1, y1) in found:
        color = colors.setdefault(label, _COLORS[len(colors) % len(_COLORS)])
        x0, x1 = sorted((x0, x1))
        y0, y1 = sorted((y0, y1))
        draw.rectangle([x0, y0, x1, y1], outline=color, width=2)
        text = f"{label} {score:.2f}"
        left, top, right, bottom = draw.textbbox((x0, y0), text)
        lift = bottom - top + 2
        draw.rectangle([x0, max(0, y0 - lift), x0 + right - left + 4, max(lift, y0)], fill=color)
        draw.text((x0 + 2, max(0, y0 - lift)), text, fill="white")
    return image
