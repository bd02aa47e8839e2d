"""Open-vocabulary detection: find the things an image shows that match text labels (OWL-ViT, OWLv2).

``zero-shot-object-detection`` runs transformers' pipeline of that name: the
labels are free text (``"red car, dog, traffic light"``), the answer is each
found box with its label and score, like ``object-detection`` (and the same
annotated image, op ``detect``). OWL-ViT's scores are low compared with a
closed-set detector's: the default threshold is 0.1.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import ToolInputError
from ..tools.base import ToolResult
from .base import ExpertTool, image_base64, open_image
from .remote import RemoteEndpoint
from .vision import _records, _scored, draw_boxes

__all__ = ["ZeroShotObjectDetectionTool", "parse_labels", "LABELS_PARAMETERS"]

LABELS_PARAMETERS = {
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
    labels = []
    for part in parts:
        label = " ".join(str(part).split()).strip(" .'\"")
        if label and label.lower() not in {known.lower() for known in labels}:
            labels.append(label)
    return labels


class ZeroShotObjectDetectionTool(ExpertTool):
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

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Also accepts the plain form ``image/1a2b3c4d.png, cat, remote control`` (the image first)."""
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

    def call_local(self, model: Any, *, image: str, labels: str) -> Any:
        return model(open_image(image), candidate_labels=parse_labels(labels),
                     threshold=float(self.options["threshold"]))

    def call_remote(self, endpoint: RemoteEndpoint, *, image: str, labels: str) -> Any:
        """The inference API's body: the image as base64, the labels as ``candidate_labels``."""
        return endpoint.post_json(image_base64(image), {"candidate_labels": parse_labels(labels)})

    def render(self, result: Any, *, image: str, labels: str) -> str:
        picture = open_image(image)
        threshold = float(self.options["threshold"])
        found = []
        for label, score, record in _scored(_records(result)):
            box = record.get("box") or {}
            try:
                x0, y0, x1, y1 = (float(box[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
            except (KeyError, TypeError, ValueError):
                continue
            x0, x1 = sorted((min(max(x0, 0), picture.width - 1), min(max(x1, 0), picture.width - 1)))
            y0, y1 = sorted((min(max(y0, 0), picture.height - 1), min(max(y1, 0), picture.height - 1)))
            if score >= threshold:
                found.append((label, score, [int(round(v)) for v in (x0, y0, x1, y1)]))
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
