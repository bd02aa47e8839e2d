"""Open-vocabulary detection and segmentation: find (and cut out) what text labels name (OWL-ViT, SAM).

``zero-shot-object-detection`` runs transformers' pipeline of that name: the
labels are free text (``"red car, dog, traffic light"``), the answer is each
found box with its label and score, like ``object-detection`` (and the same
annotated image, op ``detect``). OWL-ViT's scores are low compared with a
closed-set detector's: the default threshold is 0.1.

``segment-by-text`` is TaskMatrix's grounded segmentation: the zero-shot
detector's boxes prompt SAM (``SamModel``), which draws each object's exact
mask; it writes the masks over the image (op ``segment``) and their union as a
white-on-black mask (op ``mask``, what inpainting tools take). Its detector is
loaded through the model manager under the zero-shot tool's key, so one load
serves both tools.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Mapping, cast

from ..errors import ToolExecutionError, ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool, image_base64, open_image
from .remote import RemoteEndpoint
from .vision import _records, _scored, draw_boxes

__all__ = ["ZeroShotObjectDetectionTool", "SegmentByTextTool", "SamSegmenter", "parse_labels", "LABELS_PARAMETERS",
           "DEFAULT_DETECTOR"]

DEFAULT_DETECTOR = "google/owlvit-base-patch32"

LABELS_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "image": {"type": "string",
                  "description": "path of an image file in the workspace, from an earlier observation"},
        "labels": {"type": "string",
                   "description": "what to look for: one or more names or short phrases, separated by commas "
                                  "(e.g. 'red car, dog')"},
    },
    "required": ["image", "labels"],
    "additionalProperties": False,
}
MAX_LABELS = 32


def parse_labels(text: Any) -> list[str]:
    """The distinct, non-empty labels of a comma- (or semicolon-, or newline-) separated text or a list."""
    parts = text if isinstance(text, (list, tuple)) else re.split(r"[,;\n]", str(text or ""))
    labels: list[str] = []
    for part in parts:
        label = " ".join(str(part).split()).strip(" .'\"")
        if label and label.lower() not in {known.lower() for known in labels}:
            labels.append(label)
    return labels


def _clipped_matches(result: Any, size: tuple[int, int], threshold: float) -> list[tuple[str, float, list[int]]]:
    """``(label, score, [x0, y0, x1, y1])`` of each detection at least ``threshold``, boxes clipped to the image,
    most certain first."""
    width, height = size
    found = []
    for label, score, record in _scored(_records(result)):
        box = record.get("box") or {}
        try:
            x0, y0, x1, y1 = (float(box[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
        except (KeyError, TypeError, ValueError):
            continue
        x0, x1 = sorted((min(max(x0, 0), width - 1), min(max(x1, 0), width - 1)))
        y0, y1 = sorted((min(max(y0, 0), height - 1), min(max(y1, 0), height - 1)))
        if score >= threshold:
            found.append((label, score, [int(round(v)) for v in (x0, y0, x1, y1)]))
    return found


if TYPE_CHECKING:  # the class the mixin goes into, so that its uses of the tool's attributes are checked
    _MixinBase = ExpertTool
else:
    _MixinBase = object


class _LabelsInput(_MixinBase):
    """Mixin: the ``image`` + ``labels`` input, also as plain text ``image/1a2b3c4d.png, cat, dog``."""

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, str) and not tool_input.strip().startswith("{") and "," in tool_input:
            image, labels = (part.strip() for part in tool_input.split(",", 1))
            return super().parse_arguments({"image": image, "labels": labels})
        if isinstance(tool_input, Mapping) and isinstance(tool_input.get("labels"), (list, tuple)):
            tool_input = {**tool_input, "labels": ", ".join(str(x) for x in tool_input["labels"])}
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        labels = parse_labels(inputs.get("labels"))
        if not labels:
            raise ToolInputError(f"{self.name} needs the names of what to look for, separated by commas, e.g. "
                                 '{"image": "image/1a2b3c4d.png", "labels": "cat, remote control"}')
        if len(labels) > MAX_LABELS:
            raise ToolInputError(f"{self.name} takes at most {MAX_LABELS} labels at a time; got {len(labels)}")
        inputs["labels"] = ", ".join(labels)
        return inputs


class ZeroShotObjectDetectionTool(_LabelsInput, ExpertTool):
    name = "zero-shot-object-detection"
    task = "zero-shot-object-detection"
    default_model = "google/owlvit-base-patch32"
    description = (
        "zero-shot-object-detection: finds the things you name in an image and where they are, for any names "
        "(not only common object classes): 'red car', 'person with an umbrella', 'logo'. Use it to check whether "
        "something is in an image, to count it or to locate it. "
        'Input: {"image": "<path of an image file from an earlier observation>", "labels": "<what to look for, '
        'separated by commas>"}. '
        "Output: each match's label, score and box [xmin, ymin, xmax, ymax] in pixels, and the name of a new image "
        "with the boxes drawn on it. "
        'Example: {"image": "image/1a2b3c4d.png", "labels": "cat, remote control"} -> "Found 2 match(es) ...\\n'
        '- cat 0.31 [12, 40, 200, 310] ... Annotated image: image/5e6f7a8b_detect_1a2b3c4d_1a2b3c4d.png".'
    )
    parameters = LABELS_PARAMETERS
    output_kind = "image"
    options = {"threshold": 0.1, "max_objects": 50}

    def call_local(self, model: Any, *, image: str, labels: str) -> Any:
        return model(open_image(image), candidate_labels=parse_labels(labels),
                     threshold=float(self.options["threshold"]))

    def call_remote(self, endpoint: RemoteEndpoint, *, image: str, labels: str) -> Any:
        """The inference API's body: the image as base64, the labels as ``candidate_labels``."""
        return endpoint.post_json(image_base64(image), {"candidate_labels": parse_labels(labels)})

    def render(self, result: Any, *, image: str, labels: str) -> str:
        picture = open_image(image)
        threshold = float(self.options["threshold"])
        found = _clipped_matches(result, picture.size, threshold)
        source = self.rel(image)
        if not found:
            return (f"Nothing matching {labels} found in {source} with a score of at least {threshold:.2f} "
                    f"(set zero_shot_object_detection_threshold lower to see weaker matches).")
        limit = max(1, int(self.options["max_objects"]))
        lines = [f"Found {len(found)} match(es) for {labels} in {source} (boxes are [xmin, ymin, xmax, ymax] in "
                 f"pixels):"]
        lines += [f"- {label} {score:.2f} {xyxy}" for label, score, xyxy in found[:limit]]
        if len(found) > limit:
            lines.append(f"... and {len(found) - limit} more")
        annotated = self.save_image(draw_boxes(picture, found[:limit]), image, "detect")
        lines.append(f"Annotated image: {annotated}")
        return ToolResult("\n".join(lines), value=annotated)


class SamSegmenter:
    """SAM with its processor, callable: ``(image, boxes [[x0, y0, x1, y1], ...]) -> (masks HxW bool, scores)``."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.processor = processor
        self.device = device

    def __call__(self, image: Any, boxes: list[list[float]]) -> tuple[list[Any], list[float]]:
        import torch

        if not boxes:
            return [], []
        inputs = self.processor(image, input_boxes=[boxes], return_tensors="pt").to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        with torch.inference_mode():
            outputs = self.model(**inputs, multimask_output=False)
        masks = self.processor.image_processor.post_process_masks(
            outputs.pred_masks.float().cpu(), inputs["original_sizes"].cpu(), inputs["reshaped_input_sizes"].cpu())[0]
        scores = outputs.iou_scores[0, :, 0].float().cpu().tolist()
        return [m[0].numpy().astype(bool) for m in masks], scores


class SegmentByTextTool(_LabelsInput, ExpertTool):
    name = "segment-by-text"
    task = "mask-generation"  # the Hub's tag of SAM; run by SamModel with its processor
    default_model = "facebook/sam-vit-base"
    description = (
        "segment-by-text: finds the things you name in an image and cuts out their exact shape (grounded "
        "segmentation: a detector finds them, SAM draws their outline). Use it to get the mask of an object for "
        "editing, or to see exactly which pixels are the named thing. "
        'Input: {"image": "<path of an image file from an earlier observation>", "labels": "<what to segment, '
        'separated by commas>"}. '
        "Output: each object's label, detection score, box and share of the image, an image with the objects "
        "painted over it, and a mask image (the objects white on black). "
        'Example: {"image": "image/1a2b3c4d.png", "labels": "dog"} -> "Found 1 object(s) ...\\n- dog 0.35 '
        '[12, 40, 200, 310], 18.2% of the image (red), mask quality 0.96 ... Mask (white = the objects): '
        'image/5e6f7a8b_mask_1a2b3c4d_1a2b3c4d.png".'
    )
    parameters = LABELS_PARAMETERS
    output_kind = "image"
    options = {"detector": "", "threshold": 0.1, "max_objects": 10, "alpha": 0.5}

    @classmethod
    def from_context(cls, context: Any) -> "SegmentByTextTool":
        """As every expert tool; without ``segment_by_text_detector`` the ``zero_shot_object_detection_model``
        detects (one load for both tools)."""
        tool = cast(SegmentByTextTool, super().from_context(context))  # ``cls(...)``: a SegmentByTextTool
        if not str(tool.options.get("detector") or "").strip():
            tool.options["detector"] = str(context.settings.get("zero_shot_object_detection_model") or "").strip()
        return tool

    @property
    def detector(self) -> str:
        """The detector's hub id or folder: the option, else the ``detector/`` folder inside a local SAM folder
        (how ``experts.tiny`` bundles the two), else OWL-ViT."""
        chosen = str(self.options.get("detector") or "").strip()
        if chosen:
            return chosen
        bundled = os.path.join(os.path.expanduser(self.model), "detector")
        return bundled if os.path.isdir(bundled) else DEFAULT_DETECTOR

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            processor = transformers.AutoProcessor.from_pretrained(location, token=token)
            # Any: transformers' stubs give ``model.to`` an unbound signature
            model: Any = transformers.SamModel.from_pretrained(location, dtype=args["dtype"], token=token)
            return SamSegmenter(model.to(device).eval(), processor, device)

        return self.load_checkpoint(build, device, dtype)

    def detect(self, picture: Any, labels: str) -> list[tuple[str, float, list[int]]]:
        """The zero-shot detector's matches, through the manager under the zero-shot tool's own key."""
        from ..runtime.models.loading import load_pipeline

        detector = self.detector
        key = (detector, "zero-shot-object-detection", self.device, self.dtype)
        prefix = tool_key(self.name)
        pipe = self.manager.get(key, lambda: load_pipeline(
            "zero-shot-object-detection", detector, device=self.device, dtype=self.dtype, tool=self.name,
            setting=f"{prefix}_detector", token=self.hf_token), device=self.device)
        threshold = float(self.options["threshold"])
        with self.manager.call_lock(key):
            found = pipe(picture, candidate_labels=parse_labels(labels), threshold=threshold)
        return _clipped_matches(found, picture.size, threshold)[: max(1, int(self.options["max_objects"]))]

    def call_local(self, model: Any, *, image: str, labels: str) -> Any:
        picture = open_image(image)
        found = self.detect(picture, labels)
        masks, quality = model(picture, [box for _, _, box in found])
        return {"objects": [(label, score, box, mask, iou) for (label, score, box), mask, iou
                            in zip(found, masks, quality, strict=False)]}

    def call_remote(self, endpoint: RemoteEndpoint, **inputs: Any) -> Any:
        raise ToolExecutionError(f"{self.name} runs two models (a detector and SAM), only locally; unset "
                                 f"{tool_key(self.name)}_endpoint")

    def render(self, result: Any, *, image: str, labels: str) -> str:
        import numpy as np
        from PIL import Image

        from .dense import PALETTE, paint_masks

        source = self.rel(image)
        objects = [o for o in result["objects"] if o[3].any()]
        if not objects:
            return (f"Nothing matching {labels} found in {source} with a score of at least "
                    f"{float(self.options['threshold']):.2f} (set segment_by_text_threshold lower to see weaker "
                    f"matches).")
        picture = open_image(image)
        colours = [PALETTE[i % len(PALETTE)] for i in range(len(objects))]
        lines = [f"Found {len(objects)} object(s) matching {labels} in {source} (boxes are [xmin, ymin, xmax, ymax] "
                 f"in pixels):"]
        for (label, score, box, mask, quality), (colour, _) in zip(objects, colours, strict=False):
            lines.append(f"- {label} {score:.2f} {box}, {100 * float(mask.mean()):.1f}% of the image ({colour}), "
                         f"mask quality {quality:.2f}")
        painted = paint_masks(picture, [(rgb, o[3]) for (_, rgb), o in zip(colours, objects, strict=False)],
                              float(self.options["alpha"]))
        union = np.any(np.stack([o[3] for o in objects]), axis=0)
        lines.append(f"Segmentation image: {self.save_image(painted, image, 'segment')}")
        mask_name = self.save_image(Image.fromarray((union * 255).astype(np.uint8), "L"), image, "mask")
        lines.append(f"Mask (white = the objects): {mask_name}")
        return ToolResult("\n".join(lines), value=mask_name)
